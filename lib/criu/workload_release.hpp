// Getting a workload back from a CRIU that is stuck or gone.
//
// A migration that cannot finish must leave its source running, and the way
// out must not wait on the stuck thing again. When CRIU does not answer, it
// is killed: the kernel then detaches every tracee (CRIU never seizes with
// PTRACE_O_EXITKILL), so the tasks run on. What CRIU would have undone
// itself is undone here: a freezer cgroup left frozen and the network lock
// of the workload's own network namespace. migrator/README.md has the
// matrix of what is safe at each phase, and why.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace ferry::criu {

// The CRIU processes working for a migration: command name "criu" and
// FERRY_MIGRATION_ID=<id> in their environment (Ferry sets it for the CRIU
// it starts, and its runc shim for runc's).
std::vector<pid_t> find_migration_criu(const std::string& migration_id);

// What every thread of a workload is doing, as /proc shows it.
struct workload_state {
    struct task {
        pid_t pid = 0, tid = 0;
        char state = '?';
        pid_t tracer = 0;
    };
    std::vector<task> tasks;
    std::vector<pid_t> parasite_mapped; // processes still mapping CRIU's parasite blob

    // Every thread exists and runs or sleeps: none is stopped, traced or dead.
    [[nodiscard]] bool running() const;
    // No task is left (or only zombies).
    [[nodiscard]] bool gone() const;
    // "pid 12 (tid 13) t traced by 40; ..." for the tasks that do not run.
    [[nodiscard]] std::string describe_stuck() const;
};

workload_state inspect_workload(pid_t root);

struct release_request {
    pid_t root = 0; // the workload's root, a host pid
    std::string migration_id;
    std::vector<pid_t> criu; // CRIU processes known to the caller (its own child)
    // Committed: the destination runs the workload, so the source must never
    // run again: its tasks are killed before CRIU, while they are still held.
    bool end_workload = false;
    // The workload's freezer cgroup was frozen before the migration (then it
    // is not thawed: it was paused by someone else).
    bool was_frozen_before = false;
    std::chrono::milliseconds bound{10'000};
    // Called once CRIU is gone, before anything is thawed: an engine whose
    // checkpoint command now fails may resume the container itself (docker's
    // containerd thaws what it paused), and must be let do so first or its
    // own records disagree with the container.
    std::function<void()> after_criu_killed;
};

struct release_result {
    bool ok = false;     // the workload runs (end_workload: it is gone)
    std::string summary; // what was done and the tasks' final state
    std::vector<pid_t> killed_criu;
    bool thawed = false;
    bool network_unlocked = false;
    workload_state final_state;
};

// Kills CRIU, undoes what it left, and waits (within `bound`) until the
// workload runs or, with end_workload, is gone. Never throws; bounded.
release_result release_workload(const release_request& r);

// The freezer state of a process's cgroup (v1 freezer.state or v2
// cgroup.freeze): true if frozen or freezing.
bool cgroup_frozen(pid_t pid);
// Freezes (or thaws) a process's cgroup; false if it has no freezer.
bool set_cgroup_frozen(pid_t pid, bool frozen);

} // namespace ferry::criu
