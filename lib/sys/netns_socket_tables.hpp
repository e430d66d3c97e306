// Socket hash tables of their own for the network namespaces created from
// now on, so that listing a container's sockets walks its table, not the
// host's.
//
// CRIU's dump lists a network namespace's sockets through sock_diag, inside
// the freeze (with criu-patches/0016, the inet ones only once it meets a
// task's first inet socket, which a server always has). For TCP and UDP the
// kernel walks every bucket of the hash table the namespace uses, and a
// namespace shares the host's global tables (262144 TCP buckets on a 24 GiB
// host) unless it was created while its parent's
// net.ipv4.tcp_child_ehash_entries (Linux 6.1) or udp_child_hash_entries
// (6.2) was set: 2.7 ms per address family, 5.5 ms of a podman container's
// dump on this project's VMs. A table of its own is
// sized once, at the namespace's creation: a namespace with far more
// connections than its buckets pays longer chains.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace ferry::netns_socket_tables {

// The sizes Ferry asks for: 16384 TCP buckets (128 KiB per namespace) keep
// chains short to ~16k connections; UDP's slots are larger and its sockets
// fewer.
inline constexpr uint32_t tcp_buckets = 16384;
inline constexpr uint32_t udp_slots = 1024;

struct setting {
    std::string name; // e.g. "net.ipv4.tcp_child_ehash_entries"
    std::string path; // under /proc/sys, e.g. "net/ipv4/tcp_child_ehash_entries"
    uint32_t wanted = 0;
};

// What to write: each setting still 0 (an administrator's own size stays),
// from the current values; a setting the kernel lacks is left out.
[[nodiscard]] std::vector<setting> plan(const std::filesystem::path& proc_sys);

// Writes the plan's settings into `proc_sys` and reads them back. Returns
// what now holds, for the log; throws ferry::error naming the setting that
// could not be written.
std::string apply(const std::filesystem::path& proc_sys, const std::vector<setting>& settings);

// One line for the log on what new namespaces get, from the current values.
[[nodiscard]] std::string describe(const std::filesystem::path& proc_sys);

} // namespace ferry::netns_socket_tables
