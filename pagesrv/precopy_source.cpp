#include "precopy_source.hpp"

#include "core/checksum.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/fault_inject.hpp"
#include "core/log.hpp"
#include "core/page.hpp"
#include "criu/workload_release.hpp"
#include "sys/page_presence.hpp"
#include "sys/proc.hpp"
#include "sys/sched_policy.hpp"
#include "transport/request_loop.hpp"
#include "wire/control.hpp"
#include "wire/page_wire.hpp"

#include <fmt/format.h>
#include <sys/uio.h>

#include <algorithm>
#include <span>

namespace ferry::pagesrv {

namespace {

constexpr uint32_t pages_per_frame = 256;
// Frames read and sent together. The later rounds and the last one are
// mostly single pages scattered over the memory (what the workload wrote),
// and a read and a write per page cost ~25 us here: a Redis's last round
// of ~1,000 pages took ~25 ms after the freeze, and its pages are what the
// resumed workload touches first.
constexpr size_t frames_per_batch = 64;
constexpr uint64_t end_of_data = ~0ull; // request_id of the empty reply that ends the rounds
constexpr size_t runs_per_valid_frame = 16384;
// The rounds have converged when one sends at most this many pages, when
// three in a row shrink by less than a fifth, or after this many rounds.
constexpr uint64_t converged_pages = 1024;
constexpr uint32_t converged_rounds = 30;
constexpr auto send_bound = std::chrono::seconds(30);

// The pages of `runs` that `held` holds (`in_held`) or does not, in
// address order.
std::vector<proc::page_run> runs_by(const range_map& held, const std::vector<proc::page_run>& runs,
                                    bool in_held) {
    std::vector<proc::page_run> out;
    auto add = [&](uint64_t s, uint64_t e) {
        if (s >= e)
            return;
        if (!out.empty() && out.back().end == s)
            out.back().end = e;
        else
            out.push_back({s, e});
    };
    for (const auto& run : runs) {
        uint64_t at = run.start;
        while (at < run.end) {
            const auto r = held.first_ending_after(at);
            const uint64_t s = r ? std::clamp(r->start, at, run.end) : run.end;
            if (!in_held)
                add(at, s);
            if (!r || r->start >= run.end)
                break;
            const uint64_t e = std::min(run.end, r->end);
            if (in_held)
                add(s, e);
            at = e;
        }
    }
    return out;
}

// Appends the pages of `pid` that exist in `areas` (page_presence: present
// or swapped, not the zero page).
void existing_pages(pid_t pid, const std::vector<proc::page_run>& areas,
                    std::vector<proc::page_run>& out) {
    proc::page_presence presence(pid);
    for (const auto& area : areas)
        (void)presence.existing(area.start, area.end, out);
}

// The tree's root is being frozen: its cgroup's freezer, or CRIU's
// ptrace stop ('t'), or a stop signal's ('T').
bool freezing(pid_t root) {
    if (criu::cgroup_frozen(root))
        return true;
    const auto state = proc::state(root);
    return state && (*state == 't' || *state == 'T');
}

uint64_t pages_of(const std::vector<proc::page_run>& runs) {
    uint64_t n = 0;
    for (const auto& r : runs)
        n += pages_in(r.end - r.start);
    return n;
}

// The first `budget` pages of `runs`; the budget shrinks by as many.
void keep_first(std::vector<proc::page_run>& runs, uint64_t& budget) {
    size_t i = 0;
    for (; i < runs.size() && budget > 0; i++) {
        const uint64_t n = std::min(budget, pages_in(runs[i].end - runs[i].start));
        runs[i].end = runs[i].start + n * page_size;
        budget -= n;
    }
    runs.resize(i);
}

} // namespace

precopy_source::precopy_source(std::string id, pid_t root, std::string destination_identity,
                               std::chrono::milliseconds bound,
                               std::chrono::milliseconds round_interval)
    : _id(std::move(id)), _reader(std::move(destination_identity)), _round_interval(round_interval),
      _root(root), _log(make_logger("pagesrv", _id)), _buffer(size_t(pages_per_frame) * page_size),
      _checksums(pages_per_frame), _headers(frames_per_batch), _remote(frames_per_batch),
      _out(3 * frames_per_batch) {
    _batch.reserve(frames_per_batch);
    // In image pid order, as the destination's processes are.
    std::vector<std::pair<uint32_t, pid_t>> tree;
    for (const pid_t pid : proc::tree(root))
        if (const auto ns = proc::ns_pids(pid); !ns.empty()) // else gone meanwhile
            tree.emplace_back(uint32_t(ns.back()), pid);
    std::sort(tree.begin(), tree.end());
    std::string failures;
    for (const auto& [image_pid, pid] : tree) {
        try {
            process p;
            p.host_pid = pid;
            p.image_pid = image_pid;
            p.tracker = std::make_unique<proc::write_tracker>(pid, bound);
            _procs.push_back(std::move(p));
        } catch (const std::exception& e) {
            // Its pages are fetched after the freeze, as without a pre-copy.
            failures += fmt::format("{}pid {}: {}", failures.empty() ? "" : "; ", pid, e.what());
        }
    }
    if (!failures.empty())
        _log->warn("pre-copy: not tracked: {}", failures);
    if (_procs.empty())
        _summary.error =
            failures.empty() ? "no process to track" : "no process could be tracked: " + failures;
}

precopy_source::~precopy_source() {
    detach(); // the tasks run again (an abort) or are gone
}

void precopy_source::detach() noexcept {
    for (auto& p : _procs)
        p.tracker.reset(); // unregisters in slices: the task runs on as before
}

precopy_summary precopy_source::summary() const {
    std::lock_guard lock(_mu);
    return _summary;
}

precopy_source::phase precopy_source::current() const {
    std::lock_guard lock(_mu);
    return _phase;
}

precopy_summary precopy_source::wait_converged(std::chrono::milliseconds timeout) {
    std::unique_lock lock(_mu);
    _changed.wait_for(lock, timeout, [&] {
        return _summary.converged || !_summary.error.empty() || _phase != phase::rounds ||
               (_served && !_serving);
    });
    return _summary;
}

bool precopy_source::in_rounds(phase p) noexcept {
    return p == phase::rounds || p == phase::rounds_until_freezing;
}

bool precopy_source::still_in(phase want) const {
    const phase now = current();
    if (now == want)
        return true;
    return want == phase::rounds && now == phase::rounds_until_freezing && !freezing(_root);
}

void precopy_source::freeze_near() noexcept {
    {
        std::lock_guard lock(_mu);
        if (_phase == phase::rounds)
            _phase = phase::rounds_until_freezing;
    }
    _changed.notify_all();
}

void precopy_source::freeze() noexcept {
    {
        std::lock_guard lock(_mu);
        if (in_rounds(_phase))
            _phase = phase::frozen;
    }
    _changed.notify_all();
}

void precopy_source::stop() noexcept {
    {
        std::lock_guard lock(_mu);
        _phase = phase::stopped;
        if (_conn)
            _conn->shutdown();
    }
    _changed.notify_all();
}

void precopy_source::note_round(uint64_t pages) {
    {
        std::lock_guard lock(_mu);
        const uint64_t before = _summary.last_round_pages;
        _summary.rounds++;
        _summary.last_round_pages = pages;
        _slow_shrinks = _summary.rounds > 1 && pages * 5 > before * 4 ? _slow_shrinks + 1 : 0;
        if (!_summary.converged &&
            (pages <= converged_pages || _slow_shrinks >= 3 || _summary.rounds >= converged_rounds))
            _summary.converged = true;
    }
    _changed.notify_all();
}

bool precopy_source::send_runs(net::stream& conn, process& p,
                               const std::vector<proc::page_run>& runs, uint32_t round,
                               uint64_t& sent, phase while_in) {
    uint32_t batched = 0;
    auto flush = [&] {
        batched = 0;
        if (!still_in(while_in)) {
            _batch.clear();
            return false;
        }
        send_batch(conn, p, round, sent);
        return true;
    };
    for (const auto& run : runs) {
        for (uint64_t at = run.start; at < run.end;) {
            const auto n =
                uint32_t(std::min<uint64_t>(pages_in(run.end - at), pages_per_frame - batched));
            _batch.push_back({at, n});
            batched += n;
            at += uint64_t(n) * page_size;
            if ((_batch.size() == frames_per_batch || batched == pages_per_frame) && !flush())
                return false;
        }
    }
    return _batch.empty() || flush();
}

pieces_read count_pieces_read(std::span<const frame_piece> pieces, uint64_t read) noexcept {
    uint64_t page = 0;
    for (size_t i = 0; i < pieces.size(); i++) {
        if (page >= read)
            return {i, i + 1}; // its first page could not be read
        page += pieces[i].pages;
        if (page > read)
            return {i + 1, i + 1}; // read in part: its rest is skipped
    }
    return {pieces.size(), pieces.size()};
}

void precopy_source::send_batch(net::stream& conn, process& p, uint32_t round, uint64_t& sent) {
    size_t from = 0;
    while (from < _batch.size()) {
        const std::span<frame_piece> pieces(_batch.data() + from, _batch.size() - from);
        uint64_t bytes = 0;
        for (size_t i = 0; i < pieces.size(); i++) {
            _remote[i] = {reinterpret_cast<void*>(pieces[i].at),
                          size_t(pieces[i].pages) * page_size};
            bytes += _remote[i].iov_len;
        }
        iovec local{_buffer.data(), size_t(bytes)};
        const ssize_t got =
            ::process_vm_readv(p.host_pid, &local, 1, _remote.data(), pieces.size(), 0);
        // Unmapped meanwhile, or the task gone: what came before goes, the
        // rest of that piece is fetched after the freeze.
        const uint64_t read = got > 0 ? pages_in(uint64_t(got)) : 0;
        const pieces_read r = count_pieces_read(pieces, read);
        for (uint64_t i = 0; i < read; i++)
            _checksums[i] = page_checksum(_buffer.data() + size_t(i) * page_size);
        if (read > 0 && fault_injected(fault::corrupt_precopy_page) && !_corrupted_once) {
            _corrupted_once = true;
            _buffer[100] ^= std::byte{0xff};
        }
        uint64_t page = 0;
        int iovs = 0;
        for (size_t i = 0; i < r.frames; i++) {
            frame_piece& f = pieces[i];
            f.pages = uint32_t(std::min<uint64_t>(f.pages, read - page)); // what was read of it
            _headers[i] =
                wire::encode(wire::page_reply{wire::status::ok, p.image_pid, f.pages, f.at, round});
            _out[size_t(iovs++)] = {_headers[i].data(), _headers[i].size()};
            _out[size_t(iovs++)] = {_checksums.data() + page, size_t(f.pages) * sizeof(uint64_t)};
            _out[size_t(iovs++)] = {_buffer.data() + size_t(page) * page_size,
                                    size_t(f.pages) * page_size};
            page += f.pages;
        }
        if (iovs > 0)
            net::writev_full(conn, _out.data(), iovs, net::after(send_bound),
                             "send pre-copy pages");
        // Clean from here on: sent, and not written since.
        for (const frame_piece& f : pieces.first(r.frames))
            p.clean.insert_identity(f.at, f.at + uint64_t(f.pages) * page_size);
        sent += page;
        from += r.done;
    }
    _batch.clear();
}

void precopy_source::take_written(process& p, std::vector<proc::page_run>& out) {
    out.clear();
    if (!p.tracker)
        return;
    for (const auto& area : p.tracker->tracked()) {
        try {
            p.tracker->written(area.start, area.end, out);
        } catch (const std::exception& e) {
            // Unmapped or replaced: nothing staged there can be trusted.
            _log->debug("pre-copy: pid {} [{:#x}, {:#x}) no longer tracked: {}", p.host_pid,
                        area.start, area.end, e.what());
            p.clean.erase(area.start, area.end);
        }
    }
    for (const auto& r : out)
        p.clean.erase(r.start, r.end);
}

void precopy_source::serve(net::stream& conn) {
    {
        std::lock_guard lock(_mu);
        if (_serving || _served)
            throw error("a second pre-copy channel for the migration");
        if (_phase == phase::stopped)
            throw error("the migration ended before its pre-copy channel came");
        _serving = true;
        _conn = &conn;
        _summary.connected = true;
    }
    // The trackers stay until the migration ends (the destructor), unless
    // the pre-copy stopped: unregistering takes each task's mmap lock for
    // writing, and at the idle policy, after the freeze, it held up the
    // page server's reads of the frozen tasks (fault fetches of 4-12 ms at
    // p99 in a Redis bench, against 0.4 without a pre-copy).
    struct end_serving {
        precopy_source& s;
        ~end_serving() {
            if (s.current() == phase::stopped)
                s.detach();
            {
                std::lock_guard lock(s._mu);
                s._serving = false;
                s._served = true;
                s._conn = nullptr;
            }
            s._changed.notify_all();
        }
    } ending{*this};

    if (const auto why = summary().error; !why.empty()) {
        control::send_error(conn, "no pre-copy: " + why, net::after(send_bound));
        return;
    }
    // The first round: every page present in the tracked areas.
    std::vector<std::vector<proc::page_run>> present(_procs.size());
    uint64_t bytes = 0;
    for (size_t i = 0; i < _procs.size(); i++) {
        existing_pages(_procs[i].host_pid, _procs[i].tracker->tracked(), present[i]);
        bytes += pages_of(present[i]) * page_size;
    }
    {
        std::lock_guard lock(_mu);
        _summary.tracked_pages = pages_in(bytes);
    }
    FerryControl__PrecopyPlan plan = FERRY_CONTROL__PRECOPY_PLAN__INIT;
    plan.bytes = bytes;
    plan.processes = uint32_t(_procs.size());
    control::send_message(conn, plan, net::after(send_bound));
    const uint64_t t0 = monotonic_ns();
    uint64_t sent = 0;
    for (size_t i = 0; i < _procs.size(); i++)
        if (!send_runs(conn, _procs[i], present[i], 0, sent, phase::rounds))
            break;
    present.clear();
    {
        std::lock_guard lock(_mu);
        _summary.pages_sent = sent;
    }
    _log->info("pre-copy: first round, {} pages in {:.1f} ms", sent,
               double(monotonic_ns() - t0) / 1e6);

    // Then what was written since, until the freeze.
    std::vector<proc::page_run> written;
    bool at_idle = false;
    for (uint32_t round = 1;; round++) {
        bool near_freeze;
        {
            std::unique_lock lock(_mu);
            _changed.wait_for(lock, _round_interval, [&] { return !in_rounds(_phase); });
            near_freeze = _phase == phase::rounds_until_freezing;
        }
        if (!still_in(phase::rounds))
            break;
        if (near_freeze && !at_idle) {
            // From here the dump and, on a machine both share, the
            // destination's restore go first: at the normal policy the
            // rounds' pages, received during the restore, seemed to slow
            // it (a Redis bench's restore part 16-28 ms, against 14-24 at
            // this policy; one bench of 4 runs each).
            at_idle = true;
            (void)proc::set_idle_policy(true); // best effort
        }
        uint64_t round_pages = 0;
        for (auto& p : _procs) {
            take_written(p, written);
            if (!send_runs(conn, p, written, round, round_pages, phase::rounds))
                break;
        }
        {
            std::lock_guard lock(_mu);
            _summary.pages_sent += round_pages;
        }
        note_round(round_pages);
    }
    {
        // The tree began to freeze: nothing more until the freeze (the
        // registration) or the end.
        std::unique_lock lock(_mu);
        _changed.wait(lock, [&] { return _phase == phase::frozen || _phase == phase::stopped; });
        if (_phase == phase::stopped)
            return;
    }
    // Frozen: at the idle policy, the last scan takes no CPU from the
    // downtime's own work on this host.
    (void)proc::set_idle_policy(true); // best effort
    send_valid(conn);
}

namespace {

// The valid runs of every process, as precopy_valid's parallel arrays.
struct valid_runs {
    std::vector<uint32_t> pids;
    std::vector<uint64_t> starts, ends;
    uint64_t pages = 0;

    void add(uint32_t pid, const std::vector<proc::page_run>& runs) {
        for (const auto& r : runs) {
            pids.push_back(pid);
            starts.push_back(r.start);
            ends.push_back(r.end);
            pages += pages_in(r.end - r.start);
        }
    }
};

// Ends the page frames (an empty reply), then says which staged pages are
// valid, in frames; `more`: the last round and a complete list follow.
void send_valid_runs(net::stream& conn, valid_runs& v, bool more, net::deadline until) {
    (void)transport::send_page_reply(conn, wire::page_reply{wire::status::ok, 0, 0, 0, end_of_data},
                                     nullptr, nullptr, until);
    size_t at = 0;
    do {
        const size_t n = std::min(runs_per_valid_frame, v.pids.size() - at);
        FerryControl__PrecopyValid f = FERRY_CONTROL__PRECOPY_VALID__INIT;
        f.n_pid = f.n_start = f.n_end = n;
        f.pid = v.pids.data() + at;
        f.start = v.starts.data() + at;
        f.end = v.ends.data() + at;
        at += n;
        f.last = at == v.pids.size();
        f.has_more = f.last && more;
        f.more = f.has_more;
        control::send_message(conn, f, until);
    } while (at < v.pids.size());
}

} // namespace

// In two steps, so that the destination need not wait for the last round:
// first the pages valid now (sent and not written since), which it may
// use at once, then the last round's pages from the frozen tasks and the
// complete list. The last round is tens of ms of frames where this host's
// CPUs are shared with the destination's restore and its resumed workload
// (the testbed's hosts are one machine): its valid runs came 20-160 ms
// after the registration, mostly after the resume, and until then every
// fault went to the network and the local pass waited.
void precopy_source::send_valid(net::stream& conn) {
    const uint64_t t0 = monotonic_ns();
    std::vector<proc::page_run> written;
    std::vector<std::vector<proc::page_run>> present(_procs.size()), resend(_procs.size());
    valid_runs now;
    uint64_t budget = precopy_final_round_pages;
    bool last_round = false;
    for (size_t i = 0; i < _procs.size(); i++) {
        auto& p = _procs[i];
        take_written(p, written);
        existing_pages(p.host_pid, p.tracker->tracked(), present[i]);
        // The last round, from the frozen tasks: every present page not
        // sent since its last write (written since the round before, in a
        // round the freeze cut short, or never read).
        resend[i] = runs_by(p.clean, present[i], false);
        keep_first(resend[i], budget);
        last_round = last_round || !resend[i].empty();
        now.add(p.image_pid, runs_by(p.clean, present[i], true));
    }
    send_valid_runs(conn, now, last_round, net::after(send_bound));
    const uint64_t first_pages = now.pages;
    const double first_ms = double(monotonic_ns() - t0) / 1e6;
    uint64_t final_pages = 0;
    valid_runs after = last_round ? valid_runs{} : std::move(now);
    if (last_round) {
        const uint32_t final_round = summary().rounds + 1;
        for (size_t i = 0; i < _procs.size(); i++) {
            auto& p = _procs[i];
            if (!send_runs(conn, p, resend[i], final_round, final_pages, phase::frozen))
                return; // stopped
            after.add(p.image_pid, runs_by(p.clean, present[i], true));
        }
        send_valid_runs(conn, after, false, net::after(send_bound));
    }
    {
        std::lock_guard lock(_mu);
        _summary.pages_sent += final_pages;
        _summary.final_round_pages = final_pages;
    }
    _log->info("pre-copy: {} pages valid at the freeze, in {} runs, {} of them sent after it "
               "({:.1f} ms; {} were said valid after {:.1f} ms)",
               after.pages, after.pids.size(), final_pages, double(monotonic_ns() - t0) / 1e6,
               first_pages, first_ms);
}

} // namespace ferry::pagesrv
