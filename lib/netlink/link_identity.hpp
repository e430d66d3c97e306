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
    bool operator==(const link_identity&) const = default;
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

} // namespace ferry::netlink
