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
    const uint64_t end = p.before_busy(
        from, std::min({range.end, addr + bytes, addr + uint64_t(staged_fault_pages) * page_size}));
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
    // A new list (the last round's pages too): start over, as pages behind
    // the cursors may be staged now.
    if (const uint32_t lists = s.staged->publications(); lists != s.staged_publications_seen) {
        s.staged_publications_seen = lists;
        for (auto& p : s.procs) {
            p->staged_rewritten_next = 0;
            p->staged_rewritten_cursor = 0;
            p->staged_cursor = 0;
            p->staged_done = false;
        }
    }
    for (size_t tries = 0; tries < s.procs.size(); tries++) {
        lazy_process& p = *s.procs[s.staged_next_proc];
        s.staged_next_proc = (s.staged_next_proc + 1) % s.procs.size();
        if (p.exited || p.staged_done)
            continue;
        uint32_t pages = 0;
        uint64_t addr, img;
        uint32_t n;
        auto take = [&] {
            uint64_t bytes = 0;
            slice.runs[slice.count++] =
                unlocked_run{addr, s.staged->find(p.image_pid, img, bytes), pages, n};
            pages += n;
        };
        // The pages the workload rewrote during the pre-copy first: they
        // are what it was touching just before the freeze, so what its
        // first requests touch again. Their image addresses are taken for
        // current ones: they are until the workload moves an area (REMAP),
        // and after that the order is merely not the best one.
        const auto rewritten = s.staged->rewritten(p.image_pid);
        while (slice.count < slice.runs.size() && pages < background_slice::max_pages &&
               p.staged_rewritten_next < rewritten.size()) {
            const auto& hot = rewritten[p.staged_rewritten_next];
            uint64_t cursor = std::max(p.staged_rewritten_cursor, hot.start);
            if (!p.next_free_run(cursor, hot.end, background_slice::max_pages - pages, s.staged,
                                 true, addr, img, n)) {
                p.staged_rewritten_next++;
                p.staged_rewritten_cursor = 0;
                continue;
            }
            p.staged_rewritten_cursor = cursor;
            take();
        }
        while (slice.count < slice.runs.size() && pages < background_slice::max_pages) {
            if (!p.next_free_run(p.staged_cursor, ~0ull, background_slice::max_pages - pages,
                                 s.staged, true, addr, img, n)) {
                p.staged_done = true;
                break;
            }
            take();
        }
        if (slice.count > 0) {
            begin_unlocked_copies(p);
            return &p;
        }
    }
    return nullptr;
}

void commit_staged_slice(fault_state& s, lazy_process& p, const background_slice& slice) {
    p.end_recent_generation(monotonic_ns(), false);
    for (const unlocked_run& run : slice.claimed()) {
        const uint32_t landed = take_landed(s, p, run, s.stats.pages_precopied);
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
