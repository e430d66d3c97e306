// Restoring the pool's redundancy after a node is lost, and checking it.
#pragma once

#include "pool/pool_client.hpp"

#include <cstdint>
#include <string>

namespace ferry::pool {

struct rebuild_report {
    bool ok = false;
    std::string error;
    uint64_t chunks = 0;          // members written onto the spare
    uint64_t stripes_skipped = 0; // not in the pool (yet): nothing to rebuild
    uint64_t ns = 0;
};

// Rebuilds every member that `slot` held onto `spare` from the surviving
// members (checking each page against its checksum first), then makes the
// slot live again on the spare, so readers stop going degraded.
rebuild_report rebuild_slot(const pool_spec& spec, uint64_t object, uint64_t total_pages,
                            std::shared_ptr<pool_health> health, uint32_t slot,
                            const net::endpoint& spare);

struct scrub_report {
    bool ok = false;
    bool incomplete = false; // a stripe is not in the pool (yet): nothing checked past it
    std::string error;
    uint64_t stripes = 0; // every member read and the parity checked
};

// Reads every member of every stripe and checks the parity.
scrub_report scrub(const pool_spec& spec, uint64_t object, uint64_t total_pages,
                   std::shared_ptr<pool_health> health);

// `spec` with its nodes as `health` currently places them.
[[nodiscard]] pool_spec current_spec(const pool_spec& spec, const pool_health& health);

} // namespace ferry::pool
