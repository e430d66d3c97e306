// What containerd leaves behind for a `docker start --checkpoint`.
//
// containerd (services/tasks, Create) unpacks the checkpoint it is handed
// into a fresh temporary directory, "ctrd-checkpoint*" under its
// XDG_RUNTIME_DIR or TMPDIR (else /tmp), and never removes it: every docker
// restore leaves one, with Ferry's restore request (and, for a cold
// restore, a copy of CRIU's images) in it.
#pragma once

#include <filesystem>
#include <string>

namespace ferry::engines::docker {

// Removes the staging directories of every running containerd that hold
// Ferry's restore request for `migration_id`, and only those. Returns how
// many went. `proc` is /proc (a test passes a tree of its own). Errors are
// not thrown: what cannot be read or removed is left where it is.
int remove_containerd_staging(const std::string& migration_id,
                              const std::filesystem::path& proc = "/proc") noexcept;

} // namespace ferry::engines::docker
