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

} // namespace ferry::criu
