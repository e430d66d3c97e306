// The migrator's connection for one outgoing migration, once registered: one
// message at a time, each with its own handler (outgoing_session.cpp).
#pragma once

#include "criu_events.hpp"
#include "outgoing.hpp"
#include "sys/stream.hpp"

#include <spdlog/logger.h>

#include <chrono>
#include <optional>

namespace ferry::pagesrv {

class outgoing_session {
  public:
    // `migrator_silence`: the migrator sends migrator_alive until its
    // commit, and this much silence before it aborts the migration.
    outgoing_session(net::stream& conn, outgoing_migration& m, criu_event_log& events,
                     std::optional<std::chrono::milliseconds> migrator_silence)
        : _conn(conn), _m(m), _events(events), _migrator_silence(migrator_silence) {}
    // Until the migration is finished or aborted, or the migrator is gone.
    void run();

  private:
    enum class next : bool { more, done };
    next on_commit();
    next on_finish();
    next on_handoff();
    next on_abort(const FerryControl__OutgoingAbort& a);
    void on_migrator_gone();
    void on_migrator_silent();
    void finish_without_migrator();

    net::stream& _conn;
    outgoing_migration& _m;
    criu_event_log& _events;
    std::optional<std::chrono::milliseconds> _migrator_silence;
    // Finished here, the migrator being late (finish_without_migrator):
    // what its FINISH is answered with.
    std::optional<std::string> _finished_alone_recovery;
    std::string _finished_alone_error;
    spdlog::logger& log() const noexcept { return _m.log(); }
};

} // namespace ferry::pagesrv
