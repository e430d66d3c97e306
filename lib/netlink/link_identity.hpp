// What a network namespace's outward links are: the identity a container's
// network keeps when it moves to another host (its addresses and MACs).
// Plain data: reading and applying it is links.hpp's job (libnl).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ferry::netlink {

using mac_address = std::array<uint8_t, 6>;

struct ipv4_address {
    uint32_t addr = 0; // network byte order
    uint8_t prefix = 32;
    bool operator==(const ipv4_address&) const = default;
};

// One link of a namespace other than loopback.
struct link_identity {
    std::string name;
    mac_address mac{};
    std::vector<ipv4_address> ipv4;
    // What the link is, for a destination that makes it anew (a process
    // tree's namespace; an engine makes a container's): its kind
    // ("macvlan"), the host link it sits on, by name on the source host,
    // and its macvlan mode ("bridge"). Empty where unknown.
    std::string kind;
    std::string parent;
    std::string macvlan_mode;
    uint32_t mtu = 0;
    int parent_index = 0; // the parent's ifindex as read (not sent: it means nothing elsewhere)
    // Of `ipv4`, those an earlier move brought in (links.hpp's label), as
    // read; not sent.
    std::vector<ipv4_address> moved_in;
    bool operator==(const link_identity&) const = default;
};

// An IPv4 route of a namespace's main table that its owner added (not the
// kernel's own route for an address's subnet).
struct ipv4_route {
    ipv4_address destination; // 0.0.0.0/0: the default route
    uint32_t gateway = 0;     // network byte order; 0: on-link
    std::string link;
    uint32_t metric = 0;
    bool operator==(const ipv4_route&) const = default;
};

std::string to_string(const mac_address& mac);
std::string to_string(const ipv4_address& a);    // "10.0.0.5/24"
std::string address_only(const ipv4_address& a); // "10.0.0.5"
// Parses "a.b.c.d/p" (or "a.b.c.d", /32); nullopt if malformed.
std::optional<ipv4_address> parse_ipv4(const std::string& text);
// Parses "aa:bb:cc:dd:ee:ff"; nullopt if malformed.
std::optional<mac_address> parse_mac(const std::string& text);
// "eth0 10.0.0.5/24 (aa:bb:..)", for logs and reports.
std::string describe(const std::vector<link_identity>& links);
// "default via 10.0.0.1 dev eth0", for logs and reports.
std::string to_string(const ipv4_route& r);

} // namespace ferry::netlink
