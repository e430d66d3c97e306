// Pool role: serves one pool client's connection (frames in lib/pool_wire.hpp).
#pragma once

#include "object_access.hpp"
#include "pool_rdma.hpp"
#include "pool_store.hpp"
#include "sys/stream.hpp"
#include "wire/control.hpp"

#include <spdlog/logger.h>

namespace ferry::pagesrv {

// Answers the client's pool_open, then serves requests until it hangs up.
// A malformed frame ends the connection (logged once). Each object is
// served only to its members (`access`), by the peer's authenticated name.
// With `rdma`, the acceptance also offers one-sided reads of the arena.
void serve_pool_connection(net::stream& conn, const FerryControl__PoolOpen& open, pool_store& store,
                           object_access& access, pool_rdma_export* rdma, spdlog::logger& log);

} // namespace ferry::pagesrv
