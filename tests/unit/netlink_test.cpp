// lib/netlink: a container's network identity, its wire form, and the real
// kernel steps of a move (two network namespaces joined by a veth pair):
// addresses, arp_ignore, MACs, holding packets on one side and delivering
// crafted ones on the other.
#include "core/error.hpp"
#include "core/unique_fd.hpp"
#include "netlink/held_packets.hpp"
#include "netlink/link_identity.hpp"
#include "netlink/links.hpp"
#include "netlink/moving_link_wire.hpp"
#include "netlink/netns.hpp"
#include "netlink/packet_inject.hpp"
#include "sys/subprocess.hpp"

#include <arpa/inet.h>
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <netinet/ip.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

using namespace ferry;
using namespace ferry::netlink;

namespace {

// The one's-complement sum of a whole TCP/IPv4 packet's segment with its
// pseudo-header: 0xffff when its checksum is right.
uint16_t tcp_sum(const std::vector<uint8_t>& p) {
    const size_t header = size_t(p[0] & 0x0f) * 4;
    const size_t total = size_t(p[2]) << 8 | p[3];
    uint32_t sum = 0;
    auto add = [&](const uint8_t* d, size_t n) {
        for (size_t i = 0; i + 1 < n; i += 2)
            sum += uint32_t(d[i]) << 8 | d[i + 1];
        if (n % 2)
            sum += uint32_t(d[n - 1]) << 8;
    };
    add(p.data() + 12, 8); // source and destination
    sum += IPPROTO_TCP + uint32_t(total - header);
    add(p.data() + header, total - header);
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return uint16_t(sum);
}

// A SYN from `from`:`sport` to `to`:`dport` with sequence `seq`, its TCP
// checksum left wrong (as an offloading sender leaves it).
std::vector<uint8_t> syn(const char* from, const char* to, uint16_t sport, uint16_t dport,
                         uint32_t seq) {
    std::vector<uint8_t> p(40, 0);
    p[0] = 0x45;
    p[3] = 40;
    p[8] = 64;
    p[9] = IPPROTO_TCP;
    inet_pton(AF_INET, from, p.data() + 12);
    inet_pton(AF_INET, to, p.data() + 16);
    p[20] = uint8_t(sport >> 8), p[21] = uint8_t(sport);
    p[22] = uint8_t(dport >> 8), p[23] = uint8_t(dport);
    p[24] = uint8_t(seq >> 24), p[25] = uint8_t(seq >> 16), p[26] = uint8_t(seq >> 8),
    p[27] = uint8_t(seq);
    p[32] = 5 << 4; // data offset
    p[33] = 0x02;   // SYN
    p[34] = 0xff, p[35] = 0xff;
    p[36] = 0x12, p[37] = 0x34; // a wrong checksum
    return p;
}

// Two namespaces joined by a veth pair, removed at the end.
struct veth_pair {
    std::string a, b;
    veth_pair() {
        const auto tag = std::to_string(::getpid());
        a = "fnl-a" + tag;
        b = "fnl-b" + tag;
        (void)run_capture({"ip", "netns", "add", a}, std::chrono::seconds(10));
        (void)run_capture({"ip", "netns", "add", b}, std::chrono::seconds(10));
        (void)run_capture({"ip", "link", "add", "v0", "netns", a, "type", "veth", "peer", "name",
                           "v1", "netns", b},
                          std::chrono::seconds(10));
        // Loopback too: a packet delivered inside a namespace goes through it.
        for (const auto& [ns, link] :
             {std::pair{a, "v0"}, std::pair{b, "v1"}, std::pair{a, "lo"}, std::pair{b, "lo"}})
            (void)run_capture({"ip", "-n", ns, "link", "set", link, "up"},
                              std::chrono::seconds(10));
    }
    ~veth_pair() {
        for (const auto& ns : {a, b}) {
            try {
                (void)run_capture({"ip", "netns", "del", ns}, std::chrono::seconds(10));
            } catch (...) {
            }
        }
    }
    std::filesystem::path path(const std::string& ns) const { return "/run/netns/" + ns; }
};

} // namespace

TEST_CASE("link identities have a text form that parses back") {
    const auto a = parse_ipv4("10.78.0.70/24");
    REQUIRE(a);
    CHECK(to_string(*a) == "10.78.0.70/24");
    CHECK(address_only(*a) == "10.78.0.70");
    CHECK(parse_ipv4("10.78.0.70")->prefix == 32);
    for (const char* bad : {"10.78.0/24", "10.78.0.70/33", "10.78.0.256", "x", "10.78.0.70/"})
        CHECK_FALSE(parse_ipv4(bad));
    const auto mac = parse_mac("02:ab:CD:00:01:ff");
    REQUIRE(mac);
    CHECK(to_string(*mac) == "02:ab:cd:00:01:ff");
    CHECK_FALSE(parse_mac("02:ab:cd:00:01"));
    CHECK_FALSE(parse_mac("02:ab:cd:00:01:fg"));
}

TEST_CASE("moving links survive the control connection, and malformed ones are refused") {
    link_identity l;
    l.name = "eth0";
    l.mac = *parse_mac("02:00:00:00:00:07");
    l.ipv4 = {*parse_ipv4("10.78.0.70/24"), *parse_ipv4("10.78.1.9/16")};
    moving_link_messages out({l});
    CHECK(from_messages(out.pointers.data(), out.pointers.size()) == std::vector{l});

    auto* m = out.pointers[0];
    m->mac.len = 5;
    CHECK_THROWS_AS(from_messages(out.pointers.data(), 1), error);
    m->mac.len = 6;
    char bad_address[] = "10.78.0.300/24";
    char* addresses[] = {bad_address};
    m->ipv4 = addresses;
    m->n_ipv4 = 1;
    CHECK_THROWS_AS(from_messages(out.pointers.data(), 1), error);
    char slash[] = "../x";
    m->n_ipv4 = 0;
    m->name = slash;
    CHECK_THROWS_AS(from_messages(out.pointers.data(), 1), error);
}

TEST_CASE("a held packet's TCP checksum is made whole before delivery") {
    auto p = syn("10.9.0.1", "10.9.0.2", 40000, 7000, 12345);
    CHECK(tcp_sum(p) != 0xffff);
    REQUIRE(fix_tcp_checksum(p));
    CHECK(tcp_sum(p) == 0xffff);
    auto udp = p;
    udp[9] = IPPROTO_UDP;
    CHECK_FALSE(fix_tcp_checksum(udp));
    auto short_one = p;
    short_one.resize(30);
    CHECK_FALSE(fix_tcp_checksum(short_one));
}

// Needs root and veth, as the integration tests do.
TEST_CASE("a move's kernel steps between two namespaces") {
    if (::geteuid() != 0) {
        WARN("needs root: skipped");
        return;
    }
    veth_pair net;
    const auto addr_a = *parse_ipv4("10.9.0.1/24");
    const auto addr_b = *parse_ipv4("10.9.0.2/24");
    in_netns(net.path(net.a), [&] { link_control().add_ipv4("v0", addr_a); });
    // Opened inside b, it acts there from this thread.
    std::unique_ptr<link_control> in_b;
    in_netns(net.path(net.b), [&] { in_b = std::make_unique<link_control>(); });
    {
        auto& b = *in_b;
        b.add_ipv4("v1", addr_b);
        b.add_ipv4("v1", addr_b); // again: nothing changes
        b.set_mac("v1", *parse_mac("02:00:00:00:0b:01"));
        CHECK(b.arp_ignore("v1") == 0);
        b.set_arp_ignore("v1", arp_ignore_all);
        CHECK(b.arp_ignore("v1") == arp_ignore_all);
        b.set_arp_ignore("v1", 0);
        const auto links = b.read_links();
        REQUIRE(links.size() == 1);
        CHECK(links[0].name == "v1");
        CHECK(to_string(links[0].mac) == "02:00:00:00:0b:01");
        CHECK(links[0].ipv4 == std::vector{addr_b});
    }

    // A listener in b; a holds what arrives for its address. A SYN crafted
    // as if from a, with a wrong checksum, is delivered inside b: b's kernel
    // takes it in and answers a with a SYN-ACK acknowledging it.
    std::vector<held_packet> held;
    {
        link_identity in_a;
        in_a.name = "v0";
        in_a.ipv4 = {addr_a};
        held_packets hold(net.path(net.a), {in_a});
        in_netns(net.path(net.b), [&] {
            unique_fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
            sockaddr_in at{};
            at.sin_family = AF_INET;
            at.sin_port = htons(7000);
            at.sin_addr.s_addr = addr_b.addr;
            REQUIRE(::bind(listener.get(), reinterpret_cast<sockaddr*>(&at), sizeof at) == 0);
            REQUIRE(::listen(listener.get(), 4) == 0);
            std::vector<std::vector<uint8_t>> packets = {
                syn("10.9.0.1", "10.9.0.2", 40000, 7000, 12345)};
            CHECK(inject_ipv4(open_injector().get(), packets) == 1);
            for (int i = 0; i < 100 && held.empty(); i++) {
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
                auto got = hold.take(0);
                held.insert(held.end(), got.begin(), got.end());
            }
        });
    }
    REQUIRE_FALSE(held.empty());
    const auto& p = held.front().ipv4;
    REQUIRE(p.size() >= 40);
    CHECK(std::memcmp(p.data() + 12, &addr_b.addr, 4) == 0); // from b
    const uint8_t flags = p[20 + 13];
    CHECK((flags & 0x12) == 0x12); // SYN-ACK
    const uint32_t ack =
        uint32_t(p[28]) << 24 | uint32_t(p[29]) << 16 | uint32_t(p[30]) << 8 | p[31];
    CHECK(ack == 12346);
}
