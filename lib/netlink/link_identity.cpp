#include "netlink/link_identity.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <cstdio>

namespace ferry::netlink {

std::string to_string(const mac_address& m) {
    return fmt::format("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4],
                       m[5]);
}

std::string address_only(const ipv4_address& a) {
    char buf[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &a.addr, buf, sizeof buf);
    return buf;
}

std::string to_string(const ipv4_address& a) {
    return fmt::format("{}/{}", address_only(a), a.prefix);
}

std::optional<ipv4_address> parse_ipv4(const std::string& text) {
    ipv4_address a;
    const auto slash = text.find('/');
    const std::string host = text.substr(0, slash);
    if (::inet_pton(AF_INET, host.c_str(), &a.addr) != 1)
        return std::nullopt;
    if (slash != std::string::npos) {
        const std::string p = text.substr(slash + 1);
        if (p.empty() || p.size() > 2 || p.find_first_not_of("0123456789") != std::string::npos)
            return std::nullopt;
        const int prefix = std::stoi(p);
        if (prefix > 32)
            return std::nullopt;
        a.prefix = uint8_t(prefix);
    }
    return a;
}

std::optional<mac_address> parse_mac(const std::string& text) {
    mac_address m{};
    unsigned v[6];
    char tail = 0;
    if (text.size() != 17 || std::sscanf(text.c_str(), "%2x:%2x:%2x:%2x:%2x:%2x%c", &v[0], &v[1],
                                         &v[2], &v[3], &v[4], &v[5], &tail) != 6)
        return std::nullopt;
    for (int i = 0; i < 6; i++)
        m[size_t(i)] = uint8_t(v[i]);
    return m;
}

std::string describe(const std::vector<link_identity>& links) {
    std::string out;
    for (const auto& l : links) {
        if (!out.empty())
            out += ", ";
        out += l.name;
        for (const auto& a : l.ipv4)
            out += " " + to_string(a);
        out += " (" + to_string(l.mac) + ")";
    }
    return out;
}

std::string to_string(const ipv4_route& r) {
    std::string out = r.destination.addr == 0 && r.destination.prefix == 0
                          ? std::string("default")
                          : to_string(r.destination);
    if (r.gateway)
        out += " via " + address_only({r.gateway, 32});
    out += " dev " + r.link;
    if (r.metric)
        out += fmt::format(" metric {}", r.metric);
    return out;
}

} // namespace ferry::netlink
