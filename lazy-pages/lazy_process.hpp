// The destination's state for one userfaultfd: one restored process, or a
// child it forked after restore.
#pragma once

#include "access_pattern.hpp"
#include "core/range_map.hpp"
#include "core/unique_fd.hpp"
#include "staged_pages.hpp"

#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

namespace ferry::lazy {

// A thread copying at copy_policy::idle (unlocked_copies.hpp). `at_idle`
// is true whenever the thread may be at SCHED_IDLE: set before it drops,
// cleared after it rises, so a guard that reads false needs to raise none.
struct idle_copier {
    std::atomic<pid_t> tid{0}; // 0: a free slot
    std::atomic<bool> at_idle{false};
};

struct lazy_process {
    uint32_t image_pid = 0; // whose pagemap and source memory serve this uffd
    unique_fd uffd;
    // Pages not yet installed: current address -> image address. Never
    // merged, so no range crosses a VMA boundary.
    range_map lazy{false};
    // Pages installed lately, in two generations (current and previous),
    // for a child forked meanwhile: the kernel copies the page tables, then
    // queues FORK and waits until it is read; a page installed into the
    // parent in between is missing in the child, and is not lazy in the
    // parent any more when FORK is read (a fault read in the same batch
    // before it, installed at once from the pre-copy, was one). The child
    // starts with these too (an install finds present ones present). A
    // generation ends when the uffd has no event queued, at most every
    // recent_generation_ns, so a page leaves only once a FORK queued after
    // its install would have been read.
    range_map recent[2];
    uint8_t recent_current = 0;
    uint64_t recent_rotated_ns = 0;
    static constexpr uint64_t recent_generation_ns = 100'000'000;
    range_map in_flight; // pages with an outstanding fault request
    // Pages with an outstanding background request: the background skips
    // them (two streams, or the main pass reaching an early area still in
    // flight, would ask twice). Faults do not: a fault never waits behind a
    // background reply.
    range_map bg_in_flight;
    // Areas the background pulls before the rest, in order; the front one's
    // start serves as its cursor (background_pacer.hpp).
    std::vector<address_range> early;
    size_t early_next = 0;
    uint64_t bg_cursor = 0;
    // A whole pass of the background found nothing left to pull, with or
    // without the staged pages left to the local pass (`bg_swept_staged`):
    // it looks again only once a request ends, the ranges move or that
    // changes. (Looking on every turn walked every staged run left, under
    // the state lock, ~1,000 times a second.)
    bool bg_swept = false;
    bool bg_swept_staged = false;
    // The local pass over the pre-copy's staged pages (staged_installs.hpp):
    // first the pages the workload rewrote during the pre-copy (which of
    // them, and where in it), then the rest: where it goes on, and whether
    // it has passed the last lazy page.
    size_t staged_rewritten_next = 0;
    uint64_t staged_rewritten_cursor = 0;
    uint64_t staged_cursor = 0;
    bool staged_done = false;
    uint32_t bg_outstanding = 0;
    bool exited = false;
    bool forked = false; // created by a FORK event; not part of pages_total
    access_pattern pattern{4, 64};
    // The background's copies without the state lock (unlocked_copies.hpp):
    // whether one runs on this uffd, and how many lock holders want quiet.
    std::atomic<uint32_t> unlocked_copies{0};
    std::atomic<uint32_t> quiet_wanted{0};
    // The threads copying at copy_policy::idle, which a guard raises to the
    // normal policy while they are at SCHED_IDLE so that its wait ends.
    std::array<idle_copier, 4> idle_copiers{};

    // Takes [start, end) off the lazy map as installed: it joins the recent
    // installs. Returns the bytes that were lazy.
    uint64_t take_installed(uint64_t start, uint64_t end);
    // A discard or an unmap: [start, end) is no longer lazy nor recent.
    uint64_t take_dropped(uint64_t start, uint64_t end);
    // Where [start, end) first meets a page a request (fault or
    // background) is out for, or end.
    [[nodiscard]] uint64_t before_busy(uint64_t start, uint64_t end) const;
    // The next run of lazy pages in [cursor, limit) that no request has
    // asked for, at most `max_pages`; the cursor moves past it (or past
    // what it skipped). With `staged`, only pages it holds (`want_staged`)
    // or only pages it does not: the local pass and the background split
    // the lazy pages so. False when none is left.
    bool next_free_run(uint64_t& cursor, uint64_t limit, uint32_t max_pages,
                       const staged_pages* staged, bool want_staged, uint64_t& addr, uint64_t& img,
                       uint32_t& n) const;
    // Under the state lock, with no FORK queued on the uffd (its events
    // were just read to the end, or it polls empty): a new generation of
    // recent installs, if the current one is old enough.
    void end_recent_generation(uint64_t now_ns, bool events_read_to_end);
};

} // namespace ferry::lazy
