// One function per uffd event, behind one short dispatch switch, as CRIU's
// uffd.c does. Each changes the process's lazy map (pages not yet
// installed) and in-flight map (pages a fault request is out for); replies
// are checked against both when they land (replies.cpp), which is what makes
// the races between events and replies harmless.
#include "uffd_events.hpp"

#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/page.hpp"
#include "staged_installs.hpp"
#include "sys/net.hpp"
#include "uffd_ops.hpp"
#include "unlocked_copies.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace ferry::lazy {

namespace {

constexpr size_t events_per_read = 16;

// Single pages at the fault's stride, ahead of the access.
void prefetch_strided(fault_state& s, lazy_process& p, uint64_t addr, int64_t stride_pages,
                      uint32_t count) {
    for (uint32_t k = 1; k <= count && !s.fault_reqs.full(); k++) {
        const uint64_t next = addr + uint64_t(int64_t(k) * stride_pages * int64_t(page_size));
        const auto r = p.lazy.find(next);
        if (!r || p.in_flight.find(next))
            continue;
        s.issue(request_kind::fault, p, next, r->img_of(next), 1, ~0ull, 0, 0);
    }
}

// A hole in a lazy VMA: the page never existed on the source.
void zero_fill(fault_state& s, lazy_process& p, uint64_t addr) {
    auto r = uffd::zeropage(p.uffd.get(), addr, page_size);
    switch (r.result) {
    case uffd::outcome::done:
        s.stats.pages_zero++;
        return;
    case uffd::outcome::exists:
        return;
    case uffd::outcome::retry:    // the address space is changing: let the thread fault again
    case uffd::outcome::unmapped: // the area went meanwhile: its access now fails or is not ours
        (void)uffd::wake(p.uffd.get(), addr, page_size);
        return;
    case uffd::outcome::target_gone:
        s.process_gone(p);
        return;
    case uffd::outcome::fatal:
        throw sys_error(fmt::format("UFFDIO_ZEROPAGE pid {} {:#x}", p.image_pid, addr), r.err);
    }
}

void handle_pagefault(fault_state& s, lazy_process& p, const uffd_msg& msg) {
    const uint64_t fault_ns = monotonic_ns();
    const uint64_t addr = page_down(msg.arg.pagefault.address);
    s.stats.faults++;
    if (p.in_flight.find(addr)) {
        s.pacer.note_fault(fault_ns);
        return; // the pending copy wakes this thread too
    }
    const auto range = p.lazy.find(addr);
    if (!range) {
        zero_fill(s, p, addr);
        return;
    }
    // A staged page is installed from local memory: it shares neither the
    // channel nor the source with the background, so it does not slow the
    // background down (counted, a loaded Redis's ~6,000 staged faults kept
    // the background at one small request at a time, and its last-written
    // pages, the ones it touches most, came in over ~1.2 s instead of ms).
    if (install_staged_fault(s, p, addr, *range, fault_ns))
        return;
    s.pacer.note_fault(fault_ns);
    // The faulting page and its lazy successors in the same range, as many
    // as the access pattern suggests, stopping at pages another fault
    // already asked for.
    const auto plan = p.pattern.on_fault(addr / page_size);
    uint64_t end = std::min(range->end, addr + uint64_t(plan.window) * page_size);
    if (auto next_busy = p.in_flight.first_ending_after(addr); next_busy && next_busy->start < end)
        end = next_busy->start;
    s.issue(request_kind::fault, p, addr, range->img_of(addr), uint32_t(pages_in(end - addr)), addr,
            fault_ns, 0);
    if (plan.pattern == access_pattern::kind::sequential)
        p.bg_cursor = end; // read ahead: the background continues where the scan goes
    else if (plan.pattern == access_pattern::kind::strided)
        prefetch_strided(s, p, addr, plan.stride_pages, plan.strided);
}

// The child starts with every page the parent still lacks, including pages
// in flight for the parent: those copies go to the parent only.
void handle_fork(fault_state& s, lazy_process& parent, const uffd_msg& msg,
                 const uffd_fn& new_uffd) {
    unique_fd child_uffd(int(msg.arg.fork.ufd));
    net::set_nonblocking(child_uffd.get(), true);
    if (new_uffd)
        new_uffd(child_uffd.get());
    auto child = std::make_unique<lazy_process>();
    child->image_pid = parent.image_pid;
    child->pattern = access_pattern(s.cfg.fault_window_pages, s.cfg.max_window_pages);
    child->uffd = std::move(child_uffd);
    child->forked = true;
    // Recent installs first: the lazy map wins where both have a page.
    for (const range_map& installed : parent.recent)
        for (const auto& r : installed.to_vector())
            child->lazy.insert(r.start, r.end, r.img_start);
    for (const auto& r : parent.lazy.to_vector())
        child->lazy.insert(r.start, r.end, r.img_start);
    s.add(std::move(child));
}

void handle_remap(lazy_process& p, const uffd_msg& msg) {
    const uint64_t from = msg.arg.remap.from, to = msg.arg.remap.to, len = msg.arg.remap.len;
    p.lazy.remap(from, to, len);
    for (range_map& installed : p.recent)
        installed.remap(from, to, len);
    // Requests in flight for either range are checked against the map when
    // they land; clear the marks so new faults ask again.
    for (range_map* busy : {&p.in_flight, &p.bg_in_flight}) {
        busy->erase(from, from + len);
        busy->erase(to, to + len);
    }
    p.bg_cursor = 0; // ranges may now lie behind the cursor
    p.bg_swept = false;
    p.staged_cursor = 0;
    p.staged_done = false;
    // Threads blocked on the old range retry their access and see the move.
    (void)uffd::wake(p.uffd.get(), from, len);
}

// REMOVE (madvise DONTNEED and friends) and UNMAP.
//
// The race with PAGEFAULT: a thread faults on a page, we read the fault and
// send its request, and meanwhile another thread discards the range. The
// discard queues REMOVE behind the fault and waits until we have read it
// before it zaps; the reply can land at any moment. Before we read REMOVE,
// UFFDIO_COPY installs the data and the discard zaps it right after
// (harmless). Once REMOVE is read, its pages are out of the lazy map, and a
// reply that lands later is dropped page by page (replies.cpp): the
// application never sees stale data where it expects zeros. While the
// discard runs, UFFDIO_COPY fails with EAGAIN ("retry"): the blocked thread
// is woken and faults again, into a range that is then no longer ours.
void handle_remove(fault_state& s, lazy_process& p, const uffd_msg& msg) {
    const uint64_t start = msg.arg.remove.start, end = msg.arg.remove.end;
    // REMOVE keeps the VMA: unregister so later faults are the kernel's
    // ordinary zero fill. UNMAP has no VMA left to worry about.
    if (msg.event == UFFD_EVENT_REMOVE) {
        auto r = uffd::unregister_range(p.uffd.get(), start, end - start);
        if (r.result == uffd::outcome::target_gone) {
            s.process_gone(p);
            return;
        }
        if (r.result != uffd::outcome::done)
            throw sys_error(
                fmt::format("UFFDIO_UNREGISTER pid {} [{:#x}, {:#x})", p.image_pid, start, end),
                r.err);
    }
    s.range_gone(p, start, end);
}

} // namespace

void drain_uffd(fault_state& s, lazy_process& p, const uffd_fn& new_uffd) {
    // A read lets a discard or a move go ahead in the kernel before the
    // handler below changes the lazy map: no copy may run across it.
    const quiet_copies quiet(p, s.cfg.copy_quiet_wait);
    std::array<uffd_msg, events_per_read> msgs;
    // A bounded number of batches, so one busy process cannot starve others.
    for (int batch = 0; batch < 4 && !p.exited; batch++) {
        // A fault may issue its own request and a few strided ones.
        const size_t reserved = s.fault_reqs.size() + access_pattern::strided_prefetch;
        const size_t room =
            reserved < s.fault_reqs.capacity() ? s.fault_reqs.capacity() - reserved : 0;
        if (room == 0)
            return; // replies will free slots; the events wait in the kernel
        const size_t want = std::min(room, msgs.size());
        const long n = uffd::read_events(p.uffd.get(), msgs.data(), want);
        if (n < 0)
            throw sys_error(fmt::format("read uffd of pid {}", p.image_pid));
        if (size_t(n) < want) // read to the end: no FORK is queued now
            p.end_recent_generation(monotonic_ns(), true);
        if (n == 0)
            return;
        for (long i = 0; i < n && !p.exited; i++) {
            const uffd_msg& msg = msgs[size_t(i)];
            s.stats.events++;
            switch (msg.event) {
            case UFFD_EVENT_PAGEFAULT:
                handle_pagefault(s, p, msg);
                break;
            case UFFD_EVENT_FORK:
                handle_fork(s, p, msg, new_uffd);
                break;
            case UFFD_EVENT_REMAP:
                handle_remap(p, msg);
                break;
            case UFFD_EVENT_REMOVE:
            case UFFD_EVENT_UNMAP:
                handle_remove(s, p, msg);
                break;
            default:
                throw error(fmt::format("pid {}: unexpected uffd event {}", p.image_pid,
                                        unsigned(msg.event)));
            }
        }
    }
}

} // namespace ferry::lazy
