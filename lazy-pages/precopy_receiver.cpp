#include "precopy_receiver.hpp"

#include "core/checksum.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/page.hpp"
#include "sys/sched_policy.hpp"
#include "tls/tls_stream.hpp"
#include "wire/control.hpp"
#include "wire/page_wire.hpp"

#include <fmt/format.h>

#include <vector>

namespace ferry::lazy {

namespace {
constexpr uint64_t end_of_data = ~0ull; // the source's empty reply after the rounds
} // namespace

precopy_receiver::precopy_receiver(net::endpoint source, tls::credentials_ptr creds,
                                   std::string migration_id,
                                   std::chrono::milliseconds connect_timeout,
                                   std::chrono::milliseconds wait, spdlog::logger& log)
    : _source(std::move(source)), _creds(std::move(creds)), _migration_id(std::move(migration_id)),
      _connect_timeout(connect_timeout), _wait(wait), _log(log) {
    _thread = std::thread([this] {
        // Staging is copying that nothing waits for: the restore, the
        // handlers and the workload go first.
        (void)proc::set_idle_policy(true); // best effort
        try {
            receive();
        } catch (const std::exception& e) {
            give_up(e.what());
        }
    });
}

precopy_receiver::~precopy_receiver() {
    {
        std::lock_guard lock(_mu);
        _stop = true;
        if (_conn)
            _conn->shutdown();
    }
    if (_thread.joinable())
        _thread.join();
}

std::string precopy_receiver::unused() const {
    std::lock_guard lock(_mu);
    return _unused;
}

void precopy_receiver::give_up(const std::string& why) noexcept {
    std::lock_guard lock(_mu);
    if (_staged.ready()) {
        // What was published stays valid: each page of it was checked.
        if (!_stop)
            _log.warn("the pre-copy's last round goes unused (its pages are fetched): {}", why);
        return;
    }
    _staged.abandon();
    if (_unused.empty())
        _unused = why;
    if (!_stop)
        _log.warn("the pre-copy goes unused: {}", why);
}

void precopy_receiver::receive() {
    auto conn = tls::connect(_source, _creds, _connect_timeout);
    struct registered {
        precopy_receiver& r;
        registered(precopy_receiver& rr, net::stream* c) : r(rr) {
            std::lock_guard lock(r._mu);
            if (r._stop)
                throw error("lazy-pages ends");
            r._conn = c;
        }
        ~registered() {
            std::lock_guard lock(r._mu);
            r._conn = nullptr;
        }
    } reg{*this, conn.get()};
    const std::string peer = "source " + _source.to_string();
    FerryControl__PageChannelOpen open = FERRY_CONTROL__PAGE_CHANNEL_OPEN__INIT;
    open.migration_id = const_cast<char*>(_migration_id.c_str());
    open.kind = FERRY_CONTROL__CHANNEL_KIND__PRECOPY;
    control::send_message(*conn, open, net::after(_connect_timeout));
    auto plan = control::receive(*conn, net::after(_wait));
    control::expect(plan.get(), FERRY_CONTROL__ENVELOPE__BODY_PRECOPY_PLAN, peer);
    _staged.reserve(plan->precopy_plan->bytes);
    _log.info("pre-copy: the source streams {} MiB of {} processes",
              plan->precopy_plan->bytes >> 20, plan->precopy_plan->processes);

    const uint64_t t0 = monotonic_ns();
    uint64_t frames = 0, received = 0;
    // The rounds, then (if the source says more) the last round: pages up
    // to an empty reply, then the runs valid so far, published at once.
    for (bool more = true; more;) {
        receive_pages(*conn, peer, frames, received);
        _staged.publish(receive_valid(*conn, peer, more));
        _log.info("pre-copy: {} pages staged in {} frames over {:.1f} ms ({} received, {} without "
                  "room), {} valid{}, {} sent more than once (installed first)",
                  _staged.pages_staged(), frames, double(monotonic_ns() - t0) / 1e6, received,
                  _staged.pages_not_staged(), _staged.pages_valid(),
                  more ? " before the last round" : " at the freeze", _staged.pages_rewritten());
    }
}

void precopy_receiver::receive_pages(net::stream& conn, const std::string& peer, uint64_t& frames,
                                     uint64_t& received) {
    std::vector<std::byte> pages(size_t(wire::max_pages_per_request) * page_size);
    std::vector<uint64_t> sums(wire::max_pages_per_request);
    for (;;) {
        wire::header_bytes h;
        if (!net::read_full(conn, h, net::after(_wait), "read pre-copy pages"))
            throw error(peer + " closed the pre-copy channel before its end");
        wire::page_reply rep;
        if (auto err = wire::decode(h, rep); err != wire::decode_error::none)
            throw error(
                fmt::format("{}: malformed pre-copy frame ({})", peer, wire::to_string(err)));
        if (rep.result != wire::status::ok || rep.nr_pages > wire::max_pages_per_request)
            throw error(fmt::format("{}: pre-copy frame with status {} and {} pages", peer,
                                    wire::to_string(rep.result), rep.nr_pages));
        if (rep.nr_pages == 0 && rep.request_id == end_of_data)
            return;
        const auto sum_bytes = std::as_writable_bytes(std::span(sums).first(rep.nr_pages));
        const auto page_bytes = std::span(pages).first(size_t(rep.nr_pages) * page_size);
        if (!net::read_full(conn, sum_bytes, net::after(_wait), "read pre-copy checksums") ||
            !net::read_full(conn, page_bytes, net::after(_wait), "read pre-copy pages"))
            throw error(peer + " closed the pre-copy channel in a frame");
        // A page whose checksum fails is never installed: nothing staged
        // is (or, in the last round, nothing more).
        for (uint32_t i = 0; i < rep.nr_pages; i++)
            if (page_checksum(pages.data() + size_t(i) * page_size) != sums[i])
                throw error(fmt::format("checksum mismatch in the pre-copy: pid {} page {:#x}",
                                        rep.pid, rep.vaddr + uint64_t(i) * page_size));
        // A page said valid is being installed from its copy now: one sent
        // again would be a source's fault, and is refused.
        if (_staged.ready() &&
            _staged.any_valid(rep.pid, rep.vaddr, rep.vaddr + uint64_t(rep.nr_pages) * page_size))
            throw error(fmt::format("{}: pid {} page {:#x} sent again after it was said valid",
                                    peer, rep.pid, rep.vaddr));
        _staged.store(rep.pid, rep.vaddr, rep.nr_pages, pages.data());
        frames++;
        received += rep.nr_pages;
    }
}

std::vector<std::pair<uint32_t, std::pair<uint64_t, uint64_t>>>
precopy_receiver::receive_valid(net::stream& conn, const std::string& peer, bool& more) {
    std::vector<std::pair<uint32_t, std::pair<uint64_t, uint64_t>>> valid;
    for (;;) {
        auto f = control::receive(conn, net::after(_wait));
        control::expect(f.get(), FERRY_CONTROL__ENVELOPE__BODY_PRECOPY_VALID, peer);
        const auto& v = *f->precopy_valid;
        if (v.error)
            throw error(
                fmt::format("{} cannot tell which staged pages are valid: {}", peer, v.error));
        if (v.n_pid != v.n_start || v.n_pid != v.n_end)
            throw error(peer + ": a precopy_valid frame whose arrays differ in length");
        for (size_t i = 0; i < v.n_pid; i++) {
            if (v.start[i] >= v.end[i] || v.start[i] % page_size || v.end[i] % page_size)
                throw error(fmt::format("{}: malformed valid run [{:#x}, {:#x})", peer, v.start[i],
                                        v.end[i]));
            valid.push_back({v.pid[i], {v.start[i], v.end[i]}});
        }
        if (v.last) {
            more = v.has_more && v.more;
            return valid;
        }
    }
}

} // namespace ferry::lazy
