// What Ferry's CRIU plugin (criu-plugin/) and runc shim report on this host:
// datagrams on the abstract unix socket @ferry-criu-events of the daemon's
// network namespace, one per moment of a dump or restore. The daemon keeps
// each migration's moments until its session ends and hands them to the
// migrator for the downtime breakdown.
#pragma once

#include "core/unique_fd.hpp"
#include "wire/control.pb-c.h"
#include "wire/criu_event_wire.hpp"

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ferry::pagesrv {

using criu_event = criu_events::event;

// One migration's moments on this host; 0 when not seen. Per-task events
// keep the first report (CRIU reports every task in one pass).
struct criu_moments {
    uint64_t engine_pause = 0, freeze_start = 0, frozen = 0, dump_end = 0, resumed = 0;
    // Fills `out` (now_ns: this moment), whose lifetime is the caller's.
    void to_message(FerryControl__CriuMoments& out) const;
};

// Thread-safe: the daemon's loop feeds it, sessions read it.
class criu_event_log {
  public:
    // Binds the socket; if another daemon of this namespace holds it, the
    // log stays empty (the plugin's reports go to that daemon).
    criu_event_log();
    [[nodiscard]] int fd() const noexcept { return _sock.get(); }
    // Reads every pending datagram and records it; returns what it read.
    std::vector<std::pair<std::string, criu_event>> receive();
    // A migration's moments so far (pending datagrams read first).
    criu_moments moments(const std::string& migration_id);
    // Until `event` arrived for the migration, or `timeout`.
    criu_moments wait_for(const std::string& migration_id, const std::string& event,
                          std::chrono::milliseconds timeout);
    void forget(const std::string& migration_id);

  private:
    void record(const std::string& migration_id, const criu_event& e);

    unique_fd _sock;
    std::mutex _mutex;
    std::condition_variable _arrived;
    std::map<std::string, criu_moments> _moments;
    std::deque<std::string> _order; // oldest first: a bound on what is kept
};

} // namespace ferry::pagesrv
