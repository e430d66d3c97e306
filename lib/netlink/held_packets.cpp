#include "netlink/held_packets.hpp"

#include "core/clock.hpp"
#include "core/error.hpp"
#include "netlink/netns.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/ip.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ferry::netlink {

namespace {

constexpr int capture_buffer = 8 << 20;
constexpr size_t largest_packet = 65536;

} // namespace

held_packets::held_packets(const std::filesystem::path& netns,
                           const std::vector<link_identity>& links) {
    for (const auto& l : links)
        for (const auto& a : l.ipv4)
            _addresses.push_back(a.addr);
    try {
        // The sockets belong to the namespace they were opened in.
        in_netns(netns, [&] {
            for (const auto& l : links) {
                const unsigned index = ::if_nametoindex(l.name.c_str());
                if (index == 0)
                    throw error(fmt::format("no link {} to hold packets on", l.name));
                // Protocol 0 takes nothing until the bind names the link,
                // so no other link's packet gets in first.
                const int fd = ::socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
                if (fd < 0)
                    throw sys_error("socket AF_PACKET");
                _fds.push_back(fd);
                (void)::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &capture_buffer,
                                   sizeof capture_buffer);
                sockaddr_ll at{};
                at.sll_family = AF_PACKET;
                at.sll_protocol = htons(ETH_P_IP);
                at.sll_ifindex = int(index);
                if (::bind(fd, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0)
                    throw sys_error("bind AF_PACKET to " + l.name);
            }
        });
    } catch (...) {
        for (int fd : _fds)
            ::close(fd);
        throw;
    }
    _thread = std::thread([this] { capture(); });
}

held_packets::~held_packets() {
    stop();
}

void held_packets::stop() noexcept {
    _stop.store(true);
    if (_thread.joinable())
        _thread.join();
    for (int fd : _fds)
        ::close(fd);
    _fds.clear();
}

void held_packets::capture() {
    std::vector<pollfd> fds;
    for (int fd : _fds)
        fds.push_back({fd, POLLIN, 0});
    std::vector<uint8_t> buf(largest_packet);
    while (!_stop.load()) {
        if (::poll(fds.data(), fds.size(), 20) <= 0)
            continue;
        for (const auto& p : fds) {
            for (;;) {
                sockaddr_ll from{};
                socklen_t from_len = sizeof from;
                const ssize_t n = ::recvfrom(p.fd, buf.data(), buf.size(), 0,
                                             reinterpret_cast<sockaddr*>(&from), &from_len);
                if (n <= 0)
                    break;
                if (from.sll_pkttype != PACKET_HOST || size_t(n) < sizeof(iphdr))
                    continue;
                iphdr ip{};
                std::memcpy(&ip, buf.data(), sizeof ip);
                if (ip.version != 4 || ip.protocol != IPPROTO_TCP ||
                    std::find(_addresses.begin(), _addresses.end(), ip.daddr) == _addresses.end())
                    continue;
                held_packet h{monotonic_ns(), {buf.begin(), buf.begin() + n}};
                std::lock_guard lock(_mu);
                _held_bytes += h.ipv4.size();
                _held.push_back(std::move(h));
                while (_held.size() > max_packets || _held_bytes > max_bytes) {
                    _held_bytes -= _held.front().ipv4.size();
                    _held.pop_front();
                    _overflowed.fetch_add(1);
                }
            }
        }
    }
}

std::vector<held_packet> held_packets::take(uint64_t since_ns) {
    std::lock_guard lock(_mu);
    std::vector<held_packet> out;
    for (auto& h : _held)
        if (h.at_ns >= since_ns)
            out.push_back(std::move(h));
    _held.clear();
    _held_bytes = 0;
    return out;
}

} // namespace ferry::netlink
