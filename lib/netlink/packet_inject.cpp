#include "netlink/packet_inject.hpp"

#include "core/error.hpp"
#include "core/unique_fd.hpp"

#include <arpa/inet.h>
#include <linux/ip.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

namespace ferry::netlink {

namespace {

uint32_t sum16(const uint8_t* p, size_t n, uint32_t sum) {
    for (; n > 1; p += 2, n -= 2)
        sum += uint32_t(p[0]) << 8 | p[1];
    if (n)
        sum += uint32_t(p[0]) << 8;
    return sum;
}

uint16_t fold(uint32_t sum) {
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return uint16_t(~sum);
}

} // namespace

bool fix_tcp_checksum(std::span<uint8_t> packet) {
    if (packet.size() < sizeof(iphdr))
        return false;
    iphdr ip{};
    std::memcpy(&ip, packet.data(), sizeof ip);
    const size_t header = size_t(ip.ihl) * 4;
    const size_t total = ntohs(ip.tot_len);
    if (ip.version != 4 || ip.protocol != IPPROTO_TCP || header < sizeof(iphdr) ||
        total > packet.size() || total < header + 20 || (ntohs(ip.frag_off) & 0x3fff) != 0)
        return false;
    uint8_t* tcp = packet.data() + header;
    const size_t tcp_len = total - header;
    tcp[16] = tcp[17] = 0;
    uint32_t sum = sum16(reinterpret_cast<const uint8_t*>(&ip.saddr), 4, 0);
    sum = sum16(reinterpret_cast<const uint8_t*>(&ip.daddr), 4, sum);
    sum += IPPROTO_TCP + uint32_t(tcp_len);
    const uint16_t check = fold(sum16(tcp, tcp_len, sum));
    tcp[16] = uint8_t(check >> 8);
    tcp[17] = uint8_t(check & 0xff);
    return true;
}

unique_fd open_injector() {
    unique_fd raw(::socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW));
    if (!raw)
        throw sys_error("socket IPPROTO_RAW");
    return raw;
}

size_t inject_ipv4(int injector, std::vector<std::vector<uint8_t>>& packets) {
    size_t delivered = 0;
    for (auto& p : packets) {
        if (!fix_tcp_checksum(p))
            continue;
        iphdr ip{};
        std::memcpy(&ip, p.data(), sizeof ip);
        sockaddr_in to{};
        to.sin_family = AF_INET;
        to.sin_addr.s_addr = ip.daddr;
        const size_t total = ntohs(ip.tot_len);
        if (::sendto(injector, p.data(), total, 0, reinterpret_cast<sockaddr*>(&to), sizeof to) ==
            ssize_t(total))
            delivered++;
    }
    return delivered;
}

} // namespace ferry::netlink
