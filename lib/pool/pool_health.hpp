// Which pool nodes are alive, shared by every client of one pool (a node
// found dead by one is dead for all) and by the rebuild that replaces it.
#pragma once

#include "pool/pool_layout.hpp"
#include "sys/net.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ferry::pool {

// Which member slots of the pool are alive, and where each lives.
class pool_health {
  public:
    explicit pool_health(const pool_spec& spec);

    [[nodiscard]] bool dead(uint32_t slot) const noexcept {
        return (_dead_mask.load(std::memory_order_acquire) >> slot) & 1;
    }
    [[nodiscard]] uint32_t dead_mask() const noexcept {
        return _dead_mask.load(std::memory_order_acquire);
    }
    // Changes whenever a slot dies or is replaced.
    [[nodiscard]] uint32_t version() const noexcept {
        return _version.load(std::memory_order_acquire);
    }
    [[nodiscard]] net::endpoint endpoint(uint32_t slot) const;
    [[nodiscard]] uint32_t slots() const noexcept { return uint32_t(_slots.size()); }
    // How this process authenticates to the nodes.
    [[nodiscard]] const tls::credentials_ptr& credentials() const noexcept { return _credentials; }

    // Idempotent; the first reason is kept.
    void declare_dead(uint32_t slot, const std::string& reason);
    // After a rebuild: `slot` lives again on `ep`.
    void replace(uint32_t slot, const net::endpoint& ep);
    // The next unused spare, if any.
    std::optional<net::endpoint> take_spare();
    // Blocks until a slot outside `ignore` is dead, or `timeout` passes or
    // shut_down is called (then 0); returns the dead mask.
    uint32_t wait_for_loss(std::chrono::milliseconds timeout, uint32_t ignore = 0);
    // Wakes wait_for_loss for good.
    void shut_down();

    // "IP:PORT (reason), ..." of every node declared dead.
    [[nodiscard]] std::string lost_nodes() const;
    // "IP:PORT,..." of the current members, in slot order.
    [[nodiscard]] std::string members() const;

  private:
    tls::credentials_ptr _credentials;
    mutable std::mutex _mutex;
    std::condition_variable _changed;
    std::vector<net::endpoint> _slots;
    std::vector<net::endpoint> _spares;
    std::vector<std::string> _lost; // descriptions, in order of loss
    bool _shut_down = false;
    std::atomic<uint32_t> _dead_mask{0};
    std::atomic<uint32_t> _version{0};
};

} // namespace ferry::pool
