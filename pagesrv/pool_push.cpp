#include "pool_push.hpp"

#include "core/checksum.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/fault_inject.hpp"
#include "core/log.hpp"
#include "core/mapping.hpp"
#include "core/page.hpp"
#include "outgoing.hpp"
#include "pool/pool_rebuild.hpp"

#include <fmt/format.h>
#include <sys/mman.h>

#include <bit>
#include <cstring>
#include <thread>
#include <vector>

namespace ferry::pagesrv {

pool_pusher::pool_pusher(outgoing_migration& m, pool::pool_spec spec, uint64_t object)
    : _m(m), _log(make_logger("pagesrv", m.id())), _spec(std::move(spec)), _object(object),
      _thread([this] { run(); }) {}

pool_pusher::~pool_pusher() {
    stop();
    if (_thread.joinable())
        _thread.join();
}

push_result pool_pusher::wait() {
    std::unique_lock lock(_mutex);
    _done_cv.wait(lock, [&] { return _done; });
    return _result;
}

std::optional<push_result> pool_pusher::wait_for(std::chrono::milliseconds timeout) {
    std::unique_lock lock(_mutex);
    if (!_done_cv.wait_for(lock, timeout, [&] { return _done; }))
        return std::nullopt;
    return _result;
}

// Nodes lost during the push: their members go onto spares (rebuilt from the
// pool, checked against the source's checksums) before the hand-off, so the
// source only goes once the pool has the requested redundancy again.
void pool_pusher::restore_redundancy(const std::shared_ptr<pool::pool_health>& health) {
    for (uint32_t slot = 0; slot < health->slots(); slot++) {
        if (!health->dead(slot))
            continue;
        const auto spare = health->take_spare();
        if (!spare)
            throw error(fmt::format("lost {} during the push and no spare is left: the pool "
                                    "lacks the requested redundancy",
                                    health->lost_nodes()));
        _log->warn("rebuilding pool slot {} onto spare {} before the hand-off", slot,
                   spare->to_string());
        const auto rep = pool::rebuild_slot(_spec, _object, _m.pages_total(), health, slot, *spare);
        if (!rep.ok)
            throw error(
                fmt::format("rebuilding slot {} onto {}: {}", slot, spare->to_string(), rep.error));
    }
}

// The pages are the destination's to read (and to drop once installed):
// pool nodes serve an object only to its members.
// The spares too, at once: whichever of the two rebuilds onto a spare first
// (this daemon before the hand-off, the destination after a loss), the other
// must be able to write and read there as well.
void pool_pusher::grant_destination(pool::pool_client& client) {
    const auto& reader = _m.access().destination_identity;
    uint32_t refused = client.grant(reader);
    if (!_spec.spares.empty()) {
        pool::pool_spec spares = _spec;
        spares.nodes = _spec.spares;
        spares.spares.clear();
        spares.level = raid::level::raid0;
        auto health = std::make_shared<pool::pool_health>(spares);
        pool::pool_client c(spares, _object, health,
                            pool::pool_client::options{.name = "grant " + _m.id()});
        refused += c.grant(reader);
    }
    if (refused)
        _log->warn("{} pool node(s) did not let {} read the pages", refused, reader);
}

void pool_pusher::discard() noexcept {
    stop();
    (void)wait();
    try {
        auto health = std::make_shared<pool::pool_health>(_spec);
        pool::pool_client client(_spec, _object, health,
                                 pool::pool_client::options{.name = "discard " + _m.id()});
        client.drop_object();
    } catch (const std::exception& e) {
        _log->warn("cannot drop its pages from the pool: {}", e.what());
    }
}

void pool_pusher::run() noexcept {
    const uint64_t start = monotonic_ns();
    push_result r;
    try {
        auto health = std::make_shared<pool::pool_health>(_spec);
        pool::pool_client client(_spec, _object, health,
                                 pool::pool_client::options{.name = "push " + _m.id()});
        if (health->dead_mask())
            throw error("pool nodes unreachable: " + health->lost_nodes());
        grant_destination(client);
        push_all(client);
        restore_redundancy(health);
        grant_destination(client); // the spares that replaced lost nodes too
        r.ok = true;
        r.pages = _m.pages_total();
        r.bytes_stored = client.stats().bytes_written;
    } catch (const std::exception& e) {
        r.error = e.what();
        _log->error("pool push failed: {}", r.error);
    }
    r.push_ns = monotonic_ns() - start;
    if (r.ok)
        _log->info("pushed {} pages into the pool in {:.1f} ms", r.pages, ns_to_ms(r.push_ns));
    std::lock_guard lock(_mutex);
    _result = r;
    _done = true;
    _done_cv.notify_all();
}

// Pages go out in batches of whole stripes, in the lazy page index's order
// (pid, then address), read from the frozen tasks as the page channel does.
void pool_pusher::push_all(pool::pool_client& client) {
    const auto& lay = client.layout();
    const uint32_t pps = lay.pages_per_stripe;
    const uint32_t batch_stripes = std::max(1u, 256u / pps);
    const size_t batch_pages = size_t(batch_stripes) * pps;
    const auto buffer = mapping::anonymous(batch_pages * page_size, "push buffer", MAP_POPULATE);
    auto* pages = buffer.data();
    std::vector<uint64_t> sums(batch_pages);
    const uint64_t zero_sum = [] {
        std::vector<std::byte> z(page_size);
        return page_checksum(z.data());
    }();

    uint64_t next_stripe = 0;
    size_t filled = 0; // pages in the batch so far
    auto flush = [&] {
        if (filled == 0)
            return;
        const uint32_t stripes = uint32_t((filled + pps - 1) / pps);
        for (size_t i = filled; i < size_t(stripes) * pps; i++) { // pad the last stripe
            std::memset(pages + i * page_size, 0, page_size);
            sums[i] = zero_sum;
        }
        // A node lost mid-push (within what the level tolerates) costs one
        // member per stripe: go on degraded; restore_redundancy fills a spare.
        if (const uint32_t failed = client.put_stripes(next_stripe, stripes, pages, sums.data())) {
            const uint32_t dead = uint32_t(std::popcount(client.health().dead_mask()));
            if (dead == 0 || dead > lay.geo.tolerates() || failed > stripes * dead)
                throw error(fmt::format("{} chunk writes failed; lost nodes: {}", failed,
                                        client.health().lost_nodes()));
        }
        next_stripe += stripes;
        filled = 0;
        if (fault_injected(fault::slow_pool_push))
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
    };
    for (const auto& r : _m.lazy_pages().ranges()) {
        const uint32_t pid = r.pid;
        const uint64_t end = r.end;
        for (uint64_t a = r.start; a < end;) {
            if (_stop)
                throw error("stopped");
            const uint32_t n =
                uint32_t(std::min<uint64_t>((end - a) / page_size, batch_pages - filled));
            wire::page_request req{wire::op::get, pid, n, a, 0};
            const auto st = _m.read_pages(req, pages + filled * page_size, sums.data() + filled);
            if (st != wire::status::ok)
                throw error(
                    fmt::format("reading pid {} at {:#x}: {}", pid, a, wire::to_string(st)));
            filled += n;
            a += uint64_t(n) * page_size;
            if (filled == batch_pages)
                flush();
        }
    }
    flush();
}

} // namespace ferry::pagesrv
