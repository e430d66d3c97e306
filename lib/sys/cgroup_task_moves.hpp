// Whether moving a task into another cgroup waits for an RCU grace period
// here, and the remount that stops it.
//
// A container's restore moves its first task into the container's cgroups
// (CRIU writes cgroup.procs), inside the downtime. Every such write takes
// the kernel's cgroup_threadgroup_rwsem for writing, and a percpu rwsem's
// writer waits for an RCU grace period unless another writer just had it:
// 15 ms of a podman container's 52 ms restore on this project's VMs. The
// cgroup mount option favordynmods (Linux 6.0) keeps that rwsem in its slow
// reader mode, so writers never wait; forks and exits pay a little more.
// It is one flag for the whole kernel: any hierarchy that has it sets it.
#pragma once

#include "sys/mountinfo.hpp"

#include <optional>
#include <string>
#include <vector>

namespace ferry::cgroup_task_moves {

// What to do about it, from the mounts.
struct plan {
    bool already_fast = false;         // some cgroup hierarchy has favordynmods
    std::optional<mount_entry> target; // the hierarchy to reconfigure
    std::vector<std::string> options;  // all its super options, favordynmods added
};

// cgroup2 if mounted, else the first cgroup v1 hierarchy. A reconfigure
// sets every option anew (cgroup2 clears nsdelegate and the memory options
// it is not given), so the plan carries the target's options, less rw/ro.
[[nodiscard]] plan plan_fast_moves(const std::vector<mount_entry>& mounts);

// Reconfigures the plan's target with its options through fspick and
// fsconfig, which leave the mount's own flags (nosuid, nodev, noexec)
// alone, as mount(MS_REMOUNT) would not. Throws ferry::error.
void apply(const plan& p);

// Applies `p` (a plan whose moves are not fast yet, read from
// `mountinfo_path`) and checks that the option took: the kernel refuses it
// before Linux 6.0 and ignores it outside the initial cgroup namespace.
// Returns a sentence for the log; throws ferry::error if it did not take.
std::string make_fast(const plan& p, const std::string& mountinfo_path = "/proc/self/mountinfo");

} // namespace ferry::cgroup_task_moves
