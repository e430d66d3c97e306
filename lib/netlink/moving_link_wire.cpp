#include "netlink/moving_link_wire.hpp"

#include "core/error.hpp"

#include <fmt/format.h>

#include <cstring>

namespace ferry::netlink {

namespace {

bool valid_link_name(const std::string& name) {
    return !name.empty() && name.size() < 16 && name.find('/') == std::string::npos &&
           name != "." && name != "..";
}

} // namespace

moving_link_messages::moving_link_messages(const std::vector<link_identity>& links)
    : _links(links) {
    _messages.resize(_links.size());
    _text.resize(_links.size());
    _text_pointers.resize(_links.size());
    for (size_t i = 0; i < _links.size(); i++) {
        auto& m = _messages[i];
        m = FERRY_CONTROL__MOVING_LINK__INIT;
        m.name = const_cast<char*>(_links[i].name.c_str());
        m.mac.data = _links[i].mac.data();
        m.mac.len = _links[i].mac.size();
        for (const auto& a : _links[i].ipv4)
            _text[i].push_back(to_string(a));
        for (auto& t : _text[i])
            _text_pointers[i].push_back(t.data());
        m.n_ipv4 = _text_pointers[i].size();
        m.ipv4 = _text_pointers[i].data();
        const auto text = [](const std::string& t) {
            return t.empty() ? nullptr : const_cast<char*>(t.c_str());
        };
        m.kind = text(_links[i].kind);
        m.parent = text(_links[i].parent);
        m.macvlan_mode = text(_links[i].macvlan_mode);
        m.has_mtu = _links[i].mtu != 0;
        m.mtu = _links[i].mtu;
        pointers.push_back(&m);
    }
}

std::vector<link_identity> from_messages(FerryControl__MovingLink* const* links, size_t n) {
    std::vector<link_identity> out;
    for (size_t i = 0; i < n; i++) {
        const auto& m = *links[i];
        link_identity l;
        l.name = m.name;
        if (!valid_link_name(l.name))
            throw error(fmt::format("a moving link has a malformed name '{}'", l.name));
        if (m.mac.len != l.mac.size())
            throw error(fmt::format("moving link {}: a MAC of {} bytes", l.name, m.mac.len));
        std::memcpy(l.mac.data(), m.mac.data, l.mac.size());
        for (size_t k = 0; k < m.n_ipv4; k++) {
            const auto a = parse_ipv4(m.ipv4[k]);
            if (!a)
                throw error(
                    fmt::format("moving link {}: malformed address '{}'", l.name, m.ipv4[k]));
            l.ipv4.push_back(*a);
        }
        l.kind = m.kind ? m.kind : "";
        l.parent = m.parent ? m.parent : "";
        l.macvlan_mode = m.macvlan_mode ? m.macvlan_mode : "";
        l.mtu = m.has_mtu ? m.mtu : 0;
        if (!l.parent.empty() && !valid_link_name(l.parent))
            throw error(fmt::format("moving link {}: malformed parent '{}'", l.name, l.parent));
        out.push_back(std::move(l));
    }
    return out;
}

moving_route_messages::moving_route_messages(const std::vector<ipv4_route>& routes)
    : _routes(routes) {
    _messages.resize(_routes.size());
    for (const auto& r : _routes) {
        _destinations.push_back(to_string(r.destination));
        _gateways.push_back(r.gateway ? address_only({r.gateway, 32}) : "");
    }
    for (size_t i = 0; i < _routes.size(); i++) {
        auto& m = _messages[i];
        m = FERRY_CONTROL__MOVING_ROUTE__INIT;
        m.destination = _destinations[i].data();
        m.gateway = _gateways[i].empty() ? nullptr : _gateways[i].data();
        m.link = const_cast<char*>(_routes[i].link.c_str());
        m.has_metric = _routes[i].metric != 0;
        m.metric = _routes[i].metric;
        pointers.push_back(&m);
    }
}

std::vector<ipv4_route> from_messages(FerryControl__MovingRoute* const* routes, size_t n) {
    std::vector<ipv4_route> out;
    for (size_t i = 0; i < n; i++) {
        const auto& m = *routes[i];
        ipv4_route r;
        const auto dst = parse_ipv4(m.destination);
        if (!dst)
            throw error(
                fmt::format("a moving route has a malformed destination '{}'", m.destination));
        r.destination = *dst;
        if (m.gateway) {
            const auto gw = parse_ipv4(m.gateway);
            if (!gw || gw->prefix != 32)
                throw error(fmt::format("a moving route has a malformed gateway '{}'", m.gateway));
            r.gateway = gw->addr;
        }
        r.link = m.link;
        if (!valid_link_name(r.link))
            throw error(fmt::format("a moving route has a malformed link '{}'", r.link));
        r.metric = m.has_metric ? m.metric : 0;
        out.push_back(std::move(r));
    }
    return out;
}

} // namespace ferry::netlink
