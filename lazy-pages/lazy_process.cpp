#include "lazy_process.hpp"

#include "core/page.hpp"

#include <poll.h>

#include <algorithm>

namespace ferry::lazy {

uint64_t lazy_process::take_installed(uint64_t start, uint64_t end) {
    range_map& now = recent[recent_current];
    for (uint64_t at = start; at < end;) {
        const auto r = lazy.first_ending_after(at);
        if (!r || r->start >= end)
            break;
        const uint64_t s = std::max(at, r->start), e = std::min(end, r->end);
        now.insert(s, e, r->img_of(s));
        at = e;
    }
    return lazy.erase(start, end);
}

uint64_t lazy_process::take_dropped(uint64_t start, uint64_t end) {
    recent[0].erase(start, end);
    recent[1].erase(start, end);
    return lazy.erase(start, end);
}

uint64_t lazy_process::before_busy(uint64_t start, uint64_t end) const {
    for (const range_map* busy : {&in_flight, &bg_in_flight})
        if (auto b = busy->first_ending_after(start); b && b->start < end)
            end = std::max(start, b->start);
    return end;
}

bool lazy_process::next_free_run(uint64_t& cursor, uint64_t limit, uint32_t max_pages,
                                 const staged_pages* staged, bool want_staged, uint64_t& addr,
                                 uint64_t& img, uint32_t& n) const {
    for (;;) {
        const auto r = lazy.first_ending_after(cursor);
        if (!r || r->start >= limit)
            return false;
        const uint64_t start = std::max(r->start, cursor);
        if (start >= limit)
            return false;
        if (const auto busy = in_flight.find(start)) {
            cursor = busy->end;
            continue;
        }
        if (const auto busy = bg_in_flight.find(start)) {
            cursor = busy->end;
            continue;
        }
        uint64_t end = std::min({r->end, limit, start + uint64_t(max_pages) * page_size});
        if (staged) {
            const uint64_t start_img = r->img_of(start);
            uint64_t bytes = 0;
            const bool is_staged = staged->find(image_pid, start_img, bytes) != nullptr;
            // Staged: up to its run's end; not: up to the next staged page.
            const uint64_t span_end =
                is_staged
                    ? std::min(r->end, start + bytes)
                    : start +
                          (staged->next(image_pid, start_img, r->img_of(std::min(r->end, limit))) -
                           start_img);
            if (is_staged != want_staged) {
                cursor = span_end;
                continue;
            }
            end = std::min(end, span_end);
        }
        end = before_busy(start, end);
        addr = start;
        img = r->img_of(start);
        n = uint32_t(pages_in(end - start));
        cursor = end;
        return true;
    }
}

void lazy_process::end_recent_generation(uint64_t now_ns, bool events_read_to_end) {
    if (now_ns - recent_rotated_ns < recent_generation_ns)
        return;
    if (!events_read_to_end) {
        if (!uffd)
            return;
        pollfd p{uffd.get(), POLLIN, 0};
        if (::poll(&p, 1, 0) != 0)
            return; // an event is queued: perhaps a FORK
    }
    recent_current ^= 1;
    recent[recent_current].clear();
    recent_rotated_ns = now_ns;
}

} // namespace ferry::lazy
