// A cpu cgroup whose cpu.idle is 1 (Linux 5.15), for the threads whose work
// nothing waits for, so that they yield to the host's other groups too.
//
// SCHED_IDLE ranks a thread only among the threads of its own group: the
// scheduler picks a group first, at the group's weight, then a thread
// within it. A workload runs in another group wherever it is a container
// (its own cgroup), and in the root cgroup wherever the kernel's autogroups
// are on (kernel.sched_autogroup_enabled: a group per session, the default
// of Debian's kernels and of this project's VMs). There an idle-policy
// thread of Ferry's still gets its group's full share against the workload.
// A group marked idle is itself at the idle policy among its siblings: the
// kernel compares two threads' groups at their common level. So the group
// sits at the top of the cpu hierarchy, where its siblings are every other
// group of the host (a container's, a service's, the autogroups); under
// the daemon's own service group it would yield only to that service's
// other threads. Its threads leave the daemon's cpu group, and any CPU
// quota set there: they take only time no one else wants.
//
// cgroup v1 only for now: there any thread joins any group of the cpu
// hierarchy. cgroup v2 moves threads apart only inside a threaded subtree,
// under their process's own cgroup, where an idle group would yield only
// to its own service; the work would have to be another process's. Not
// done, and said so.
#pragma once

#include "core/unique_fd.hpp"

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <string_view>

namespace ferry::proc {

class idle_cpu_group {
  public:
    // The group `name` at the top of the cpu hierarchy as this mount
    // namespace shows it, made if missing, with cpu.idle set to 1; threads
    // go back to this process's own cpu cgroup. Where there can be none (no
    // cgroup v1 cpu hierarchy, no cpu.idle, no permission), a group that is
    // not usable and says why. `proc`: where procfs is.
    static idle_cpu_group open(std::string_view name, const std::filesystem::path& proc = "/proc");

    idle_cpu_group() = default;

    [[nodiscard]] bool usable() const noexcept { return _group_tasks.valid(); }
    [[nodiscard]] const std::string& why_not() const noexcept { return _why_not; }
    [[nodiscard]] const std::filesystem::path& dir() const noexcept { return _dir; }

    // Moves thread `tid` (0: the caller) into the group, or back to the
    // process's own cgroup. False, with errno, if the kernel refused or
    // the group is not usable; callers treat both as best effort. No
    // allocation.
    [[nodiscard]] bool join(pid_t tid = 0) const noexcept;
    [[nodiscard]] bool leave(pid_t tid = 0) const noexcept;

    // Removes the group's directory if no thread is left in it (any
    // process of the host may share it); quiet if one is.
    void remove_if_empty() const noexcept;

  private:
    std::filesystem::path _dir;
    unique_fd _group_tasks; // the group's "tasks" file, open for writing
    unique_fd _home_tasks;  // the process's own cgroup's
    std::string _why_not;
};

// The calling thread's cgroup in the cpu hierarchy as the kernel has it
// ("" without a v1 cpu hierarchy): what a log line can show.
std::string calling_thread_cpu_cgroup(const std::filesystem::path& proc = "/proc");

} // namespace ferry::proc
