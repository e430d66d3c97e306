// The migrations in flight on this host, as files an operator's tools can
// read: one JSON record per migration in /run/ferry/migrations/<id>/, written by
// the migrator at every phase change (atomically, by rename) and removed
// when it ends. `migrator status` lists them; `migrator abort ID` ends one
// safely, even when the migrator that wrote it is gone.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace ferry::records {

struct migration_record {
    std::string id;
    std::string mode; // "migrate", "checkpoint" (to the pool), "restore" (from the pool)
    pid_t migrator_pid = 0;
    uint64_t migrator_start = 0; // its start time, which tells it from a reused pid
    pid_t source_pid = 0;        // the workload's root on this host; 0 for a restore
    std::string container, engine;
    std::string destination;
    std::string phase;
    uint64_t started_unix_ms = 0;
    uint64_t phase_since_unix_ms = 0;
    bool committed = false;         // the destination owns the workload now
    bool cgroup_was_frozen = false; // the workload was paused before the freeze
    std::string work_dir;           // CRIU's images and logs
    std::string local_daemon;       // this host's pagesrv
};

// /run/ferry/migrations, or `root` for tests.
std::filesystem::path records_dir();

void write(const migration_record& r, const std::filesystem::path& dir = records_dir());
void remove(const std::string& id, const std::filesystem::path& dir = records_dir()) noexcept;
// Every readable record (a malformed one is skipped), oldest first.
std::vector<migration_record> list(const std::filesystem::path& dir = records_dir());
// The record whose id is `id` or starts with it; throws ferry::error if
// none or several match.
migration_record find(const std::string& id, const std::filesystem::path& dir = records_dir());

// The migrator that wrote the record still runs (same pid, same start time).
[[nodiscard]] bool migrator_alive(const migration_record& r);

uint64_t now_unix_ms();

} // namespace ferry::records
