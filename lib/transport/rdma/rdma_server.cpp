#include "transport/rdma/rdma_server.hpp"

#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/page.hpp"
#include "sys/net.hpp"
#include "wire/page_wire.hpp"

#include <fmt/format.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

namespace ferry::transport::rdma {

namespace {

// epoll tags: the eventfd, the listener, else a connection's address (its
// completion channel) or that address | 1 (its CM events).
constexpr uint64_t wake_tag = 0;
constexpr uint64_t listener_tag = 2;
constexpr uint64_t cm_bit = 1;

// Requests wait for staging here at most this many at once; more are
// refused (a destination has at most a few dozen in flight).
constexpr size_t max_waiting = 4096;
constexpr auto accept_timeout = std::chrono::seconds(5);

const queue_sizes server_queues{.send = 64, .recv = 32, .message_bytes = 64};

} // namespace

rdma_server::rdma_server(std::shared_ptr<spdlog::logger> log)
    : _log(std::move(log)), _wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      _epoll(::epoll_create1(EPOLL_CLOEXEC)) {
    if (!_wake || !_epoll)
        throw sys_error("eventfd/epoll for the rdma server");
    _listener = rdma_listener::bind_any();
    epoll_watch(_epoll.get(), _wake.get(), wake_tag);
    epoll_watch(_epoll.get(), _listener->fd(), listener_tag);
}

rdma_server::~rdma_server() {
    stop();
}

void rdma_server::register_region(std::byte* base, uint64_t size) {
    if (_mr && _mr->addr == base && _mr->length >= size)
        return;
    const uint64_t t0 = monotonic_ns();
    _mr.reset();
    _mr =
        register_memory(_listener->pd(), base, size, IBV_ACCESS_REMOTE_READ, "the staging region");
    _log->info("rdma: staging region of {} MiB registered in {:.1f} ms", size >> 20,
               ns_to_ms(monotonic_ns() - t0));
}

void rdma_server::serve(staging::stager& stager, patience wait) {
    _patience = wait;
    _region = stager.region();
    register_region(_region.base, stager.size());
    _thread = std::thread([this] { run(); });
}

void rdma_server::stop() noexcept {
    _stopping.store(true);
    const uint64_t one = 1;
    (void)!::write(_wake.get(), &one, sizeof one);
    if (_thread.joinable()) {
        _thread.join();
        _log->info("rdma: {} stage requests answered, {} wake-ups of the serving thread", _requests,
                   _wakeups);
    }
    _waiting.clear();
    _peers.clear(); // disconnects each: their QPs go before the region's MR
    _mr.reset();
}

void rdma_server::pages_staged() noexcept {
    if (_waiting_count.load(std::memory_order_relaxed) == 0)
        return;
    const uint64_t one = 1;
    (void)!::write(_wake.get(), &one, sizeof one);
}

uint64_t rdma_server::region_addr() const noexcept {
    return reinterpret_cast<uintptr_t>(_mr->addr);
}
uint64_t rdma_server::region_size() const noexcept {
    return _mr->length;
}
uint32_t rdma_server::rkey() const noexcept {
    return _mr->rkey;
}

channel_token rdma_server::issue_token() {
    return _tokens.issue();
}

void rdma_server::run() {
    epoll_event events[16];
    while (!_stopping.load()) {
        // The stager wakes this thread when it stages; the timeout only
        // bounds how long a missed wake-up could delay an answer.
        const int n = ::epoll_wait(_epoll.get(), events, 16, _waiting.empty() ? 200 : 5);
        if (n < 0 && errno != EINTR) {
            _log->error("rdma server: epoll_wait: {}", std::strerror(errno));
            return;
        }
        if (n > 0)
            _wakeups++;
        std::vector<rdma_connection*> gone;
        for (int i = 0; i < n; i++) {
            const uint64_t tag = events[i].data.u64;
            if (tag == wake_tag) {
                uint64_t v;
                (void)!::read(_wake.get(), &v, sizeof v);
                continue;
            }
            if (tag == listener_tag) {
                admit_one();
                continue;
            }
            auto* conn = reinterpret_cast<rdma_connection*>(tag & ~cm_bit);
            if (std::find(gone.begin(), gone.end(), conn) != gone.end())
                continue;
            try {
                if (tag & cm_bit) {
                    if (conn->disconnected()) {
                        _log->info("rdma: {} disconnected", conn->peer());
                        gone.push_back(conn);
                    }
                } else {
                    take_requests(*conn);
                }
            } catch (const std::exception& e) {
                _log->warn("rdma: dropping the connection from {}: {}", conn->peer(), e.what());
                gone.push_back(conn);
            }
        }
        for (auto* conn : gone)
            drop(conn);
        answer_staged();
    }
}

void rdma_server::admit_one() {
    try {
        auto conn =
            _listener->accept(_tokens.admission(), server_queues, accept_timeout, _patience);
        if (!conn) {
            _log->warn("rdma: refused a connection that presented no token of this migration");
            return;
        }
        _log->info("rdma: {} connected (a silent peer fails it after {:.1f} s)", conn->peer(),
                   double(_patience.silence().count()) / 1000);
        epoll_watch(_epoll.get(), conn->wait_fd(), reinterpret_cast<uintptr_t>(conn.get()));
        epoll_watch(_epoll.get(), conn->cm_fd(), reinterpret_cast<uintptr_t>(conn.get()) | cm_bit);
        _peers.push_back(std::move(conn));
    } catch (const std::exception& e) {
        _log->warn("rdma: a connection attempt failed: {}", e.what());
    }
}

void rdma_server::take_requests(rdma_connection& conn) {
    ibv_wc wcs[16];
    const uint64_t pages = _region.header().geo.page_count;
    while (const size_t n = conn.poll_or_arm(wcs)) {
        for (size_t i = 0; i < n; i++) {
            if (wcs[i].opcode != IBV_WC_RECV)
                continue; // our answers' sends
            _requests++;
            const auto m = message_from<stage_message>(conn.received(wcs[i]));
            if (!m)
                throw error("malformed stage request");
            if (m->count == 0 || m->count > wire::max_pages_per_request || m->first_page >= pages ||
                m->count > pages - m->first_page || _waiting.size() >= max_waiting) {
                answer(conn, m->tag, false);
                continue;
            }
            auto* states = _region.states();
            uint32_t flags = 0;
            if (m->ask == stage_ask::restage) {
                // The copy it read was bad: forget it, then write it again.
                for (uint32_t p = 0; p < m->count; p++)
                    states[m->first_page + p].store(staging::page_absent,
                                                    std::memory_order_relaxed);
                flags = staging::restage_flag;
            } else if (_region.staged_prefix(m->first_page, m->count) == m->count) {
                answer(conn, m->tag, true);
                continue;
            }
            // A background ask only waits for the stager's own order, so it
            // never queues ahead of a fault.
            if (m->ask != stage_ask::notify) {
                // If the ring is full, the stager still reaches these pages
                // in its own order, and the answer follows then.
                (void)_region.ring().try_push({m->first_page, m->count, flags});
                _region.header().stager_bell.ring();
            }
            _waiting.push_back({&conn, m->tag, m->first_page, m->count});
        }
    }
    _waiting_count.store(uint32_t(_waiting.size()), std::memory_order_relaxed);
}

void rdma_server::answer(rdma_connection& conn, uint32_t tag, bool ok) {
    staged_message a;
    a.tag = tag;
    a.ok = ok ? 1 : 0;
    conn.post_send(as_bytes(a), 0);
}

void rdma_server::answer_staged() {
    if (_waiting.empty())
        return;
    std::erase_if(_waiting, [&](const waiting& w) {
        if (_region.staged_prefix(w.first_page, w.count) < w.count)
            return false;
        try {
            answer(*w.conn, w.tag, true);
        } catch (const std::exception& e) {
            _log->warn("rdma: cannot answer {}: {}", w.conn->peer(), e.what());
        }
        return true;
    });
    _waiting_count.store(uint32_t(_waiting.size()), std::memory_order_relaxed);
}

void rdma_server::drop(rdma_connection* conn) {
    std::erase_if(_waiting, [&](const waiting& w) { return w.conn == conn; });
    std::erase_if(_peers, [&](const auto& p) { return p.get() == conn; });
    _waiting_count.store(uint32_t(_waiting.size()), std::memory_order_relaxed);
}

} // namespace ferry::transport::rdma
