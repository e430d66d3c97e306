#include "lazy_process.hpp"

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
