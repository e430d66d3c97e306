#include "pool/pool_health.hpp"

#include "core/error.hpp"

#include <fmt/format.h>

namespace ferry::pool {

pool_health::pool_health(const pool_spec& spec)
    : _credentials(spec.credentials), _slots(spec.nodes), _spares(spec.spares) {
    if (_slots.size() > 32)
        throw error("at most 32 pool nodes");
}

net::endpoint pool_health::endpoint(uint32_t slot) const {
    std::lock_guard lock(_mutex);
    return _slots.at(slot);
}

void pool_health::declare_dead(uint32_t slot, const std::string& reason) {
    std::lock_guard lock(_mutex);
    if (dead(slot))
        return;
    _lost.push_back(fmt::format("{} ({})", _slots[slot].to_string(), reason));
    _dead_mask.fetch_or(1u << slot, std::memory_order_acq_rel);
    _version.fetch_add(1, std::memory_order_acq_rel);
    _changed.notify_all();
}

void pool_health::replace(uint32_t slot, const net::endpoint& ep) {
    std::lock_guard lock(_mutex);
    _slots.at(slot) = ep;
    _dead_mask.fetch_and(~(1u << slot), std::memory_order_acq_rel);
    _version.fetch_add(1, std::memory_order_acq_rel);
    _changed.notify_all();
}

std::optional<net::endpoint> pool_health::take_spare() {
    std::lock_guard lock(_mutex);
    if (_spares.empty())
        return std::nullopt;
    auto ep = _spares.front();
    _spares.erase(_spares.begin());
    return ep;
}

uint32_t pool_health::wait_for_loss(std::chrono::milliseconds timeout, uint32_t ignore) {
    std::unique_lock lock(_mutex);
    _changed.wait_for(lock, timeout, [&] { return _shut_down || (dead_mask() & ~ignore) != 0; });
    return _shut_down ? 0 : dead_mask();
}

void pool_health::shut_down() {
    std::lock_guard lock(_mutex);
    _shut_down = true;
    _changed.notify_all();
}

std::string pool_health::lost_nodes() const {
    std::lock_guard lock(_mutex);
    std::string out;
    for (const auto& l : _lost)
        out += (out.empty() ? "" : ", ") + l;
    return out;
}

std::string pool_health::members() const {
    std::lock_guard lock(_mutex);
    std::string out;
    for (const auto& ep : _slots)
        out += (out.empty() ? "" : ",") + ep.to_string();
    return out;
}

} // namespace ferry::pool
