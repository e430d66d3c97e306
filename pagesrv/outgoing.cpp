#include "outgoing.hpp"

#include "core/checksum.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/fault_inject.hpp"
#include "core/log.hpp"
#include "criu/criu_page_server.hpp"
#include "criu/workload_release.hpp"
#include "sys/page_presence.hpp"
#include "sys/proc.hpp"
#include "sys/sched_policy.hpp"
#include "wire/control.hpp"

#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <thread>

namespace ferry::pagesrv {

outgoing_migration::outgoing_migration(std::string id, const std::filesystem::path& images_dir,
                                       pid_t root_pid, uint16_t criu_port,
                                       const transport::backend& fabric,
                                       std::unique_ptr<transport::source_state> prepared,
                                       double deadline_scale)
    : _id(std::move(id)), _log(make_logger("pagesrv", _id)), _root_pid(root_pid),
      _criu_port(criu_port), _fabric(fabric) {
    const auto images = criu::image_set::load(images_dir);
    // The tree is frozen, so its shape cannot change under us.
    const auto by_inner = proc::map_tree_by_inner_pid(root_pid);
    for (const auto& p : images.processes) {
        if (auto it = by_inner.find(pid_t(p.t.pid)); it != by_inner.end())
            _dumped_vmas[it->second] = p.vmas;
        if (p.lazy.empty())
            continue;
        auto it = by_inner.find(pid_t(p.t.pid));
        if (it == by_inner.end())
            throw error(fmt::format("image pid {} has no live process under host pid {}", p.t.pid,
                                    root_pid));
        _procs[p.t.pid] = process{it->second, p.lazy};
        _pages_total += p.lazy_pages();
    }
    for (const auto& [pid, p] : _procs)
        for (const auto& r : p.lazy)
            _index.add(pid, r.start, r.end);
    _deadlines = criu::deadlines::for_memory(_pages_total * page_size, deadline_scale);
    _deadline_scale = deadline_scale;
    _fabric_state = _fabric.start(*this, std::move(prepared));
}

// The fabric's, the pool's and the scan's threads stop before the rest goes.
outgoing_migration::~outgoing_migration() {
    _pusher.reset();
    _fabric_state.reset();
    {
        std::lock_guard lock(_holes_mutex);
        _holes_stop = true; // a scan waiting to be asked for the rest gives up
    }
    _holes_scanned.notify_all();
    if (_holes_thread.joinable())
        _holes_thread.join(); // bounded: one walk of the tasks' page tables
    _log->info("released: no channel or staging of it is left");
}

// The holes of the lazy areas up to small_area_bytes (`small`), or of the
// larger ones.
outgoing_migration::holes_result outgoing_migration::scan_areas(bool small) const {
    holes_result r;
    const uint64_t t0 = monotonic_ns();
    try {
        std::vector<proc::page_run> present;
        for (const auto& [image_pid, p] : _procs) {
            proc::page_presence presence(p.host_pid);
            for (const auto& range : p.lazy) {
                if ((range.end - range.start <= small_area_bytes) != small)
                    continue;
                present.clear();
                if (!presence.existing(range.start, range.end, present))
                    throw error("this kernel has no PAGEMAP_SCAN");
                for (const auto& h : proc::holes_in(range.start, range.end, present)) {
                    r.holes.push_back({image_pid, h.start, h.end});
                    r.pages += (h.end - h.start) / page_size;
                }
            }
        }
    } catch (const std::exception& e) {
        r.unknown = e.what();
        r.holes.clear();
        r.pages = 0;
    }
    r.scan_ns = monotonic_ns() - t0;
    r.done = true;
    if (r.unknown.empty())
        _log->debug("{} lazy pages of the {} areas are holes ({} runs), scanned in {:.1f} ms",
                    r.pages, small ? "small" : "large", r.holes.size(), double(r.scan_ns) / 1e6);
    else
        _log->warn("cannot find the holes of the lazy pages ({}): every page is sent", r.unknown);
    return r;
}

// PAGEMAP_SCAN of the frozen tasks' lazy areas: a walk of their page tables
// (about 3 ms per GiB here), at SCHED_IDLE. From the commit, the small areas
// (those the destination pulls first: stacks, arenas; a few ms at most);
// the others once the destination asks, after its restore has finished, so
// that their walk takes no CPU from its restore or resume where both run on
// one machine (the testbed's daemons are separate sessions, so separate
// autogroups, and SCHED_IDLE within one does not yield to another; see
// lib/sys/idle_cpu_group.hpp): started at the commit, it made a 4 GiB
// migration's resume part ~9 ms instead of ~3-5. The tasks stay frozen until
// the dump ends.
void outgoing_migration::scan_holes() {
    (void)proc::set_idle_policy(true); // best effort
    auto small = scan_areas(true);
    const bool small_failed = !small.unknown.empty();
    {
        std::unique_lock lock(_holes_mutex);
        _small_holes = std::move(small);
        _holes_scanned.notify_all();
        _holes_scanned.wait(lock, [&] { return _scan_rest || _holes_stop || small_failed; });
        if (_holes_stop || small_failed) {
            _holes.done = true;
            _holes.unknown = small_failed ? _small_holes.unknown : "the migration ended";
            _holes_scanned.notify_all();
            return;
        }
    }
    auto rest = scan_areas(false);
    {
        std::lock_guard lock(_holes_mutex);
        _holes = std::move(rest);
    }
    _holes_scanned.notify_all();
}

bool outgoing_migration::scan_holes_now() {
    {
        std::lock_guard lock(_mutex);
        if (_state != state::committed && _state != state::finished)
            return false;
    }
    {
        std::lock_guard lock(_holes_mutex);
        _scan_rest = true;
    }
    _holes_scanned.notify_all();
    return true;
}

outgoing_migration::holes_result
outgoing_migration::wait_small_holes(std::chrono::milliseconds timeout) {
    std::unique_lock lock(_holes_mutex);
    _holes_scanned.wait_for(lock, timeout, [&] { return _small_holes.done; });
    return _small_holes;
}

outgoing_migration::holes_result outgoing_migration::wait_holes(std::chrono::milliseconds timeout) {
    std::unique_lock lock(_holes_mutex);
    _holes_scanned.wait_for(lock, timeout, [&] { return _holes.done; });
    return _holes;
}

bool outgoing_migration::is_lazy(const process& p, uint64_t start, uint64_t end) const noexcept {
    auto it =
        std::upper_bound(p.lazy.begin(), p.lazy.end(), start,
                         [](uint64_t addr, const criu::lazy_range& r) { return addr < r.start; });
    if (it == p.lazy.begin())
        return false;
    --it;
    return start >= it->start && end <= it->end;
}

wire::status outgoing_migration::read_pages(const wire::page_request& r, std::byte* pages,
                                            uint64_t* checksums) {
    auto it = _procs.find(r.pid);
    const uint64_t len = uint64_t(r.nr_pages) * page_size;
    if (it == _procs.end() || !is_lazy(it->second, r.vaddr, r.vaddr + len))
        return wire::status::out_of_range;
    iovec local{pages, len};
    iovec remote{reinterpret_cast<void*>(r.vaddr), len};
    // The task is frozen by CRIU, so its memory is stable while we read it.
    ssize_t n = ::process_vm_readv(it->second.host_pid, &local, 1, &remote, 1, 0);
    if (n != ssize_t(len))
        return wire::status::read_failed;
    for (uint32_t i = 0; i < r.nr_pages; i++)
        checksums[i] = page_checksum(pages + size_t(i) * page_size);

    if (fault_injected(fault::corrupt_page_always) ||
        (fault_injected(fault::corrupt_page_once) && !_corrupted_once.exchange(true)))
        pages[0] ^= std::byte{0x5a}; // after checksumming: the destination must catch it
    return wire::status::ok;
}

void outgoing_migration::check_vma_flags_with(std::unique_ptr<frozen_vma_reader> reader) {
    _vma_reader = std::move(reader);
}

std::string outgoing_migration::vma_flags_problem() {
    if (!_vma_reader)
        return {};
    // The read started at registration and walks page tables at about 8 ms
    // per GiB here, alongside the restore. What is left of it at the commit
    // is bounded well inside the migrator's wait for the answer: a late
    // answer would find the migrator aborting a source this daemon committed.
    const auto& r = _vma_reader->wait(std::min<std::chrono::milliseconds>(
        _deadlines.restore, control::commit_answer_wait - std::chrono::seconds(10)));
    if (!r.done)
        return "the frozen tree's VMA flags could not be read in time";
    if (!r.error.empty())
        return "cannot read the frozen tree's VMA flags: " + r.error;
    std::string problems;
    for (const auto& [host_pid, dumped] : _dumped_vmas) {
        auto it = r.vmas.find(host_pid);
        if (it == r.vmas.end()) {
            problems +=
                fmt::format("{}pid {} was not read", problems.empty() ? "" : "; ", host_pid);
            continue;
        }
        auto frozen = it->second;
        if (fault_injected(fault::vma_flags_changed) && !frozen.empty())
            frozen.front().flags.madv ^= uint64_t(1) << 10; // MADV_DONTFORK
        if (auto diff = criu::compare_vma_flags(dumped, frozen); !diff.empty())
            problems += fmt::format("{}pid {}: {}", problems.empty() ? "" : "; ", host_pid, diff);
    }
    _log->debug("VMA flags of the frozen tree read in {:.1f} ms{}", double(r.read_ns) / 1e6,
                problems.empty() ? ", as dumped" : "");
    return problems;
}

void outgoing_migration::start_pool_push(const pool::pool_spec& spec) {
    std::lock_guard lock(_mutex);
    if (!_pusher)
        _pusher = std::make_unique<pool_pusher>(*this, spec, spec.object_of(_id));
}

pool_pusher* outgoing_migration::pusher() {
    std::lock_guard lock(_mutex);
    return _pusher.get();
}

std::optional<push_result> outgoing_migration::wait_pool_push(std::chrono::milliseconds timeout) {
    pool_pusher* p = pusher();
    if (!p)
        return push_result{.error = "this migration has no pool"};
    return p->wait_for(timeout);
}

void outgoing_migration::cancel_pool_push() noexcept {
    if (pool_pusher* p = pusher())
        p->discard();
}

void outgoing_migration::count_sent(uint64_t pages, uint64_t bytes) noexcept {
    _pages_served += pages;
    _bytes_sent += bytes;
}

void outgoing_migration::destination_done() {
    std::lock_guard lock(_mutex);
    if (!_destination_done_at)
        _destination_done_at = std::chrono::steady_clock::now();
    _changed.notify_all();
}

// The destination's gate refused, or never heard, the resume: its copy is
// killed before it ran. Committed or not, this source is the only copy, and
// a migrator stopped or gone after its commit would otherwise leave it
// frozen (the migrator's own abort, if it comes, finds it done).
void outgoing_migration::destination_discarded() {
    (void)abort("the destination killed its copy before it ran", true);
}

std::optional<std::chrono::steady_clock::time_point>
outgoing_migration::destination_done_at() const {
    std::lock_guard lock(_mutex);
    return _destination_done_at;
}

bool outgoing_migration::wait_destination_done(std::chrono::milliseconds timeout) {
    std::unique_lock lock(_mutex);
    (void)_changed.wait_for(lock, timeout, [&] {
        return _destination_done_at.has_value() || _abandoned || _state == state::aborted;
    });
    return _destination_done_at.has_value();
}

void outgoing_migration::abandon() {
    {
        std::lock_guard lock(_mutex);
        _abandoned = true;
    }
    _changed.notify_all();
}

bool outgoing_migration::abandoned() const {
    std::lock_guard lock(_mutex);
    return _abandoned;
}

outgoing_migration::state outgoing_migration::current_state() const {
    std::lock_guard lock(_mutex);
    return _state;
}

bool outgoing_migration::commit() {
    std::lock_guard lock(_mutex);
    if (_state != state::registered)
        return _state == state::committed;
    _state = state::committed;
    _holes_thread = std::thread([this] { scan_holes(); });
    if (_fabric_state)
        _fabric_state->committed();
    return true;
}

std::string outgoing_migration::finish() {
    {
        std::lock_guard lock(_mutex);
        if (_state == state::finished)
            return {};
        if (_state != state::committed)
            throw error(fmt::format("migration {} cannot finish: it was not committed", _id));
        _state = state::finished;
    }
    try {
        criu::finish_lazy_dump(_criu_port, _deadlines.close);
        return {};
    } catch (const std::exception& e) {
        _log->error("CRIU did not take CLOSE ({}); ending the source tasks directly", e.what());
    }
    criu::release_request req;
    req.root = _root_pid;
    req.migration_id = _id;
    req.end_workload = true;
    req.bound = _deadlines.release;
    const auto res = criu::release_workload(req);
    if (!res.ok)
        throw error(
            fmt::format("migration {}: the source could not be ended: {}", _id, res.summary));
    return "CRIU did not take CLOSE: " + res.summary;
}

outgoing_migration::channel_hold outgoing_migration::hold_channel(int fd) {
    std::lock_guard lock(_mutex);
    if (_state == state::aborted)
        return {};
    _channel_fds.push_back(fd);
    return {this, fd};
}

outgoing_migration::channel_hold::~channel_hold() {
    if (!_m)
        return;
    std::lock_guard lock(_m->_mutex);
    std::erase(_m->_channel_fds, _fd);
}

bool outgoing_migration::abort(const std::string& reason, bool destination_never_ran,
                               bool criu_gone) {
    {
        std::lock_guard lock(_mutex);
        if (_state == state::aborted)
            return true;
        const bool allowed =
            _state == state::registered || (_state == state::committed && destination_never_ran);
        if (!allowed)
            return false;
        _state = state::aborted;
        // The destination's channels are of no use now: their threads end
        // (and free this migration) however long their peer stays silent.
        for (const int fd : _channel_fds)
            ::shutdown(fd, SHUT_RDWR);
    }
    _changed.notify_all(); // a wait for the destination's "done" ends
    _log->warn("aborting ({}); the source resumes", reason);
    {
        // No scan will come: a HOLES channel waiting for either part gets an
        // answer now (it waits for the small areas' first), and lets go of
        // this migration: its staging and page channels are freed.
        std::lock_guard lock(_holes_mutex);
        for (auto* part : {&_small_holes, &_holes})
            if (!part->done) {
                part->done = true;
                part->unknown = "the migration was aborted";
            }
    }
    _holes_scanned.notify_all();
    if (_pusher)
        _pusher->stop(); // the tasks are about to run again: their pages would be stale
    if (!criu_gone)
        resume_source();
    if (_pusher)
        _pusher->discard(); // after the resume, which must not wait for the pool
    return true;
}

// CRIU resumes the tasks when its page server gets a command it does not
// know, then exits. One that does not within the abort deadline is stuck:
// it is killed and the tasks released, never waited on again.
void outgoing_migration::resume_source() {
    const auto until = std::chrono::steady_clock::now() + _deadlines.abort;
    if (!criu::find_migration_criu(_id).empty()) {
        try {
            criu::abort_lazy_dump(_criu_port, _deadlines.abort,
                                  [&] { return !criu::find_migration_criu(_id).empty(); });
        } catch (const std::exception& e) {
            _log->warn("CRIU's page server did not take the abort: {}", e.what());
        }
    }
    while (!criu::find_migration_criu(_id).empty() && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (criu::find_migration_criu(_id).empty() && criu::inspect_workload(_root_pid).running())
        return;
    criu::release_request req;
    req.root = _root_pid;
    req.migration_id = _id;
    req.bound = _deadlines.release;
    const auto res = criu::release_workload(req);
    (res.ok ? _log->warn("{}", res.summary) : _log->error("{}", res.summary));
}

} // namespace ferry::pagesrv
