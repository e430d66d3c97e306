#include "netlink/announce.hpp"

#include "core/error.hpp"
#include "core/unique_fd.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace ferry::netlink {

namespace {

// An Ethernet/IPv4 ARP packet (RFC 826), as it goes on the wire.
struct [[gnu::packed]] arp_packet {
    uint16_t hardware = htons(ARPHRD_ETHER);
    uint16_t protocol = htons(ETH_P_IP);
    uint8_t hardware_len = 6;
    uint8_t protocol_len = 4;
    uint16_t op = htons(ARPOP_REQUEST);
    uint8_t sender_mac[6] = {};
    uint32_t sender_ip = 0;
    uint8_t target_mac[6] = {};
    uint32_t target_ip = 0;
};
static_assert(sizeof(arp_packet) == 28);

} // namespace

// Protocol 0: the socket only sends, so no ARP frame of the namespace is
// copied to it.
announcer::announcer() : _sock(::socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) {
    if (!_sock)
        throw error(fmt::format("cannot open a packet socket: {}", std::strerror(errno)));
}

void announcer::announce(const link_identity& link, int rounds) {
    if (link.ipv4.empty())
        return;
    // The socket's own namespace names the link, whichever thread asks.
    ifreq req{};
    std::strncpy(req.ifr_name, link.name.c_str(), IFNAMSIZ - 1);
    if (::ioctl(_sock.get(), SIOCGIFINDEX, &req) != 0)
        throw error(fmt::format("no link {} to announce from", link.name));
    sockaddr_ll to{};
    to.sll_family = AF_PACKET;
    to.sll_protocol = htons(ETH_P_ARP);
    to.sll_ifindex = req.ifr_ifindex;
    to.sll_halen = 6;
    std::memset(to.sll_addr, 0xff, 6);
    int sent = 0;
    std::string last_error;
    for (int round = 0; round < rounds; round++)
        for (const auto& a : link.ipv4) {
            // A request for its own address: every host updates an entry it
            // has, and the switch learns where the MAC is now.
            arp_packet p;
            std::memcpy(p.sender_mac, link.mac.data(), 6);
            p.sender_ip = a.addr;
            p.target_ip = a.addr;
            if (::sendto(_sock.get(), &p, sizeof p, 0, reinterpret_cast<const sockaddr*>(&to),
                         sizeof to) == ssize_t(sizeof p))
                sent++;
            else
                last_error = std::strerror(errno);
        }
    if (sent == 0)
        throw error(fmt::format("cannot announce {} on {}: {}", address_only(link.ipv4.front()),
                                link.name, last_error));
}

} // namespace ferry::netlink
