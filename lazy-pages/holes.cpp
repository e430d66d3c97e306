#include "holes.hpp"

#include "core/page.hpp"

#include <algorithm>

namespace ferry::lazy {

namespace {

// Erases [start, end) from p's lazy map where it still sits at its source
// address and no fault request is out for it; returns the bytes erased.
uint64_t forget_hole(lazy_process& p, uint64_t start, uint64_t end) {
    uint64_t erased = 0;
    for (uint64_t at = start; at < end;) {
        const auto r = p.lazy.first_ending_after(at);
        if (!r || r->start >= end)
            break;
        const uint64_t from = std::max(at, r->start), to = std::min(end, r->end);
        at = to;
        if (r->img_of(from) != from)
            continue; // moved by mremap: fetched as before
        for (uint64_t x = from; x < to;) {
            const auto busy = p.in_flight.first_ending_after(x);
            const uint64_t busy_start = busy && busy->start < to ? std::max(busy->start, x) : to;
            if (busy_start > x)
                erased += p.lazy.erase(x, busy_start);
            if (busy_start >= to)
                break;
            x = std::min(to, busy->end);
        }
    }
    return erased;
}

} // namespace

uint64_t apply_holes(fault_state& s, std::span<const page_hole> holes) {
    uint64_t pages = 0;
    for (const auto& h : holes)
        for (auto& p : s.procs) {
            if (p->exited || p->image_pid != h.pid)
                continue;
            const uint64_t erased = pages_in(forget_hole(*p, h.start, h.end));
            if (!p->forked)
                pages += erased;
        }
    s.stats.pages_absent += pages;
    return pages;
}

} // namespace ferry::lazy
