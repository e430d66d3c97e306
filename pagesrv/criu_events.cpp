#include "criu_events.hpp"

#include "core/clock.hpp"

#include <sys/socket.h>

#include <algorithm>

namespace ferry::pagesrv {

namespace {

// Sessions forget their migration when they end; this bounds what a flood
// of reports for unknown migrations can hold.
constexpr size_t max_migrations = 256;

uint64_t* slot(criu_moments& m, const std::string& event) {
    if (event == "engine-pause")
        return &m.engine_pause;
    if (event == "freeze-start")
        return &m.freeze_start;
    if (event == "frozen")
        return &m.frozen;
    if (event == "dump-end")
        return &m.dump_end;
    if (event == "resumed")
        return &m.resumed;
    return nullptr;
}

} // namespace

void criu_moments::to_message(FerryControl__CriuMoments& out) const {
    out = FERRY_CONTROL__CRIU_MOMENTS__INIT;
    out.has_engine_pause_ns = engine_pause != 0;
    out.engine_pause_ns = engine_pause;
    out.has_freeze_start_ns = freeze_start != 0;
    out.freeze_start_ns = freeze_start;
    out.has_frozen_ns = frozen != 0;
    out.frozen_ns = frozen;
    out.has_dump_end_ns = dump_end != 0;
    out.dump_end_ns = dump_end;
    out.has_resumed_ns = resumed != 0;
    out.resumed_ns = resumed;
    out.has_now_ns = true;
    out.now_ns = monotonic_ns();
}

criu_event_log::criu_event_log() {
    unique_fd s(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!s)
        return;
    socklen_t len = 0;
    const auto addr = criu_events::socket_address(len);
    if (::bind(s.get(), reinterpret_cast<const sockaddr*>(&addr), len) == 0)
        _sock = std::move(s);
}

std::vector<std::pair<std::string, criu_event>> criu_event_log::receive() {
    std::vector<std::pair<std::string, criu_event>> got;
    if (!_sock)
        return got;
    char buf[256];
    for (;;) {
        const ssize_t n = ::recv(_sock.get(), buf, sizeof buf - 1, MSG_DONTWAIT);
        if (n <= 0)
            break;
        if (auto e = criu_events::parse(std::string(buf, size_t(n)))) {
            record(e->first, e->second);
            got.push_back(std::move(*e));
        }
    }
    return got;
}

void criu_event_log::record(const std::string& migration_id, const criu_event& e) {
    {
        std::lock_guard lock(_mutex);
        auto [it, fresh] = _moments.try_emplace(migration_id);
        if (fresh) {
            _order.push_back(migration_id);
            if (_order.size() > max_migrations) {
                _moments.erase(_order.front());
                _order.pop_front();
            }
        }
        if (uint64_t* s = slot(it->second, e.name); s && *s == 0)
            *s = e.monotonic_ns;
    }
    _arrived.notify_all();
}

criu_moments criu_event_log::moments(const std::string& migration_id) {
    (void)receive();
    std::lock_guard lock(_mutex);
    auto it = _moments.find(migration_id);
    return it == _moments.end() ? criu_moments{} : it->second;
}

criu_moments criu_event_log::wait_for(const std::string& migration_id, const std::string& event,
                                      std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        (void)receive();
        std::unique_lock lock(_mutex);
        auto it = _moments.find(migration_id);
        if (it != _moments.end()) {
            criu_moments copy = it->second;
            if (const uint64_t* s = slot(copy, event); s && *s)
                return copy;
        }
        // The daemon's loop reads the socket too; wake at least every 5 ms
        // to read it here in case the loop is busy.
        if (std::chrono::steady_clock::now() >= until)
            return it == _moments.end() ? criu_moments{} : it->second;
        _arrived.wait_for(lock, std::chrono::milliseconds(5));
    }
}

void criu_event_log::forget(const std::string& migration_id) {
    std::lock_guard lock(_mutex);
    _moments.erase(migration_id);
    _order.erase(std::remove(_order.begin(), _order.end(), migration_id), _order.end());
}

} // namespace ferry::pagesrv
