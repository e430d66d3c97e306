// Packets that reach a container's old host while it is frozen: CRIU's
// network lock drops them, and each costs its sender a retransmission
// timeout (200 ms or more) once the container runs elsewhere. Capturing them
// on the source (at the link, before the lock's netfilter rules) lets the
// destination deliver them to the copy the moment it runs (packet_inject).
#pragma once

#include "netlink/link_identity.hpp"

#include <atomic>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

namespace ferry::netlink {

struct held_packet {
    uint64_t at_ns = 0;        // monotonic, when it arrived
    std::vector<uint8_t> ipv4; // the IPv4 packet, header first
};

class held_packets {
  public:
    // The newest packets are kept: older ones arrived before the freeze,
    // when the source still took them itself.
    static constexpr size_t max_packets = 16384;
    static constexpr size_t max_bytes = 64u << 20;

    // Starts holding copies of the TCP/IPv4 packets that arrive on `links`
    // of network namespace `netns` for their addresses. Throws if it
    // cannot open a link.
    held_packets(const std::filesystem::path& netns, const std::vector<link_identity>& links);
    ~held_packets();
    held_packets(const held_packets&) = delete;
    held_packets& operator=(const held_packets&) = delete;

    // What arrived at or after `since_ns` and was not taken before; the
    // hold goes on.
    std::vector<held_packet> take(uint64_t since_ns);
    void stop() noexcept;
    // Packets let go because the bounds were reached.
    [[nodiscard]] size_t overflowed() const noexcept { return _overflowed.load(); }

  private:
    void capture();

    std::vector<int> _fds;
    std::vector<uint32_t> _addresses; // network byte order
    std::atomic<bool> _stop{false};
    std::atomic<size_t> _overflowed{0};
    std::mutex _mu;
    std::deque<held_packet> _held;
    size_t _held_bytes = 0;
    std::thread _thread;
};

} // namespace ferry::netlink
