#include "staged_installs.hpp"

#include "core/clock.hpp"
#include "core/page.hpp"
#include "uffd_ops.hpp"

#include <algorithm>

namespace ferry::lazy {

namespace {

// A fault on a staged page installs it and at most this many pages in all:
// each successor's copy delays nothing (the faulting page went first), and
// the local pass takes the rest.
constexpr uint32_t staged_fault_pages = 16;

// Where [start, end) first meets a page a request is out for, or end.
uint64_t before_busy(const lazy_process& p, uint64_t start, uint64_t end) {
    for (const range_map* busy : {&p.in_flight, &p.bg_in_flight})
        if (auto b = busy->first_ending_after(start); b && b->start < end)
            end = std::max(start, b->start);
    return end;
}

} // namespace

bool install_staged_fault(fault_state& s, lazy_process& p, uint64_t addr,
                          const address_range& range, uint64_t fault_ns) {
    if (!s.staged)
        return false;
    uint64_t bytes = 0;
    const std::byte* data = s.staged->find(p.image_pid, range.img_of(addr), bytes);
    if (!data)
        return false;
    auto res = uffd::copy(p.uffd.get(), addr, data, page_size);
    if (res.result != uffd::outcome::done && res.result != uffd::outcome::exists) {
        (void)copy_may_go_on(s, p, res.result, res.err, addr, page_size);
        return true;
    }
    p.take_installed(addr, addr + page_size);
    const uint64_t now = monotonic_ns();
    s.fault_latency.record(now - fault_ns);
    s.first.record(addr, fault_ns, now);
    (p.forked ? s.stats.pages_forked : s.stats.pages_precopy_faulted)++;

    // A few staged successors, up to a page some request is out for.
    const uint64_t from = addr + page_size;
    const uint64_t end = before_busy(
        p, from,
        std::min({range.end, addr + bytes, addr + uint64_t(staged_fault_pages) * page_size}));
    if (end <= from || p.exited)
        return true;
    res = uffd::copy(p.uffd.get(), from, data + page_size, end - from);
    const uint64_t landed = res.bytes + (res.result == uffd::outcome::exists ? page_size : 0);
    const uint64_t erased = pages_in(p.take_installed(from, from + landed));
    (p.forked ? s.stats.pages_forked : s.stats.pages_precopied) += erased;
    (void)copy_may_go_on(s, p, res.result, res.err, from + res.bytes, end - from - res.bytes);
    return true;
}

lazy_process* claim_staged_slice(fault_state& s, background_slice& slice) {
    slice.count = 0;
    slice.upto = 0;
    if (!s.staged || s.procs.empty())
        return nullptr;
    for (size_t tries = 0; tries < s.procs.size(); tries++) {
        lazy_process& p = *s.procs[s.staged_next_proc];
        s.staged_next_proc = (s.staged_next_proc + 1) % s.procs.size();
        if (p.exited || p.staged_done)
            continue;
        uint32_t pages = 0;
        while (slice.count < slice.runs.size() && pages < background_slice::max_pages) {
            const auto r = p.lazy.first_ending_after(p.staged_cursor);
            if (!r) {
                p.staged_done = true;
                break;
            }
            const uint64_t start = std::max(r->start, p.staged_cursor);
            if (const auto b = p.in_flight.find(start)) {
                p.staged_cursor = b->end; // a fault's fetch installs it
                continue;
            }
            if (const auto b = p.bg_in_flight.find(start)) {
                p.staged_cursor = b->end;
                continue;
            }
            const uint64_t img = r->img_of(start);
            uint64_t bytes = 0;
            const std::byte* data = s.staged->find(p.image_pid, img, bytes);
            if (!data) {
                p.staged_cursor =
                    start + (s.staged->next(p.image_pid, img, r->img_of(r->end)) - img);
                continue;
            }
            const uint64_t end = before_busy(
                p, start,
                std::min({r->end, start + bytes,
                          start + uint64_t(background_slice::max_pages - pages) * page_size}));
            const auto n = uint32_t(pages_in(end - start));
            slice.runs[slice.count++] = unlocked_run{start, data, pages, n};
            pages += n;
            p.staged_cursor = end;
        }
        if (slice.count > 0) {
            begin_unlocked_copies(p);
            return &p;
        }
    }
    return nullptr;
}

void commit_staged_slice(fault_state& s, lazy_process& p, const background_slice& slice) {
    for (const unlocked_run& run : slice.claimed()) {
        // On EEXIST the page after the copied ones was present already.
        const uint32_t landed = run.copied + (run.result == uffd::outcome::exists ? 1 : 0);
        const uint64_t erased =
            pages_in(p.take_installed(run.addr, run.addr + uint64_t(landed) * page_size));
        (p.forked ? s.stats.pages_forked : s.stats.pages_precopied) += erased;
        p.end_recent_generation(monotonic_ns(), false);
        if (run.whole())
            continue;
        // Stopped short (a lock holder's quiet, a present page, the address
        // space changing): the pass comes back for the rest.
        (void)copy_may_go_on(s, p, run.result, run.err, run.addr + uint64_t(run.copied) * page_size,
                             uint64_t(run.pages - run.copied) * page_size);
        if (!p.exited) {
            p.staged_cursor = std::min(p.staged_cursor, run.addr + uint64_t(landed) * page_size);
            p.staged_done = false;
        }
        return;
    }
}

} // namespace ferry::lazy
