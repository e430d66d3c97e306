// Source role, pool mode: right after the freeze, push every lazy page of a
// migration into the memory pool, with parity, at full speed. When the push
// is complete (every stripe stored with the requested redundancy) the source
// may hand off: CRIU's dump ends and the source tasks are freed, while the
// destination goes on reading from the pool.
#pragma once

#include "pool/pool_client.hpp"
#include "pool/pool_layout.hpp"

#include <spdlog/logger.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace ferry::pagesrv {

class outgoing_migration;

struct push_result {
    bool ok = false;
    std::string error;
    uint64_t pages = 0;
    uint64_t bytes_stored = 0; // data and parity written to the nodes
    uint64_t push_ns = 0;
};

class pool_pusher {
  public:
    // Starts pushing at once, on its own thread.
    pool_pusher(outgoing_migration& m, pool::pool_spec spec, uint64_t object);
    pool_pusher(const pool_pusher&) = delete;
    pool_pusher& operator=(const pool_pusher&) = delete;
    ~pool_pusher(); // stops and joins

    // Blocks until the push is over.
    push_result wait();
    // The result if the push ends within `timeout`.
    std::optional<push_result> wait_for(std::chrono::milliseconds timeout);
    void stop() noexcept { _stop = true; }
    // Stops, waits for the thread's last batch, then removes what was
    // pushed from the pool: after an abort the source runs again and those
    // pages go stale.
    void discard() noexcept;

  private:
    void run() noexcept;
    void push_all(pool::pool_client& client);
    void restore_redundancy(const std::shared_ptr<pool::pool_health>& health);
    void grant_destination(pool::pool_client& client);

    outgoing_migration& _m;
    std::shared_ptr<spdlog::logger> _log; // the migration's
    pool::pool_spec _spec;
    uint64_t _object;
    std::atomic<bool> _stop{false};
    std::mutex _mutex;
    std::condition_variable _done_cv;
    bool _done = false;
    push_result _result;
    std::thread _thread; // last: it uses everything above
};

} // namespace ferry::pagesrv
