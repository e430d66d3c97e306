// /proc/PID/mountinfo, one entry per mount.
#pragma once

#include <string>
#include <vector>

namespace ferry {

struct mount_entry {
    std::string root;          // the mount's root within its filesystem ("net:[INODE]" for nsfs)
    std::string point;         // where it is mounted, unescaped
    std::string fstype;        // "cgroup2", "nsfs", ...
    std::string super_options; // the filesystem's options, comma-separated
};

// The mounts of mountinfo's text. Paths come unescaped (the kernel writes
// space, tab, newline and backslash as \ooo); malformed lines are skipped.
std::vector<mount_entry> parse_mountinfo(const std::string& text);

// The same, read from a file (/proc/self/mountinfo); none if unreadable.
std::vector<mount_entry> read_mountinfo(const std::string& path);

// The non-empty items of a comma-separated list: a mount's super options,
// or the controllers of a /proc/PID/cgroup line.
std::vector<std::string> comma_list(const std::string& s);

} // namespace ferry
