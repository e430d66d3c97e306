// The destination's fault path, top to bottom.
//
// One handler thread per CPU, pinned there, each blocked in its own epoll set
// that holds every uffd. A fault wakes the handler on the faulting thread's
// own CPU, which that thread has just left idle: a same-CPU wake-up costs a
// few microseconds where a cross-CPU one costs tens on this class of VM.
//
//   handler (per CPU), under the state lock:
//     uffd readable        -> read a batch of events -> dispatch by type
//        PAGEFAULT         -> in flight? nothing : lazy? request window : ZEROPAGE
//        FORK/REMAP/REMOVE/UNMAP -> adjust the process's ranges
//     fault channel        -> verify checksums -> UFFDIO_COPY (wakes the thread)
//     criu socket          -> "restore finished" starts the background pull
//     while fault requests are outstanding: poll the channel (one-sided
//     fabrics always; tcp for a short spin, then epoll wakes a handler)
//   background thread:
//     keep requests in flight, install replies in bounded slices, enforce
//     fetch deadlines, report progress, notice the end
//
// Nothing here allocates in steady state: requests live in fixed rings, reply
// data lands in staging buffers reserved at start (or stays in the fabric's
// shared region), and range maps reuse nodes from their own pools.
#include "fault_loop.hpp"

#include "core/checksum.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "uffd_ops.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <thread>

namespace ferry::lazy {

namespace {

constexpr uint32_t restore_finished_magic = 0x52535446; // CRIU's "ReSTore Finished"
constexpr size_t events_per_read = 16;
// Background data handled per turn of the background thread (which holds
// the state lock meanwhile): less while faults are arriving.
constexpr size_t background_budget_bytes = 256 * 1024;
constexpr size_t background_budget_faulting_bytes = 64 * 1024;

uint64_t epoll_tag(uint8_t src, uint32_t index) {
    return (uint64_t(index) << 8) | src;
}

std::vector<int> allowed_cpus() {
    cpu_set_t set;
    std::vector<int> cpus;
    if (::sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &set))
                cpus.push_back(c);
    if (cpus.empty())
        cpus.push_back(0);
    return cpus;
}

void pin_to(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    (void)::pthread_setaffinity_np(::pthread_self(), sizeof set, &set); // best effort
}

} // namespace

fault_loop::fault_loop(loop_config cfg, std::unique_ptr<page_channel> fault_channel,
                       std::unique_ptr<page_channel> background_channel)
    : _cfg(cfg), _fault_ch(std::move(fault_channel)), _bg_ch(std::move(background_channel)),
      _wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    if (!_wake)
        throw sys_error("eventfd");
    _cfg.max_window_pages = std::clamp<uint32_t>(_cfg.max_window_pages, 1, _fault_ch->max_pages());
    _cfg.fault_window_pages =
        std::clamp<uint32_t>(_cfg.fault_window_pages, 1, _cfg.max_window_pages);
    _cfg.background_chunk_pages =
        std::clamp<uint32_t>(_cfg.background_chunk_pages, 1, _bg_ch->max_pages());
    _cfg.background_depth = std::min<uint32_t>(_cfg.background_depth, 16);
    _cpus = allowed_cpus();
    if (_cfg.handlers > 0 && _cfg.handlers < _cpus.size())
        _cpus.resize(_cfg.handlers);
    for (size_t i = 0; i < _cpus.size(); i++) {
        unique_fd ep(::epoll_create1(EPOLL_CLOEXEC));
        if (!ep)
            throw sys_error("epoll_create1");
        _epolls.push_back(std::move(ep));
    }
    epoll_add_all(_wake.get(), source::wake, 0);
    // One-sided fabrics have no fd to wait on: handlers poll them instead.
    if (!_fault_ch->capabilities().one_sided)
        epoll_add_all(_fault_ch->wait_fd(), source::fault_channel, 0);
}

fault_loop::~fault_loop() = default;

void fault_loop::epoll_add(int epoll, int fd, source src, uint32_t index) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = epoll_tag(uint8_t(src), index);
    if (::epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &ev))
        throw sys_error("epoll_ctl ADD");
}

void fault_loop::epoll_add_all(int fd, source src, uint32_t index) {
    for (auto& ep : _epolls)
        epoll_add(ep.get(), fd, src, index);
}

void fault_loop::epoll_del_all(int fd) {
    for (auto& ep : _epolls)
        ::epoll_ctl(ep.get(), EPOLL_CTL_DEL, fd, nullptr);
}

void fault_loop::watch_restore(unique_fd criu_socket) {
    _criu_sock = std::move(criu_socket);
    epoll_add(_epolls[0].get(), _criu_sock.get(), source::criu_socket, 0);
}

void fault_loop::set_restore_finished() noexcept {
    std::lock_guard lock(_mu);
    _restore_finished = true;
}

void fault_loop::add_process(uint32_t image_pid, unique_fd uffd,
                             const std::vector<criu::lazy_range>& ranges) {
    std::lock_guard lock(_mu);
    auto p = std::make_unique<lazy_process>();
    p->image_pid = image_pid;
    p->uffd = std::move(uffd);
    p->pattern = access_pattern(_cfg.fault_window_pages, _cfg.max_window_pages);
    for (const auto& r : ranges)
        p->lazy.insert(r.start, r.end, r.start);
    _stats.pages_total += pages_in(p->lazy.bytes());
    _stats.processes++;
    epoll_add_all(p->uffd.get(), source::uffd, uint32_t(_procs.size()));
    _procs.push_back(std::move(p));
}

uint64_t fault_loop::bytes_received() const noexcept {
    return _fault_ch->bytes_received() + _bg_ch->bytes_received();
}

void fault_loop::stop_with(std::exception_ptr error) noexcept {
    {
        std::lock_guard lock(_mu);
        if (error && !_error)
            _error = error;
        _stop = true;
    }
    const uint64_t one = 1;
    (void)!::write(_wake.get(), &one, sizeof one); // wakes every handler
}

void fault_loop::run() {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < _epolls.size(); i++)
        threads.emplace_back([this, i] {
            try {
                handler_main(i);
            } catch (...) {
                stop_with(std::current_exception());
            }
        });
    try {
        background_main();
    } catch (...) {
        stop_with(std::current_exception());
    }
    for (auto& t : threads)
        t.join();
    if (_error)
        std::rethrow_exception(_error);
    if (_progress)
        _progress(_stats);
}

// One per CPU. Runs the fault path for faults taken on its CPU (and, as the
// kernel wakes every waiter, sometimes for others: the state lock makes that
// harmless).
void fault_loop::handler_main(size_t index) {
    pin_to(_cpus[index]);
    const int epoll = _epolls[index].get();
    const uint64_t spin_ns = uint64_t(_cfg.spin.count()) * 1000;
    std::array<epoll_event, 32> events;
    for (;;) {
        const int n = ::epoll_wait(epoll, events.data(), int(events.size()), -1);
        if (n < 0 && errno != EINTR)
            throw sys_error("epoll_wait");
        std::unique_lock lock(_mu, std::defer_lock);
        lock_as_handler(lock);
        if (_stop)
            return;
        for (int i = 0; i < n; i++) {
            const auto src = source(events[size_t(i)].data.u64 & 0xff);
            const auto idx = uint32_t(events[size_t(i)].data.u64 >> 8);
            switch (src) {
            case source::uffd:
                if (!_procs[idx]->exited)
                    drain_uffd(*_procs[idx]);
                break;
            case source::fault_channel:
                drain_channel(*_fault_ch, request_kind::fault, SIZE_MAX);
                break;
            case source::criu_socket:
                handle_criu_socket();
                break;
            case source::wake:
                return;
            }
        }
        // Stay with outstanding fault requests: a one-sided fabric shows its
        // data only to a poller, and a tcp reply is a round trip away, less
        // than the cost of being woken for it.
        // One poller at a time: on a small machine a second one only takes
        // the CPU from the peer that is producing the reply.
        if (_polling)
            continue;
        _polling = true;
        const uint64_t spin_until = monotonic_ns() + spin_ns;
        while (!_fault_reqs.empty() && !_stop) {
            if (!_fault_ch->capabilities().one_sided && monotonic_ns() > spin_until)
                break; // epoll wakes a handler when the reply arrives
            // Between looks, leave the lock to the other threads for a while.
            lock.unlock();
            // Yield rather than spin: the thread producing the reply (the
            // stager, or the background) may be queued on this very CPU.
            ::sched_yield();
            lock_as_handler(lock);
            drain_channel(*_fault_ch, request_kind::fault, SIZE_MAX);
            check_deadlines();
        }
        _polling = false;
    }
}

// Takes the state lock for a handler; the background sees it waiting and
// gives the lock up between slices of its work.
void fault_loop::lock_as_handler(std::unique_lock<std::mutex>& lock) {
    _handlers_waiting.fetch_add(1, std::memory_order_relaxed);
    lock.lock();
    _handlers_waiting.fetch_sub(1, std::memory_order_relaxed);
}

// Background pull, deadlines, progress, and the end of the transfer.
void fault_loop::background_main() {
    for (;;) {
        bool polled;
        {
            std::lock_guard lock(_mu);
            if (_stop)
                return;
            if (finished()) {
                _stop = true;
                const uint64_t one = 1;
                (void)!::write(_wake.get(), &one, sizeof one);
                return;
            }
            pump_background();
            drain_channel(*_bg_ch, request_kind::background,
                          faulting() ? background_budget_faulting_bytes : background_budget_bytes);
            check_deadlines();
            const uint64_t now = monotonic_ns();
            if (_progress &&
                now - _last_progress_ns >= uint64_t(_cfg.progress_interval.count()) * 1'000'000) {
                _last_progress_ns = now;
                _progress(_stats);
            }
            polled = !_bg_reqs.empty();
            // A one-sided fabric may already hold the next reply in full.
            if (polled && _bg_ch->capabilities().one_sided) {
                if (const auto* r = _bg_ch->pump(0); r && r->complete())
                    continue;
            }
        }
        // Wait for more background data: on its fd, or briefly for a
        // one-sided fabric, whose source stages pages on its own.
        if (polled && !_bg_ch->capabilities().one_sided) {
            pollfd p{_bg_ch->wait_fd(), POLLIN, 0};
            (void)::poll(&p, 1, 10);
        } else if (polled) {
            // A sleep would last the timer slack at least (50 us); a yield
            // hands the CPU to whoever needs it, the source's stager included.
            ::sched_yield();
        } else {
            struct timespec ts = {0, 1'000'000};
            ::nanosleep(&ts, nullptr);
        }
    }
}

void fault_loop::announce_done() {
    _bg_ch->send(wire::page_request{wire::op::done, 0, 0, 0, _next_request_id++});
}

// Faults are counted in windows of fault_window; a window with at least
// faulting_threshold faults marks the application as actively faulting
// until the next window ends. A stray fault now and then does not count.
void fault_loop::note_fault(uint64_t now) noexcept {
    const uint64_t window = uint64_t(_cfg.fault_window.count()) * 1000;
    if (now - _window_start_ns >= window) {
        _busy_until_ns = _window_faults >= _cfg.faulting_threshold ? _window_start_ns + 2 * window
                                                                   : _busy_until_ns;
        _window_start_ns = now;
        _window_faults = 0;
    }
    if (++_window_faults >= _cfg.faulting_threshold)
        _busy_until_ns = _window_start_ns + 2 * window;
}

bool fault_loop::faulting() const noexcept {
    return _cfg.faulting_threshold > 0 && monotonic_ns() < _busy_until_ns;
}

bool fault_loop::finished() const noexcept {
    if (!_restore_finished || !_fault_reqs.empty() || !_bg_reqs.empty())
        return false;
    return std::all_of(_procs.begin(), _procs.end(),
                       [](const auto& p) { return p->exited || p->lazy.empty(); });
}

// ---- uffd events ---------------------------------------------------------

void fault_loop::drain_uffd(lazy_process& p) {
    std::array<uffd_msg, events_per_read> msgs;
    // A bounded number of batches, so one busy process cannot starve others.
    for (int batch = 0; batch < 4 && !p.exited; batch++) {
        // A fault may issue its own request and a few strided ones.
        const size_t reserved = _fault_reqs.size() + access_pattern::strided_prefetch;
        const size_t room =
            reserved < _fault_reqs.capacity() ? _fault_reqs.capacity() - reserved : 0;
        if (room == 0)
            return; // replies will free slots; the events wait in the kernel
        const long n = uffd::read_events(p.uffd.get(), msgs.data(), std::min(room, msgs.size()));
        if (n < 0)
            throw sys_error(fmt::format("read uffd of pid {}", p.image_pid));
        if (n == 0)
            return;
        for (long i = 0; i < n && !p.exited; i++) {
            const uffd_msg& msg = msgs[size_t(i)];
            _stats.events++;
            switch (msg.event) {
            case UFFD_EVENT_PAGEFAULT:
                handle_pagefault(p, msg);
                break;
            case UFFD_EVENT_FORK:
                handle_fork(p, msg);
                break;
            case UFFD_EVENT_REMAP:
                handle_remap(p, msg);
                break;
            case UFFD_EVENT_REMOVE:
            case UFFD_EVENT_UNMAP:
                handle_remove(p, msg);
                break;
            default:
                throw error(fmt::format("pid {}: unexpected uffd event {}", p.image_pid,
                                        unsigned(msg.event)));
            }
        }
    }
}

void fault_loop::handle_pagefault(lazy_process& p, const uffd_msg& msg) {
    const uint64_t fault_ns = monotonic_ns();
    const uint64_t addr = page_down(msg.arg.pagefault.address);
    _stats.faults++;
    note_fault(fault_ns);
    if (p.in_flight.find(addr))
        return; // the pending copy wakes this thread too

    const auto range = p.lazy.find(addr);
    if (!range) {
        // A hole in a lazy VMA: the page never existed on the source.
        auto r = uffd::zeropage(p.uffd.get(), addr, page_size);
        switch (r.result) {
        case uffd::outcome::done:
            _stats.pages_zero++;
            return;
        case uffd::outcome::exists:
            return;
        case uffd::outcome::retry: // the address space is changing: let the thread fault again
            (void)uffd::wake(p.uffd.get(), addr, page_size);
            return;
        case uffd::outcome::target_gone:
            process_gone(p);
            return;
        case uffd::outcome::fatal:
            throw sys_error(fmt::format("UFFDIO_ZEROPAGE pid {} {:#x}", p.image_pid, addr), r.err);
        }
    }

    // The faulting page and its lazy successors in the same range, as many
    // as the access pattern suggests, stopping at pages another fault
    // already asked for.
    const auto plan = p.pattern.on_fault(addr / page_size);
    uint64_t end = std::min(range->end, addr + uint64_t(plan.window) * page_size);
    if (auto next_busy = p.in_flight.first_ending_after(addr); next_busy && next_busy->start < end)
        end = next_busy->start;
    issue(request_kind::fault, p, addr, range->img_of(addr), uint32_t(pages_in(end - addr)), addr,
          fault_ns, 0);
    if (plan.pattern == access_pattern::kind::sequential)
        p.bg_cursor = end; // read ahead: the background continues where the scan goes
    else if (plan.pattern == access_pattern::kind::strided)
        prefetch_strided(p, addr, plan.stride_pages, plan.strided);
}

// Single pages at the fault's stride, ahead of the access.
void fault_loop::prefetch_strided(lazy_process& p, uint64_t addr, int64_t stride_pages,
                                  uint32_t count) {
    for (uint32_t k = 1; k <= count && !_fault_reqs.full(); k++) {
        const uint64_t next = addr + uint64_t(int64_t(k) * stride_pages * int64_t(page_size));
        const auto r = p.lazy.find(next);
        if (!r || p.in_flight.find(next))
            continue;
        issue(request_kind::fault, p, next, r->img_of(next), 1, ~0ull, 0, 0);
    }
}

void fault_loop::handle_fork(lazy_process& parent, const uffd_msg& msg) {
    // The child starts with every page the parent still lacks, including
    // pages in flight for the parent: those copies go to the parent only.
    unique_fd child_uffd(int(msg.arg.fork.ufd));
    net::set_nonblocking(child_uffd.get(), true);
    if (_new_uffd)
        _new_uffd(child_uffd.get());
    auto child = std::make_unique<lazy_process>();
    child->image_pid = parent.image_pid;
    child->pattern = access_pattern(_cfg.fault_window_pages, _cfg.max_window_pages);
    child->uffd = std::move(child_uffd);
    child->forked = true;
    for (const auto& r : parent.lazy.to_vector())
        child->lazy.insert(r.start, r.end, r.img_start);
    epoll_add_all(child->uffd.get(), source::uffd, uint32_t(_procs.size()));
    _procs.push_back(std::move(child));
}

void fault_loop::handle_remap(lazy_process& p, const uffd_msg& msg) {
    const uint64_t from = msg.arg.remap.from, to = msg.arg.remap.to, len = msg.arg.remap.len;
    p.lazy.remap(from, to, len);
    // Requests in flight for either range are checked against the map when
    // they land; clear the marks so new faults ask again.
    p.in_flight.erase(from, from + len);
    p.in_flight.erase(to, to + len);
    p.bg_cursor = 0; // ranges may now lie behind the cursor
    // Threads blocked on the old range retry their access and see the move.
    (void)uffd::wake(p.uffd.get(), from, len);
}

void fault_loop::handle_remove(lazy_process& p, const uffd_msg& msg) {
    const uint64_t start = msg.arg.remove.start, end = msg.arg.remove.end;
    // REMOVE (madvise) keeps the VMA: unregister so later faults are the
    // kernel's ordinary zero fill. UNMAP has no VMA left to worry about.
    if (msg.event == UFFD_EVENT_REMOVE) {
        auto r = uffd::unregister_range(p.uffd.get(), start, end - start);
        if (r.result == uffd::outcome::target_gone) {
            process_gone(p);
            return;
        }
        if (r.result != uffd::outcome::done)
            throw sys_error(
                fmt::format("UFFDIO_UNREGISTER pid {} [{:#x}, {:#x})", p.image_pid, start, end),
                r.err);
    }
    const uint64_t dropped = p.lazy.erase(start, end);
    if (!p.forked)
        _stats.pages_dropped += pages_in(dropped);
    p.in_flight.erase(start, end);
    (void)uffd::wake(p.uffd.get(), start, end - start);
}

void fault_loop::handle_criu_socket() {
    uint32_t value = 0;
    const ssize_t n = ::recv(_criu_sock.get(), &value, sizeof value, MSG_WAITALL);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) {
        if (!_restore_finished)
            throw error(
                "restore failed: CRIU closed the lazy-pages socket before \"restore finished\"");
        ::epoll_ctl(_epolls[0].get(), EPOLL_CTL_DEL, _criu_sock.get(), nullptr);
        _criu_sock.reset();
        return;
    }
    if (n != sizeof value)
        throw sys_error("recv restore-finished from CRIU");
    if (value != restore_finished_magic)
        throw error(fmt::format("unexpected message {:#x} on the lazy-pages socket", value));
    _restore_finished = true;
}

void fault_loop::process_gone(lazy_process& p) {
    if (p.exited)
        return;
    p.exited = true;
    if (!p.forked)
        _stats.pages_dropped += pages_in(p.lazy.bytes());
    p.lazy.clear();
    p.in_flight.clear();
    epoll_del_all(p.uffd.get());
    p.uffd.reset();
}

// ---- requests ------------------------------------------------------------

void fault_loop::issue(request_kind kind, lazy_process& p, uint64_t addr, uint64_t img_addr,
                       uint32_t nr_pages, uint64_t fault_addr, uint64_t fault_ns, uint8_t attempt) {
    outstanding_request r;
    r.id = _next_request_id++;
    r.proc = &p;
    r.addr = addr;
    r.img_addr = img_addr;
    r.nr_pages = nr_pages;
    r.fault_addr = fault_addr;
    r.issued_ns = monotonic_ns();
    r.fault_ns = fault_ns;
    r.attempt = attempt;
    r.kind = kind;
    wire::page_request wr{attempt ? wire::op::refetch : wire::op::get, p.image_pid, nr_pages,
                          img_addr, r.id};
    if (kind == request_kind::fault) {
        _fault_reqs.push(r);
        p.in_flight.insert_identity(addr, addr + uint64_t(nr_pages) * page_size);
        _fault_ch->send(wr);
    } else {
        _bg_reqs.push(r);
        p.bg_outstanding++;
        _bg_ch->send(wr);
    }
}

// Keeps background requests in flight once restore has finished.
void fault_loop::pump_background() {
    if (!_restore_finished || _procs.empty() || _cfg.background_depth == 0)
        return;
    // While the application faults, the background steps back (one small
    // request at a time) so fault replies share the channel, the source's
    // CPU and this loop with as little as possible (CRIU's lazy-pages does
    // the same with its transfer length).
    const uint32_t depth = faulting() ? 1 : _cfg.background_depth;
    while (_bg_reqs.size() < depth) {
        bool issued = false;
        for (size_t tries = 0; tries < _procs.size() && !issued; tries++) {
            lazy_process& p = *_procs[_bg_next_proc];
            _bg_next_proc = (_bg_next_proc + 1) % _procs.size();
            uint64_t addr, img;
            uint32_t n;
            if (!p.exited && next_background_run(p, addr, img, n)) {
                issue(request_kind::background, p, addr, img, n, ~0ull, 0, 0);
                issued = true;
            }
        }
        if (!issued)
            return;
    }
}

// The next run of lazy pages after the process's cursor that no fault has
// asked for, up to one background chunk.
bool fault_loop::next_background_run(lazy_process& p, uint64_t& addr, uint64_t& img, uint32_t& n) {
    bool wrapped = false;
    for (;;) {
        auto r = p.lazy.first_ending_after(p.bg_cursor);
        if (!r) {
            // Pages behind the cursor are still lazy only if a request for
            // them is pending or was abandoned: rescan once nothing is pending.
            if (wrapped || p.bg_cursor == 0 || p.bg_outstanding)
                return false;
            p.bg_cursor = 0;
            wrapped = true;
            continue;
        }
        uint64_t start = std::max(r->start, p.bg_cursor);
        if (auto busy = p.in_flight.find(start)) {
            p.bg_cursor = busy->end;
            continue;
        }
        const uint32_t chunk =
            faulting() ? std::min(_cfg.background_chunk_pages, _cfg.faulting_chunk_pages)
                       : _cfg.background_chunk_pages;
        uint64_t end = std::min(r->end, start + uint64_t(chunk) * page_size);
        if (auto busy = p.in_flight.first_ending_after(start); busy && busy->start < end)
            end = busy->start;
        addr = start;
        img = r->img_of(start);
        n = uint32_t(pages_in(end - start));
        p.bg_cursor = end;
        return true;
    }
}

void fault_loop::check_deadlines() {
    const uint64_t now = monotonic_ns();
    const uint64_t limit = uint64_t(_cfg.fetch_deadline.count()) * 1'000'000;
    if (!_fault_reqs.empty() && now - _fault_reqs.front().issued_ns > limit)
        throw error(fmt::format(
            "the source did not answer a fault request for pid {} page {:#x} within {} ms",
            _fault_reqs.front().proc->image_pid, _fault_reqs.front().img_addr,
            _cfg.fetch_deadline.count()));
    if (!_bg_reqs.empty() && now - _bg_reqs.front().issued_ns > limit)
        throw error(
            fmt::format("the source did not answer a background request for pid {} within {} ms",
                        _bg_reqs.front().proc->image_pid, _cfg.fetch_deadline.count()));
}

// ---- replies -------------------------------------------------------------

void fault_loop::drain_channel(page_channel& ch, request_kind kind, size_t budget) {
    auto ring_empty = [&] {
        return kind == request_kind::fault ? _fault_reqs.empty() : _bg_reqs.empty();
    };
    while (budget > 0) {
        // Background data gives the lock up to any handler waiting for it.
        if (kind == request_kind::background &&
            _handlers_waiting.load(std::memory_order_relaxed) > 0)
            return;
        const uint64_t before = ch.bytes_received();
        incoming_reply* reply = ch.pump(budget);
        const uint64_t got = ch.bytes_received() - before;
        budget = budget > got ? budget - size_t(got) : 0;
        if (!reply)
            return;
        if (ring_empty())
            throw error("the source sent a page reply nobody asked for");
        outstanding_request& req =
            kind == request_kind::fault ? _fault_reqs.front() : _bg_reqs.front();
        const auto& h = reply->header;
        if (h.request_id != req.id || h.pid != req.proc->image_pid || h.vaddr != req.img_addr)
            throw error(
                fmt::format("page reply {} does not match request {}", h.request_id, req.id));
        if (h.result != wire::status::ok)
            throw error(fmt::format("the source could not serve pid {} pages [{:#x}, +{}): {}",
                                    h.pid, h.vaddr, req.nr_pages, wire::to_string(h.result)));
        if (h.nr_pages != req.nr_pages)
            throw error(fmt::format("the source sent {} pages for a request of {}", h.nr_pages,
                                    req.nr_pages));

        // Fault replies are installed whole; background data as it arrives.
        const bool whole = kind == request_kind::fault || reply->complete();
        if (whole || reply->pages_ready - req.consumed >= _cfg.install_batch_pages)
            consume_pages(req, *reply, reply->pages_ready);
        if (!reply->complete())
            return; // the rest has not arrived yet
        // Pop before finishing: a refetch pushes onto the same ring.
        const outstanding_request done = req;
        if (kind == request_kind::fault)
            _fault_reqs.pop();
        else
            _bg_reqs.pop();
        ch.finish_reply();
        finish_request(done);
    }
}

// Verifies and installs pages [req.consumed, upto) of a reply. A page whose
// checksum fails is never installed: it and the rest of the request are
// fetched again once, by finish_request.
void fault_loop::consume_pages(outstanding_request& req, const incoming_reply& reply,
                               uint32_t upto) {
    if (req.bad_from != ~0u)
        return;
    uint32_t first = req.consumed;
    uint32_t good = first;
    while (good < upto &&
           page_checksum(reply.pages + size_t(good) * page_size) == reply.checksums[good])
        good++;
    if (good < upto)
        req.bad_from = good;
    if (req.fault_addr != ~0ull && first == 0 && req.attempt == 0) // not a prefetch
        _fetch_latency.record(monotonic_ns() - req.fault_ns);
    if (good > first && !req.proc->exited) {
        auto install = [&](uint32_t from, uint32_t to) {
            if (to > from)
                install_run(req, reply.pages + size_t(from) * page_size, from, to - from);
        };
        // The faulting page alone first: its copy wakes the thread, and the
        // window's other pages (a few microseconds each into fresh memory)
        // need not delay it.
        const uint64_t fault_index = (req.fault_addr - req.addr) / page_size;
        if (req.fault_addr >= req.addr && fault_index >= first && fault_index < good) {
            const auto k = uint32_t(fault_index);
            install(k, k + 1);
            install(first, k);
            install(k + 1, good);
        } else {
            install(first, good);
        }
    }
    req.consumed = good;
}

// Installs verified pages [first, first + count) of `req` whose data starts
// at `data`. Each page is checked against the process's current lazy map:
// pages unmapped, removed or already installed meanwhile are skipped.
void fault_loop::install_run(outstanding_request& req, const std::byte* data, uint32_t first,
                             uint32_t count) {
    lazy_process& p = *req.proc;
    uint64_t addr = req.addr + uint64_t(first) * page_size;
    uint64_t img = req.img_addr + uint64_t(first) * page_size;
    uint32_t left = count;
    while (left > 0 && !p.exited) {
        const auto r = p.lazy.find(addr);
        if (!r || r->img_of(addr) != img) {
            _stats.pages_duplicate++;
            if (addr == req.fault_addr)
                _fault_latency.record(monotonic_ns() - req.fault_ns);
            addr += page_size, img += page_size, data += page_size, left--;
            continue;
        }
        const uint32_t run = uint32_t(std::min<uint64_t>(left, pages_in(r->end - addr)));
        const uint64_t copy_start = monotonic_ns();
        const auto res = uffd::copy(p.uffd.get(), addr, data, uint64_t(run) * page_size);
        uint32_t done = uint32_t(pages_in(res.bytes));
        if (res.result == uffd::outcome::exists)
            done++; // the page at addr + done was present already: nothing to install there
        p.lazy.erase(addr, addr + uint64_t(done) * page_size);

        // Account for what landed.
        const bool has_fault_page =
            req.fault_addr >= addr && req.fault_addr < addr + uint64_t(done) * page_size;
        if (has_fault_page) {
            const uint64_t now = monotonic_ns();
            _fault_latency.record(now - req.fault_ns);
            _install_latency.record(now - copy_start);
        }
        if (p.forked) {
            _stats.pages_forked += done;
        } else if (req.kind == request_kind::background) {
            _stats.pages_background += done;
        } else {
            _stats.pages_faulted += has_fault_page ? 1 : 0;
            _stats.pages_prefetched += done - (has_fault_page ? 1 : 0);
        }

        switch (res.result) {
        case uffd::outcome::done:
        case uffd::outcome::exists:
            break;
        case uffd::outcome::retry:
            // The address space is changing (fork, mremap): leave the rest
            // lazy and let blocked threads fault again once events are read.
            (void)uffd::wake(p.uffd.get(), addr + uint64_t(done) * page_size,
                             uint64_t(left - done) * page_size);
            return;
        case uffd::outcome::target_gone:
            process_gone(p);
            return;
        case uffd::outcome::fatal:
            throw sys_error(
                fmt::format("UFFDIO_COPY pid {} {:#x} +{} pages", p.image_pid, addr, run), res.err);
        }
        addr += uint64_t(done) * page_size;
        img += uint64_t(done) * page_size;
        data += size_t(done) * page_size;
        left -= done;
    }
}

void fault_loop::finish_request(const outstanding_request& req) {
    lazy_process& p = *req.proc;
    if (req.kind == request_kind::fault)
        p.in_flight.erase(req.addr, req.addr + uint64_t(req.nr_pages) * page_size);
    else
        p.bg_outstanding--;
    if (req.bad_from == ~0u || p.exited)
        return;
    const uint32_t bad = req.nr_pages - req.bad_from;
    if (req.attempt >= 1)
        throw error(fmt::format(
            "checksum mismatch again for pid {} page {:#x}: refusing to install a corrupt page",
            p.image_pid, req.img_addr + uint64_t(req.bad_from) * page_size));
    _stats.pages_refetched += bad;
    const uint64_t addr = req.addr + uint64_t(req.bad_from) * page_size;
    const uint64_t img = req.img_addr + uint64_t(req.bad_from) * page_size;
    issue(req.kind, p, addr, img, bad, req.fault_addr >= addr ? req.fault_addr : ~0ull,
          req.fault_ns, 1);
}

} // namespace ferry::lazy
