// The migrator's connection for one outgoing migration, once registered: one
// message at a time, each with its own handler (outgoing_session.cpp).
#pragma once

#include "criu_events.hpp"
#include "outgoing.hpp"
#include "sys/stream.hpp"

#include <spdlog/logger.h>

namespace ferry::pagesrv {

class outgoing_session {
  public:
    outgoing_session(net::stream& conn, outgoing_migration& m, criu_event_log& events)
        : _conn(conn), _m(m), _events(events) {}
    // Until the migration is finished or aborted, or the migrator is gone.
    void run();

  private:
    enum class next : bool { more, done };
    next on_commit();
    next on_finish();
    next on_handoff();
    next on_abort(const FerryControl__OutgoingAbort& a);
    void on_migrator_gone();

    net::stream& _conn;
    outgoing_migration& _m;
    criu_event_log& _events;
    spdlog::logger& log() const noexcept { return _m.log(); }
};

} // namespace ferry::pagesrv
