// The destination's fault path: the loop and its threads.
//
// One handler thread per CPU, pinned there, each blocked in its own epoll set
// that holds every uffd. A fault wakes the handler on the faulting thread's
// own CPU, which that thread has just left idle: a same-CPU wake-up costs a
// few microseconds where a cross-CPU one costs tens on this class of VM.
//
//   handler (per CPU), under the state lock:
//     uffd readable        -> drain_uffd (uffd_events.cpp): PAGEFAULT asks
//                             for a window or zero-fills a hole; FORK, REMAP,
//                             REMOVE, UNMAP adjust the process's ranges
//     fault channel        -> drain_fault_replies (replies.cpp): verify, UFFDIO_COPY
//     criu socket          -> "restore finished" starts the background pull
//     daemon socket        -> "lazy areas ready" (CRIU at post-restore)
//                             starts it earlier, while the migrator commits
//     while fault requests are outstanding: poll the channel (one-sided
//     fabrics always; others for a short spin, then epoll wakes a handler)
//   background threads, one per background stream:
//     outside the lock: receives and decrypts background replies and
//     verifies their checksums (the stream's channel and ring are its own);
//     claims a slice of still-lazy pages under the lock, copies it without
//     the lock (unlocked_copies.hpp: a handler that reads the process's
//     events first stops the copy), accounts for it under the lock;
//     pump_background (background_pacer.cpp) keeps the stream's
//     requests in flight (background_pacer.hpp says how many streams pull
//     now); holes, fetch deadlines, progress reports; whichever sees the
//     last page in ends the loop. With two streams one installs while the
//     other receives, decrypts and verifies
//
// Nothing here allocates in steady state: requests live in fixed rings, reply
// data lands in staging buffers reserved at start (or stays in the fabric's
// shared region), and range maps reuse nodes from their own pools.
#include "fault_loop.hpp"

#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/fault_inject.hpp"
#include "core/page.hpp"
#include "holes.hpp"
#include "replies.hpp"
#include "staged_installs.hpp"
#include "sys/sched_policy.hpp"
#include "wire/control.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <thread>

namespace ferry::lazy {

namespace {

constexpr uint32_t restore_finished_magic = 0x52535446; // CRIU's "ReSTore Finished"
// Background data received per look at the channel, outside the lock.
constexpr size_t background_receive_bytes = 256 * 1024;

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

// The background thread works at SCHED_IDLE: the workload, the handlers and
// everything else on the host preempt it at once. It holds the state lock
// at the normal policy, so that a handler waiting for the lock never waits
// for an idle-class thread to be scheduled again.
void set_idle_policy(bool idle) noexcept {
    (void)proc::set_idle_policy(idle); // best effort
}

// Threads named by their job, for top -H, perf and scheduler traces. The
// main thread, background stream 0, keeps the process's name.
void name_thread(const char* job, size_t index) noexcept {
    char name[16];
    (void)std::snprintf(name, sizeof name, "lp-%s%zu", job, index);
    (void)::pthread_setname_np(::pthread_self(), name); // best effort
}

void pin_to(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    (void)::pthread_setaffinity_np(::pthread_self(), sizeof set, &set); // best effort
}

loop_config clamped(loop_config cfg, const page_channel& fault,
                    const std::vector<std::unique_ptr<page_channel>>& background) {
    if (background.empty() || background.size() > 255)
        throw error("the fault loop needs 1 to 255 background channels");
    cfg.max_window_pages = std::clamp<uint32_t>(cfg.max_window_pages, 1, fault.max_pages());
    cfg.fault_window_pages = std::clamp<uint32_t>(cfg.fault_window_pages, 1, cfg.max_window_pages);
    for (const auto& ch : background)
        cfg.background_chunk_pages =
            std::clamp<uint32_t>(cfg.background_chunk_pages, 1, ch->max_pages());
    cfg.background_depth = std::min<uint32_t>(cfg.background_depth, 16);
    cfg.background_streams = uint32_t(background.size());
    return cfg;
}

std::vector<page_channel*> raw(const std::vector<std::unique_ptr<page_channel>>& channels) {
    std::vector<page_channel*> out;
    for (const auto& ch : channels)
        out.push_back(ch.get());
    return out;
}

} // namespace

fault_loop::fault_loop(loop_config cfg, std::unique_ptr<page_channel> fault_channel,
                       std::vector<std::unique_ptr<page_channel>> background_channels)
    : _cfg(clamped(cfg, *fault_channel, background_channels)), _fault_ch(std::move(fault_channel)),
      _bg_chs(std::move(background_channels)), _bg_replies(_bg_chs.size(), nullptr),
      _wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)), _s(_cfg, *_fault_ch, raw(_bg_chs)) {
    if (!_wake)
        throw sys_error("eventfd");
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
    _s.watch_uffd = [this](int fd, uint32_t index) { epoll_add_all(fd, source::uffd, index); };
    _s.unwatch_uffd = [this](int fd) { epoll_del_all(fd); };
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

// Best effort: a uffd that is closed next leaves every epoll set anyway.
void fault_loop::epoll_del_all(int fd) {
    for (auto& ep : _epolls)
        (void)::epoll_ctl(ep.get(), EPOLL_CTL_DEL, fd, nullptr);
}

void fault_loop::watch_restore(unique_fd criu_socket) {
    _criu_sock = std::move(criu_socket);
    epoll_add(_epolls[0].get(), _criu_sock.get(), source::criu_socket, 0);
}

void fault_loop::watch_daemon(int daemon_socket) {
    {
        std::lock_guard lock(_mu);
        _s.expect_tasks_run = true;
    }
    _daemon_sock = daemon_socket;
    epoll_add(_epolls[0].get(), _daemon_sock, source::daemon_socket, 0);
}

void fault_loop::set_restore_finished() noexcept {
    std::lock_guard lock(_mu);
    _s.restore_finished = true;
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
    p->early = early_areas(p->lazy, _cfg);
    _s.stats.pages_total += pages_in(p->lazy.bytes());
    _s.stats.processes++;
    _s.add(std::move(p));
}

void fault_loop::post_holes(std::vector<page_hole> holes) {
    std::lock_guard lock(_mu);
    _s.holes.insert(_s.holes.end(), holes.begin(), holes.end());
}

uint64_t fault_loop::bytes_received() const noexcept {
    uint64_t bytes = _fault_ch->bytes_received();
    for (const auto& ch : _bg_chs)
        bytes += ch->bytes_received();
    return bytes;
}

void fault_loop::wake_all() noexcept {
    const uint64_t one = 1;
    (void)!::write(_wake.get(), &one, sizeof one); // an eventfd write cannot block
}

void fault_loop::stop_with(std::exception_ptr error) noexcept {
    {
        std::lock_guard lock(_mu);
        if (error && !_error)
            _error = error;
        _stop = true;
    }
    wake_all();
}

void fault_loop::run() {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < _epolls.size(); i++)
        threads.emplace_back([this, i] {
            name_thread("handler", i);
            try {
                handler_main(i);
            } catch (...) {
                stop_with(std::current_exception()); // rethrown by run(), once every thread ended
            }
        });
    if (_s.staged)
        threads.emplace_back([this] {
            name_thread("staged", 0);
            try {
                staged_main();
            } catch (...) {
                stop_with(std::current_exception());
            }
        });
    for (size_t k = 1; k < _bg_chs.size(); k++)
        threads.emplace_back([this, k] {
            name_thread("background", k);
            try {
                background_main(uint8_t(k));
            } catch (...) {
                stop_with(std::current_exception());
            }
        });
    try {
        background_main(0);
    } catch (...) {
        stop_with(std::current_exception());
    }
    for (auto& t : threads)
        t.join();
    if (_error)
        std::rethrow_exception(_error);
    if (_progress)
        _progress(_s.stats);
}

// One per CPU. Runs the fault path for faults taken on its CPU (and, as the
// kernel wakes every waiter, sometimes for others: the state lock makes that
// harmless).
void fault_loop::handler_main(size_t index) {
    pin_to(_cpus[index]);
    const int epoll = _epolls[index].get();
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
                if (!_s.procs[idx]->exited)
                    drain_uffd(_s, *_s.procs[idx], _new_uffd);
                break;
            case source::fault_channel:
                drain_fault_replies(_s, *_fault_ch);
                break;
            case source::criu_socket:
                handle_criu_socket();
                break;
            case source::daemon_socket:
                handle_daemon_socket();
                break;
            case source::wake:
                return;
            }
        }
        poll_fault_replies(lock);
    }
}

// Stay with outstanding fault requests: a one-sided fabric shows its data
// only to a poller, and another fabric's reply is a round trip away, less
// than the cost of being woken for it. One poller at a time: on a small
// machine a second one only takes the CPU from the peer producing the reply.
void fault_loop::poll_fault_replies(std::unique_lock<std::mutex>& lock) {
    if (_polling)
        return;
    _polling = true;
    const uint64_t spin_until = monotonic_ns() + uint64_t(_cfg.spin.count()) * 1000;
    const bool one_sided = _fault_ch->capabilities().one_sided;
    // A one-sided fabric often holds the pages already (the source staged
    // them before the fault): look before the first yield, which can cost a
    // whole scheduler slice when another thread is runnable on this CPU.
    if (one_sided)
        drain_fault_replies(_s, *_fault_ch);
    while (!_s.fault_reqs.empty() && !_stop) {
        if (!one_sided && monotonic_ns() > spin_until)
            break; // epoll wakes a handler when the reply arrives
        // Between looks, leave the lock to the other threads for a while.
        lock.unlock();
        // Yield rather than spin: the thread producing the reply (the
        // stager, or the background) may be queued on this very CPU.
        ::sched_yield();
        lock_as_handler(lock);
        drain_fault_replies(_s, *_fault_ch);
        _s.check_deadlines();
    }
    _polling = false;
}

// Takes the state lock for a handler; the background sees it waiting and
// gives the lock up between slices of its work.
void fault_loop::lock_as_handler(std::unique_lock<std::mutex>& lock) {
    _handlers_waiting.fetch_add(1, std::memory_order_relaxed);
    lock.lock();
    _handlers_waiting.fetch_sub(1, std::memory_order_relaxed);
}

// One background stream's pull, deadlines and progress. Whichever stream's
// thread sees the transfer finished ends it.
void fault_loop::background_main(uint8_t stream) {
    struct normal_policy_on_return {
        ~normal_policy_on_return() { set_idle_policy(false); }
    } restore_policy;
    incoming_reply*& reply = _bg_replies[stream];
    background_slice slice;
    for (;;) {
        set_idle_policy(true);
        receive_background(stream);
        std::unique_lock lock(_mu, std::defer_lock);
        lock_as_background(lock);
        if (_stop)
            return;
        bool installed = false;
        if (reply) {
            background_stream& st = _s.bg[stream];
            claim_background_slice(_s, st, *reply, slice);
            if (slice.count > 0) {
                lazy_process& p = *st.reqs.front().proc;
                lock.unlock();
                copy_without_lock(p, slice.claimed());
                lock_as_background(lock);
                if (_stop)
                    return;
            }
            if (commit_background_slice(_s, st, *reply, slice)) {
                reply = nullptr;
                installed = true;
            }
        }
        if (_s.finished()) {
            _stop = true;
            wake_all();
            return;
        }
        const bool outstanding = background_turn(stream);
        lock.unlock();
        const bool slowed = installed && fault_injected(fault::slow_background);
        if (!outstanding || slowed) {
            struct timespec ts = {0, slowed ? 10'000'000 : 1'000'000};
            ::nanosleep(&ts, nullptr);
        }
    }
}

// The pre-copy's staged pages, once published and the main pass open:
// slices claimed under the lock and copied without it, as the
// background does, yielding between slices. Nothing here waits on the
// network, so the pass ends by itself; the background streams then stop
// leaving staged pages to it.
void fault_loop::staged_main() {
    for (;;) {
        {
            std::lock_guard lock(_mu);
            if (_stop)
                return;
            if (_s.staged->abandoned()) {
                _s.staged_pass_over = true;
                return;
            }
            // With the main pass: before it, the restore and the resume
            // need this host's CPUs, and faults install staged pages anyway.
            if (_s.staged->ready() && _s.main_pass_open(monotonic_ns()))
                break;
        }
        struct timespec ts = {0, 1'000'000};
        ::nanosleep(&ts, nullptr);
    }
    struct normal_policy_on_return {
        ~normal_policy_on_return() { set_idle_policy(false); }
    } restore_policy;
    background_slice slice;
    for (;;) {
        std::unique_lock lock(_mu, std::defer_lock);
        lock_as_background(lock);
        if (_stop)
            return;
        lazy_process* p = claim_staged_slice(_s, slice);
        if (!p) {
            _s.staged_pass_over = true;
            return;
        }
        lock.unlock();
        copy_without_lock(*p, slice.claimed(), staged_copy_pages, copy_policy::idle);
        lock_as_background(lock);
        commit_staged_slice(_s, *p, slice);
        if (_s.finished()) {
            _stop = true;
            wake_all();
            return;
        }
        const bool faulting = _s.pacer.faulting();
        lock.unlock();
        set_idle_policy(true);
        // The workload and the handlers first: while the application
        // faults, the pages it waits for are the fetched ones, whose
        // replies need this host's CPU.
        if (faulting || fault_injected(fault::slow_background)) {
            struct timespec ts = {0, faulting ? 200'000 : 10'000'000};
            ::nanosleep(&ts, nullptr);
        } else {
            ::sched_yield();
        }
    }
}

// Outside the lock: receives (and for TLS decrypts) background data and
// verifies it, until a slice is ready to install, the reply is complete, or
// 10 ms pass without data (the caller then checks deadlines). Only this
// thread pushes and pops the background ring and uses its channel; handlers
// read the ring's front under the lock, for deadlines, and never the fields
// written here.
void fault_loop::receive_background(uint8_t stream) {
    background_stream& st = _s.bg[stream];
    if (st.reqs.empty())
        return;
    page_channel& ch = st.ch;
    incoming_reply*& current = _bg_replies[stream];
    outstanding_request& req = st.reqs.front();
    auto ready = [&] {
        return current &&
               (current->complete() || req.verified - req.consumed >= _cfg.install_batch_pages);
    };
    const uint64_t give_up = monotonic_ns() + 10'000'000;
    while (!ready()) {
        const uint64_t before = ch.bytes_received();
        if (incoming_reply* reply = ch.pump(background_receive_bytes)) {
            if (!current) {
                check_reply(req, *reply);
                current = reply;
            }
            verify_pages(req, *reply, reply->pages_ready);
        }
        if (ready() || ch.bytes_received() != before || ch.buffered())
            continue;
        if (monotonic_ns() > give_up)
            return;
        if (ch.capabilities().one_sided) {
            // The source stages pages on its own: hand it the CPU meanwhile.
            ::sched_yield();
        } else {
            pollfd p{ch.wait_fd(), POLLIN, 0};
            (void)::poll(&p, 1, 10);
        }
    }
}

// A mutex keeps no queue: the background, having just let go of the lock,
// could take it straight back from a handler that waits for it.
void fault_loop::lock_as_background(std::unique_lock<std::mutex>& lock) {
    set_idle_policy(false);
    for (int i = 0; i < 64 && _handlers_waiting.load(std::memory_order_relaxed) > 0; i++)
        ::sched_yield();
    lock.lock();
}

// One turn of a stream's thread, under the lock; true if the stream has
// requests outstanding.
bool fault_loop::background_turn(uint8_t stream) {
    // Holes before fetching: a slice per turn keeps the lock's hold short.
    constexpr size_t holes_per_turn = 1024;
    if (_s.lazy_areas_ready() && _s.holes_applied < _s.holes.size()) {
        const size_t n = std::min(holes_per_turn, _s.holes.size() - _s.holes_applied);
        (void)apply_holes(_s, std::span(_s.holes).subspan(_s.holes_applied, n));
        _s.holes_applied += n;
    }
    const uint64_t now = monotonic_ns();
    if (!_main_pass_started && _s.main_pass_open(now)) {
        _main_pass_started = true;
        if (_main_pass)
            _main_pass(_s.restore_finished_ns ? now - _s.restore_finished_ns : 0, _s.tasks_run);
    }
    pump_background(_s, stream);
    _s.check_deadlines();
    if (_progress &&
        now - _last_progress_ns >= uint64_t(_cfg.progress_interval.count()) * 1'000'000) {
        _last_progress_ns = now;
        _progress(_s.stats);
    }
    return !_s.bg[stream].reqs.empty();
}

void fault_loop::handle_criu_socket() {
    uint32_t value = 0;
    const ssize_t n = ::recv(_criu_sock.get(), &value, sizeof value, MSG_WAITALL);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) {
        if (!_s.restore_finished)
            throw error(
                "restore failed: CRIU closed the lazy-pages socket before \"restore finished\"");
        (void)::epoll_ctl(_epolls[0].get(), EPOLL_CTL_DEL, _criu_sock.get(), nullptr);
        _criu_sock.reset();
        return;
    }
    if (n != sizeof value)
        throw sys_error("recv restore-finished from CRIU");
    if (value != restore_finished_magic)
        throw error(fmt::format("unexpected message {:#x} on the lazy-pages socket", value));
    _s.restore_finished = true;
    _s.restore_finished_ns = monotonic_ns();
}

// The daemon says two short things, in order: the lazy areas are
// registered, then the tasks run, or instead that the gate refused them and
// the copy is killed, which the source hears from here (its tasks are then
// the only copy). Anything else on its socket is not ours to read. A daemon
// gone changes nothing here: the transfer goes on (the main pass after
// cfg.tasks_run_wait), and the daemon's uffd keeper is its own affair.
void fault_loop::handle_daemon_socket() {
    control::envelope_ptr e;
    try {
        e = control::receive(_daemon_sock, net::after(std::chrono::seconds(1)));
    } catch (const std::exception&) {
    }
    if (e && e->body_case == FERRY_CONTROL__ENVELOPE__BODY_LAZY_AREAS_READY) {
        _s.areas_registered = true;
        return;
    }
    if (e && e->body_case == FERRY_CONTROL__ENVELOPE__BODY_LAZY_TASKS_RUN)
        _s.tasks_run = true;
    if (e && e->body_case == FERRY_CONTROL__ENVELOPE__BODY_LAZY_COPY_DISCARDED) {
        // Under the lock, as every other request on this channel is sent.
        try {
            _bg_chs.front()->send(
                wire::page_request{wire::op::discarded, 0, 0, 0, _s.next_request_id++});
        } catch (const std::exception&) {
            // The source waits for its migrator, as before this notice.
        }
    }
    (void)::epoll_ctl(_epolls[0].get(), EPOLL_CTL_DEL, _daemon_sock, nullptr);
}

void fault_loop::announce_done() {
    _bg_chs.front()->send(wire::page_request{wire::op::done, 0, 0, 0, _s.next_request_id++});
}

} // namespace ferry::lazy
