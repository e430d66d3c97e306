#include "migration.hpp"

#include "core/log.hpp"

#include <fmt/format.h>

#include <chrono>

namespace ferry::migrator {

// Sent from the main thread's waits, at most once per interval: a migrator
// whose main thread is stuck (stopped, traced, in D state) falls silent even
// if another of its threads still runs. Never a short deadline on the send:
// a TLS record abandoned half-way would leave the connection unusable. The
// daemon's verdict is read by the waits themselves (daemon_gave_up).
void migration::beat(const char* step) noexcept {
    if (!_source_watches || _committing || !_daemon_verdict.empty() || !_src)
        return;
    const auto now = std::chrono::steady_clock::now();
    if (now - _last_beat < control::migrator_heartbeat_interval)
        return;
    _last_beat = now;
    FerryControl__MigratorAlive alive = FERRY_CONTROL__MIGRATOR_ALIVE__INIT;
    alive.step = const_cast<char*>(step);
    if (control::try_send_message(*_src, alive, net::after(control_timeout)))
        return;
    note_daemon_verdict(); // a daemon that gave up said why before it closed
    if (_daemon_verdict.empty())
        _daemon_verdict = "lost the connection to the local daemon (the source pagesrv)";
}

// Before the commit the source daemon sends nothing unasked but its verdict
// on a migrator it gave up on (an error, then it closes the connection).
void migration::note_daemon_verdict() noexcept {
    if (!_source_watches || _src_answer_due || _committing || !_daemon_verdict.empty() || !_src)
        return;
    try {
        if (!_src->buffered() &&
            !net::wait_readable(_src->fd(), net::after(std::chrono::seconds(0))))
            return;
        auto e = control::receive(*_src, net::after(std::chrono::seconds(5)));
        if (!e)
            _daemon_verdict = "the local daemon (the source pagesrv) closed the connection";
        else if (e->body_case == FERRY_CONTROL__ENVELOPE__BODY_ERROR)
            _daemon_verdict = fmt::format("local daemon: {}", e->error->message);
        else
            _daemon_verdict =
                fmt::format("the local daemon sent {} unasked", control::body_name(*e));
    } catch (const std::exception& ex) {
        _daemon_verdict = fmt::format("the connection to the local daemon failed: {}", ex.what());
    } catch (...) {
        _daemon_verdict = "the connection to the local daemon failed";
    }
    if (!_daemon_verdict.empty())
        _log->warn("{}", _daemon_verdict);
}

bool migration::daemon_gave_up() noexcept {
    note_daemon_verdict();
    return !_daemon_verdict.empty();
}

void migration::check_source_daemon() {
    if (daemon_gave_up())
        throw error(_daemon_verdict);
}

} // namespace ferry::migrator
