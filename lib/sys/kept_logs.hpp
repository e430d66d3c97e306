// A migration leaves CRIU's logs in its work directory for the post-mortem:
// the migrator's when it fails (under its --work-dir, /dev/shm/ferry by
// default), the destination daemon's always (under pagesrv's --work-dir).
// Those are memory (tmpfs), and a host that runs many migrations would keep
// them all: only the newest ones stay.
#pragma once

#include <cstddef>
#include <filesystem>

namespace ferry {

// Removes from `work_root` the directories of ended migrations that hold
// only logs (a 32-hex-digit name, nothing but regular *.log files), all but
// the `keep` newest by modification time. A directory with anything else
// in it (a migration under way writes its images there) is never touched.
// Returns how many were removed; errors leave a directory in place.
size_t prune_kept_logs(const std::filesystem::path& work_root, size_t keep);

inline constexpr size_t kept_migration_logs = 32;

} // namespace ferry
