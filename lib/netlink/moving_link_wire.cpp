#include "netlink/moving_link_wire.hpp"

#include "core/error.hpp"

#include <fmt/format.h>

#include <cstring>

namespace ferry::netlink {

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
        pointers.push_back(&m);
    }
}

std::vector<link_identity> from_messages(FerryControl__MovingLink* const* links, size_t n) {
    std::vector<link_identity> out;
    for (size_t i = 0; i < n; i++) {
        const auto& m = *links[i];
        link_identity l;
        l.name = m.name;
        if (l.name.empty() || l.name.size() >= 16 || l.name.find('/') != std::string::npos)
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
        out.push_back(std::move(l));
    }
    return out;
}

} // namespace ferry::netlink
