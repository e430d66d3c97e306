// Pool role, one-sided (pagesrv --pool-rdma): the store's arena, its
// metadata and its directory registered READ-only with the first RDMA
// device, and an RDMA CM listener that admits a connect only with a token
// this node issued in a pool connection's acceptance. Once connected, a
// client's reads cost this node's CPU nothing: the thread here only admits
// connections and notices them go.
//
// Any client holding a token can read any object's chunks this way; the
// per-object membership check applies to two-sided requests only. That is
// why it is opt-in.
#pragma once

#include "core/unique_fd.hpp"
#include "pool_store.hpp"
#include "transport/rdma/rdma_connection.hpp"
#include "transport/rdma/token_gate.hpp"
#include "wire/control.pb-c.h"

#include <spdlog/logger.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

namespace ferry::pagesrv {

class pool_rdma_export {
  public:
    // Throws ferry::error if this host has no RDMA device.
    pool_rdma_export(pool_store& store, std::shared_ptr<spdlog::logger> log);
    pool_rdma_export(const pool_rdma_export&) = delete;
    pool_rdma_export& operator=(const pool_rdma_export&) = delete;
    ~pool_rdma_export();

    // Fills `r` for one pool connection's acceptance with a fresh token,
    // kept in `token` until `r` is sent.
    void describe(FerryControl__PoolRdmaRegion& r, transport::rdma::channel_token& token);

  private:
    void run();

    std::shared_ptr<spdlog::logger> _log;
    pool_store::arena_view _arena;
    std::unique_ptr<transport::rdma::rdma_listener> _listener;
    transport::rdma::mr_ptr _chunks_mr, _meta_mr, _directory_mr;
    transport::rdma::token_gate _tokens{256};
    unique_fd _wake, _epoll;
    std::atomic<bool> _stopping{false};
    std::vector<std::unique_ptr<transport::rdma::rdma_connection>> _clients;
    std::thread _thread;
};

} // namespace ferry::pagesrv
