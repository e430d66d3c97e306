// lib/netlink: a container's network identity, its wire form, and the real
// kernel steps of a move (two network namespaces joined by a veth pair):
// addresses, arp_ignore, MACs, holding packets on one side and delivering
// crafted ones on the other.
#include "core/error.hpp"
#include "core/unique_fd.hpp"
#include "netlink/conf_file.hpp"
#include "netlink/held_packets.hpp"
#include "netlink/ipv6_silence.hpp"
#include "netlink/link_identity.hpp"
#include "netlink/links.hpp"
#include "netlink/moving_link_wire.hpp"
#include "netlink/netns.hpp"
#include "netlink/new_netns.hpp"
#include "netlink/packet_inject.hpp"
#include "sys/subprocess.hpp"

#include <arpa/inet.h>
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/ip.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <set>
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
        remove_left_by_dead_tests();
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

    // A test process that was killed never ran its destructor: its pair,
    // named by its pid, is removed here once that pid is gone.
    static void remove_left_by_dead_tests() {
        std::error_code ec;
        for (const auto& entry : std::filesystem::directory_iterator("/run/netns", ec)) {
            const auto name = entry.path().filename().string();
            if (name.size() <= 5 || (name.rfind("fnl-a", 0) != 0 && name.rfind("fnl-b", 0) != 0))
                continue;
            const auto pid = name.substr(5);
            if (pid.find_first_not_of("0123456789") != std::string::npos ||
                std::filesystem::exists("/proc/" + pid, ec))
                continue;
            try {
                (void)run_capture({"ip", "netns", "del", name}, std::chrono::seconds(10));
            } catch (...) {
            }
        }
    }
};

// The source MACs of the IPv6 frames that reach `link` of the namespace
// `netns` within `limit`, from the moment `after` has run; stops at the
// first frame if `first_only`.
std::set<std::string> ipv6_senders(const std::filesystem::path& netns, const std::string& link,
                                   std::chrono::milliseconds limit,
                                   const std::function<void()>& after, bool first_only) {
    unique_fd sock;
    in_netns(netns, [&] {
        // Protocol 0 until the bind: no other link's frame gets in first.
        sock = unique_fd(::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0));
        REQUIRE(sock);
        sockaddr_ll at{};
        at.sll_family = AF_PACKET;
        at.sll_protocol = htons(ETH_P_IPV6);
        at.sll_ifindex = int(::if_nametoindex(link.c_str()));
        REQUIRE(at.sll_ifindex > 0);
        REQUIRE(::bind(sock.get(), reinterpret_cast<sockaddr*>(&at), sizeof at) == 0);
    });
    after();
    std::set<std::string> senders;
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until && !(first_only && !senders.empty())) {
        pollfd p{sock.get(), POLLIN, 0};
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            until - std::chrono::steady_clock::now());
        if (::poll(&p, 1, int(std::max<int64_t>(1, left.count()))) <= 0)
            continue;
        uint8_t frame[256];
        sockaddr_ll from{};
        socklen_t len = sizeof from;
        if (::recvfrom(sock.get(), frame, sizeof frame, 0, reinterpret_cast<sockaddr*>(&from),
                       &len) > 0 &&
            from.sll_pkttype != PACKET_OUTGOING)
            senders.insert(fmt::format("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                                       from.sll_addr[0], from.sll_addr[1], from.sll_addr[2],
                                       from.sll_addr[3], from.sll_addr[4], from.sll_addr[5]));
    }
    return senders;
}

int disable_ipv6_in(const std::filesystem::path& netns, const std::string& link) {
    int value = -1;
    in_netns(netns, [&] {
        std::ifstream(fmt::format("/proc/sys/net/ipv6/conf/{}/disable_ipv6", link)) >> value;
    });
    return value;
}

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

TEST_CASE("a process tree's links and routes survive the control connection") {
    link_identity l;
    l.name = "eth0";
    l.mac = *parse_mac("02:00:00:00:00:08");
    l.ipv4 = {*parse_ipv4("10.78.0.80/24")};
    l.kind = "macvlan";
    l.parent = "eth1";
    l.macvlan_mode = "bridge";
    l.mtu = 1400;
    moving_link_messages links({l});
    CHECK(from_messages(links.pointers.data(), links.pointers.size()) == std::vector{l});
    char bad_parent[] = "a/b";
    links.pointers[0]->parent = bad_parent;
    CHECK_THROWS_AS(from_messages(links.pointers.data(), 1), error);

    ipv4_route via{*parse_ipv4("10.99.0.0/24"), parse_ipv4("10.78.0.253")->addr, "eth0", 5};
    ipv4_route fallback{*parse_ipv4("0.0.0.0/0"), parse_ipv4("10.78.0.1")->addr, "eth0", 0};
    ipv4_route on_link{*parse_ipv4("10.98.0.0/16"), 0, "eth0", 0};
    CHECK(to_string(via) == "10.99.0.0/24 via 10.78.0.253 dev eth0 metric 5");
    CHECK(to_string(fallback) == "default via 10.78.0.1 dev eth0");
    CHECK(to_string(on_link) == "10.98.0.0/16 dev eth0");
    const std::vector routes{via, fallback, on_link};
    moving_route_messages out(routes);
    CHECK(from_messages(out.pointers.data(), out.pointers.size()) == routes);
    char bad_gateway[] = "10.78.0.0/24";
    out.pointers[0]->gateway = bad_gateway;
    CHECK_THROWS_AS(from_messages(out.pointers.data(), 1), error);
    char bad_destination[] = "10.99.0.0/40";
    out.pointers[1]->destination = bad_destination;
    CHECK_THROWS_AS(from_messages(out.pointers.data() + 1, 1), error);
    char bad_link[] = "..";
    out.pointers[2]->link = bad_link;
    CHECK_THROWS_AS(from_messages(out.pointers.data() + 2, 1), error);
}

// Needs root, veth and macvlan, as the integration tests do.
TEST_CASE("a process tree's namespace is made anew: a macvlan copy of its link, and its routes") {
    if (::geteuid() != 0) {
        WARN("needs root: skipped");
        return;
    }
    veth_pair net; // v0 in a is the host link the links sit on
    // The source: a namespace with a macvlan on v0, an address and a route.
    const auto source_ns = make_netns();
    in_netns(net.path(net.a), [&] {
        link_identity made;
        made.name = "eth0";
        made.kind = "macvlan";
        made.macvlan_mode = "private";
        made.mtu = 1400;
        add_macvlan(source_ns.get(), made, "v0");
    });
    link_identity source;
    std::vector<ipv4_route> source_routes;
    in_netns(netns_path(source_ns.get()), [&] {
        link_control c;
        c.add_ipv4("eth0", *parse_ipv4("10.9.1.5/24"));
        c.add_route({*parse_ipv4("10.99.0.0/24"), parse_ipv4("10.9.1.254")->addr, "eth0", 7});
        const auto links = c.read_links();
        REQUIRE(links.size() == 1);
        source = links[0];
        source_routes = c.read_routes();
    });
    CHECK(source.name == "eth0");
    CHECK(source.kind == "macvlan");
    CHECK(source.macvlan_mode == "private");
    CHECK(source.mtu == 1400);
    CHECK(source.parent_index > 0); // v0's index, in a
    // Only the route its owner added: not the kernel's for the subnet.
    REQUIRE(source_routes.size() == 1);
    CHECK(to_string(source_routes[0]) == "10.99.0.0/24 via 10.9.1.254 dev eth0 metric 7");

    // The copy: same name, kind, mode and MTU, its own MAC, no address yet.
    const auto copy_ns = make_netns();
    in_netns(net.path(net.a), [&] { add_macvlan(copy_ns.get(), source, "v0"); });
    in_netns(netns_path(copy_ns.get()), [&] {
        link_control c;
        const auto links = c.read_links();
        REQUIRE(links.size() == 1);
        CHECK(links[0].name == "eth0");
        CHECK(links[0].kind == "macvlan");
        CHECK(links[0].macvlan_mode == "private");
        CHECK(links[0].mtu == 1400);
        CHECK(links[0].mac != source.mac);
        CHECK(links[0].ipv4.empty());
        // The engine's own address, and the source's brought in by the move:
        // only the latter reads back as moved in (its label).
        c.add_ipv4("eth0", *parse_ipv4("10.9.1.77/24"));
        c.add_ipv4("eth0", source.ipv4[0], true);
        const auto labelled = c.read_links();
        CHECK(labelled[0].ipv4.size() == 2);
        CHECK(labelled[0].moved_in == source.ipv4);
        CHECK(source.moved_in.empty());
        c.add_route(source_routes[0]);
        CHECK(c.read_routes() == source_routes);
    });
    // A parent this host lacks, and a link that is no macvlan, are refused.
    CHECK_THROWS_AS(add_macvlan(copy_ns.get(), source, "no-such-link"), error);
    auto veth = source;
    veth.kind = "veth";
    CHECK_THROWS_AS(add_macvlan(copy_ns.get(), veth, "v0"), error);
    // Removing the source's link leaves its namespace with loopback only;
    // then the copy may take its MAC (one host link carries a MAC once).
    in_netns(netns_path(source_ns.get()), [&] {
        link_control c;
        c.delete_link("eth0");
        CHECK(c.read_links().empty());
    });
    in_netns(netns_path(copy_ns.get()), [&] {
        link_control c;
        c.set_mac("eth0", source.mac);
        CHECK(c.read_links()[0].mac == source.mac);
    });
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
        // The same setting through its /proc/sys file, opened inside b.
        conf_file arp;
        in_netns(net.path(net.b), [&] { arp = conf_file("ipv4", "v1", "arp_ignore"); });
        REQUIRE(arp);
        arp.write(arp_ignore_all);
        CHECK(arp.read() == arp_ignore_all);
        CHECK(b.arp_ignore("v1") == arp_ignore_all);
        arp.write(0);
        CHECK(b.arp_ignore("v1") == 0);
        in_netns(net.path(net.b), [&] {
            CHECK_FALSE(conf_file("ipv4", "no-such-link", "arp_ignore", true));
            CHECK_THROWS(conf_file("ipv4", "no-such-link", "arp_ignore"));
        });
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

// A link coming up sends MLD reports and duplicate address detection from
// its MAC at once; a silenced one sends nothing, whatever its MAC, until
// its IPv6 is back (the copy's takeover), which then speaks from the MAC it
// has now.
TEST_CASE("a link whose IPv6 is silenced sends no frame until it is restored") {
    if (::geteuid() != 0) {
        WARN("needs root: skipped");
        return;
    }
    if (!std::filesystem::exists("/proc/sys/net/ipv6")) {
        WARN("no IPv6 in this kernel: skipped");
        return;
    }
    veth_pair net;
    const auto bounce = [&] {
        for (const char* state : {"down", "up"})
            (void)run_capture({"ip", "-n", net.b, "link", "set", "v1", state},
                              std::chrono::seconds(10));
    };
    // Unsilenced, the check sees the frames it looks for.
    const auto loud = ipv6_senders(net.path(net.a), "v0", std::chrono::seconds(3), bounce, true);
    REQUIRE_FALSE(loud.empty());

    std::unique_ptr<link_control> in_b;
    std::unique_ptr<conf_override> silence;
    in_netns(net.path(net.b), [&] {
        in_b = std::make_unique<link_control>();
        silence = std::make_unique<conf_override>(ipv6_silence("v1"));
    });
    silence->apply();
    CHECK(silence->applied());
    CHECK(disable_ipv6_in(net.path(net.b), "v1") == 1);
    const auto quiet = ipv6_senders(
        net.path(net.a), "v0", std::chrono::milliseconds(1500),
        [&] {
            bounce();
            in_b->set_mac("v1", *parse_mac("02:00:00:00:0b:02"));
        },
        false);
    CHECK(quiet.empty());

    const auto back = ipv6_senders(
        net.path(net.a), "v0", std::chrono::seconds(3), [&] { silence->restore(); }, true);
    CHECK(disable_ipv6_in(net.path(net.b), "v1") == 0);
    CHECK_FALSE(silence->applied());
    CHECK(back == std::set<std::string>{"02:00:00:00:0b:02"});
    silence->restore(); // once more: nothing changes
    CHECK(disable_ipv6_in(net.path(net.b), "v1") == 0);
}
