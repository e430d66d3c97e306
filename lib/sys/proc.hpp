// Reading process trees from /proc.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include <filesystem>
#include <istream>
#include <map>
#include <optional>
#include <string>
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

// Every process of the tree rooted at `root` (host pids), root first.
std::vector<pid_t> tree(pid_t root);

// One thread as /proc shows it.
struct thread_state {
    pid_t tid = 0;
    char state = '?'; // the letter of /proc/PID/task/TID/stat
    pid_t tracer = 0; // TracerPid: 0 when not traced
};
// Every thread of `pid`; empty when the process is gone.
std::vector<thread_state> threads(pid_t pid);

// Resident plus swapped memory of one process (smaps_rollup), bytes; 0 when gone.
uint64_t memory_bytes(pid_t pid);

// The parent's pid (PPid); 0 when the process is gone.
pid_t parent(pid_t pid);

// The command name (comm); empty when the process is gone.
std::string comm(pid_t pid);

// Whether the environment of `pid` holds exactly the entry `entry` ("NAME=VALUE").
bool environ_has(pid_t pid, const std::string& entry);

// The command line of `pid`, its arguments separated by NULs; empty when
// the process is gone, also when it goes while this reads.
std::string cmdline(pid_t pid);

// What is left in `in`, up to its end or its first read error. A /proc file
// of a process that exits after the open fails its read with ESRCH, which
// libstdc++ throws from the stream buffer itself: an istreambuf_iterator
// lets that out, `migrator status` died of it.
std::string rest_of(std::istream& in);

// The process's start time in clock ticks since boot (stat field 22), which
// tells a process from a later one that reused its pid; 0 when gone.
uint64_t start_time(pid_t pid);

// The TCP sockets (IPv4 and IPv6, any state) in the network namespace of
// `pid`, from /proc/PID/net/tcp{,6}; nothing if those cannot be read.
std::optional<size_t> tcp_sockets(pid_t pid);

// The directory of the running executable (to find Ferry's other binaries).
std::filesystem::path self_dir();

// SIGKILLs every descendant of `pid` (deepest first), but not `pid` itself.
void kill_descendants(pid_t pid);

} // namespace ferry::proc
