// Delivering held packets (held_packets.hpp) to the copy of their container:
// each is sent, as it was, to its own destination address from inside the
// copy's network namespace, which owns that address, so the kernel takes
// it in as if it had just arrived. Run inside the namespace (in_netns).
#pragma once

#include "core/unique_fd.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace ferry::netlink {

// Fixes the TCP checksum of an IPv4 packet in place (a packet captured on
// its way in may carry only the partial sum its sender's offload left).
// False if it is not a whole TCP/IPv4 packet.
bool fix_tcp_checksum(std::span<uint8_t> packet);

// A raw IPv4 socket of the calling thread's namespace, which delivers there
// from any thread.
unique_fd open_injector();

// Delivers each TCP/IPv4 packet through `injector`; returns how many went
// in. Malformed ones are skipped.
size_t inject_ipv4(int injector, std::vector<std::vector<uint8_t>>& packets);

} // namespace ferry::netlink
