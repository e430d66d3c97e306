// Where CRIU finds the cgroup hierarchies (--cgroup-yard).
//
// By default CRIU mounts every hierarchy in a yard of its own at each
// container dump and restore, and detaches them afterwards; here that is
// about 30 ms of a container's freeze and 10-20 ms of its restore (each
// detach waits for an RCU grace period). Where the host already has every
// hierarchy mounted under one directory with CRIU's names for them
// ("cpu,cpuacct", "systemd" for name=systemd, "unified" for cgroup v2), as
// systemd's hybrid layout does in /sys/fs/cgroup, CRIU can take that
// directory as its yard and mount nothing. It only reads there at the dump,
// and at the restore creates what it would have created in its own yard (the
// same hierarchies); it never unmounts a yard it was given.
#pragma once

#include <filesystem>
#include <string>

namespace ferry::criu {

struct yard_choice {
    std::filesystem::path dir; // empty: CRIU mounts its own
    std::string why_not;
};

// `proc`: where procfs is; `root`: where the host's hierarchies are mounted.
yard_choice host_cgroup_yard(const std::filesystem::path& proc = "/proc",
                             const std::filesystem::path& root = "/sys/fs/cgroup");

// The CRIU config line that uses `choice` ("" when CRIU mounts its own).
std::string cgroup_yard_config_line(const yard_choice& choice);

// Whether moving a task into a cgroup is quick on this host. Every move
// takes one kernel-wide lock (cgroup_threadgroup_rwsem) as a writer, which
// waits for an RCU grace period unless a cgroup hierarchy is mounted with
// favordynmods (Linux 6.0+; it makes forks and exits a little slower).
// A container's restore moves its tasks into their cgroups: in CRIU's log
// here, that move took 11 ms without it and under 1.5 ms with it.
bool cgroup_moves_are_quick(const std::filesystem::path& proc = "/proc");

} // namespace ferry::criu
