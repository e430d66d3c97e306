#include "transport/rdma/token_gate.hpp"

#include "core/error.hpp"

#include <sys/random.h>

#include <algorithm>

namespace ferry::transport::rdma {

channel_token token_gate::issue() {
    channel_token t;
    if (::getrandom(t.data(), t.size(), 0) != ssize_t(t.size()))
        throw sys_error("getrandom");
    std::lock_guard lock(_mu);
    if (_tokens.size() == _outstanding)
        _tokens.erase(_tokens.begin());
    _tokens.push_back(t);
    return t;
}

bool token_gate::admit(std::span<const std::byte> private_data) {
    if (private_data.size() < sizeof(connect_hello))
        return false;
    const auto h = message_from<connect_hello>(private_data.first(sizeof(connect_hello)));
    if (!h)
        return false;
    std::lock_guard lock(_mu);
    const auto it = std::find(_tokens.begin(), _tokens.end(), h->token);
    if (it == _tokens.end())
        return false;
    _tokens.erase(it);
    return true;
}

rdma_listener::admission token_gate::admission() {
    return [this](std::span<const std::byte> hello) -> std::optional<std::vector<std::byte>> {
        if (!admit(hello))
            return std::nullopt;
        return std::vector<std::byte>{};
    };
}

} // namespace ferry::transport::rdma
