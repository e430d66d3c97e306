// The daemon's Prometheus metrics (prometheus-cpp), served on their own
// local port (`pagesrv --metrics 127.0.0.1:9140`), never on the migration
// port: migrations by role and outcome, pages and bytes served, the fault
// latency of incoming migrations, and the pool node's counters.
#pragma once

#include "pool_store.hpp"
#include "wire/control.pb-c.h"

#include <cstdint>
#include <memory>
#include <string>

namespace ferry::pagesrv {

class daemon_metrics {
  public:
    enum class role : uint8_t { source, destination };

    // Serves /metrics on `listen` (IP:PORT); `pool` may be null.
    daemon_metrics(const std::string& listen, const pool_store* pool);
    ~daemon_metrics();
    daemon_metrics(const daemon_metrics&) = delete;
    daemon_metrics& operator=(const daemon_metrics&) = delete;

    void migration_started(role r);
    void migration_ended(role r, bool ok);
    // A source's totals, once its migration ends.
    void served(uint64_t pages, uint64_t bytes);
    // A destination's final report: its fault latency histogram.
    void transfer_finished(const FerryControl__TransferStats& t);

  private:
    struct impl;
    std::unique_ptr<impl> _impl;
};

} // namespace ferry::pagesrv
