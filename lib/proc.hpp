// Reading process trees from /proc.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <optional>
#include <vector>

namespace ferry::proc {

// The pids of `pid` in each nested pid namespace, outermost first (NSpid).
// Empty when the process does not exist.
std::vector<pid_t> ns_pids(pid_t pid);

[[nodiscard]] bool exists(pid_t pid);

// The state letter of /proc/PID/stat ('R', 'S', 'T', 'Z', ...), or nothing
// when the process does not exist.
[[nodiscard]] std::optional<char> state(pid_t pid);

// The child processes of every thread of `pid`.
std::vector<pid_t> children(pid_t pid);

// Maps each process of the tree rooted at `root` (host pids) from its pid in
// the innermost namespace to its host pid.
std::map<pid_t, pid_t> map_tree_by_inner_pid(pid_t root);

// The directory of the running executable (to find Ferry's other binaries).
std::filesystem::path self_dir();

// SIGKILLs every descendant of `pid` (deepest first), but not `pid` itself.
void kill_descendants(pid_t pid);

} // namespace ferry::proc
