// Which fabric a migration's pages cross, and the latency and bandwidth
// model of an emulated one. Spelled "tcp" or "shm[:lat=2us,bw=100gbit]".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ferry {

// Each operation on an emulated link costs a base latency plus its size over
// the bandwidth. The cost is paid by spinning on the clock, so that it is
// exact to the clock's resolution and never yields the CPU.
struct link_model {
    uint64_t latency_ns = 0;
    double ns_per_byte = 0; // 0: unlimited bandwidth

    [[nodiscard]] bool free() const noexcept { return latency_ns == 0 && ns_per_byte == 0; }
    [[nodiscard]] uint64_t cost_ns(size_t bytes) const noexcept {
        return latency_ns + uint64_t(double(bytes) * ns_per_byte + 0.5);
    }
    // Spins until cost_ns(bytes) have passed since `start_ns`.
    void charge(uint64_t start_ns, size_t bytes) const noexcept;
};

struct fabric_spec {
    std::string name = "tcp"; // a transport backend's (transport/backend.hpp)
    link_model model;         // for backends that emulate a link
    // The migration's --deadline-scale, not part of the text: backends that
    // tell a dead peer by its silence (rdma) wait this much longer.
    double deadline_scale = 1.0;

    // "NAME[:lat=..,bw=..]", NAME one of the backends; throws ferry::error
    // on malformed text or an unknown backend.
    static fabric_spec parse(const std::string& text);
    [[nodiscard]] std::string to_string() const;
};

} // namespace ferry
