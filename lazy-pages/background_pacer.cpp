#include "background_pacer.hpp"

#include "core/clock.hpp"
#include "core/page.hpp"
#include "fault_state.hpp"

#include <algorithm>

namespace ferry::lazy {

namespace {

// The next run to pull: from the early areas while any is left, then (if
// `main_pass`) after the process's cursor, once around. Never pages a
// request asked for, nor those the local pass installs from the pre-copy
// (`staged`).
bool next_run(lazy_process& p, const staged_pages* staged, uint32_t chunk, bool main_pass,
              uint64_t& addr, uint64_t& img, uint32_t& n) {
    for (; p.early_next < p.early.size(); p.early_next++) {
        auto& a = p.early[p.early_next];
        if (p.next_free_run(a.start, a.end, chunk, staged, false, addr, img, n))
            return true;
    }
    if (!main_pass || (p.bg_swept && p.bg_swept_staged == (staged != nullptr)))
        return false;
    bool wrapped = false;
    for (;;) {
        if (p.next_free_run(p.bg_cursor, ~0ull, chunk, staged, false, addr, img, n))
            return true;
        // Pages behind the cursor are still lazy only if a request for them
        // is pending or was abandoned: rescan once nothing is pending.
        if (p.bg_outstanding)
            return false;
        if (wrapped || p.bg_cursor == 0) {
            p.bg_swept = true;
            p.bg_swept_staged = staged != nullptr;
            return false;
        }
        p.bg_cursor = 0;
        wrapped = true;
    }
}

} // namespace

std::vector<address_range> early_areas(const range_map& lazy, const loop_config& cfg) {
    auto areas = lazy.to_vector();
    std::erase_if(areas,
                  [&](const auto& a) { return pages_in(a.length()) > cfg.early_area_pages; });
    std::stable_sort(areas.begin(), areas.end(),
                     [](const auto& a, const auto& b) { return a.length() < b.length(); });
    uint64_t pages = 0;
    size_t keep = 0;
    for (; keep < areas.size(); keep++) {
        pages += pages_in(areas[keep].length());
        if (pages > cfg.early_total_pages)
            break;
    }
    areas.resize(keep);
    return areas;
}

void background_pacer::note_fault(uint64_t now) noexcept {
    const uint64_t window = uint64_t(_cfg.fault_window.count()) * 1000;
    if (now - _window_start_ns >= window) {
        _busy_until_ns = _window_faults >= _cfg.faulting_threshold ? _window_start_ns + 2 * window
                                                                   : _busy_until_ns;
        _window_start_ns = now;
        _window_faults = 0;
    }
    if (++_window_faults >= _cfg.faulting_threshold)
        _busy_until_ns = _window_start_ns + 2 * window;
    _last_fault_ns = now;
}

// One stream while the application faults: its small requests are all that
// shares the source and this loop with the faults. Also for a window after a
// single fault: a workload's first faults after the resume are few and far
// between, and each waited up to 2 ms behind two streams' installs and CPU
// (a Redis container moved idle, fault p99 0.35-0.50 ms with one stream,
// 1.1-2.4 with two, 0.46-0.75 with this pause).
uint32_t background_pacer::streams() const noexcept {
    const bool fault_lately = _last_fault_ns && monotonic_ns() - _last_fault_ns <
                                                    uint64_t(_cfg.fault_window.count()) * 1000;
    return faulting() || fault_lately ? 1 : _cfg.background_streams;
}

bool background_pacer::faulting() const noexcept {
    return _cfg.faulting_threshold > 0 && monotonic_ns() < _busy_until_ns;
}

uint32_t background_pacer::depth() const noexcept {
    return faulting() ? std::min(_cfg.faulting_depth, _cfg.background_depth)
                      : _cfg.background_depth;
}

uint32_t background_pacer::chunk_pages() const noexcept {
    return faulting() ? std::min(_cfg.background_chunk_pages, _cfg.faulting_chunk_pages)
                      : _cfg.background_chunk_pages;
}

void pump_background(fault_state& s, uint8_t stream) {
    if (!s.lazy_areas_ready() || s.procs.empty() || s.cfg.background_depth == 0)
        return;
    if (stream >= s.pacer.streams())
        return;
    const uint32_t depth = s.pacer.depth();
    // Until the tasks run, only the early areas (cfg.main_pass_before_resume),
    // unless a pre-copy staged the rest: then what is left to fetch is what
    // the workload wrote last, the pages it is likeliest to touch first.
    const staged_pages* staged = s.staged_for_background();
    const bool main_pass = s.main_pass_open(monotonic_ns()) || staged;
    while (s.bg[stream].reqs.size() < depth) {
        bool issued = false;
        for (size_t tries = 0; tries < s.procs.size() && !issued; tries++) {
            lazy_process& p = *s.procs[s.bg_next_proc];
            s.bg_next_proc = (s.bg_next_proc + 1) % s.procs.size();
            uint64_t addr, img;
            uint32_t n;
            if (!p.exited && next_run(p, staged, s.pacer.chunk_pages(), main_pass, addr, img, n)) {
                s.issue(request_kind::background, p, addr, img, n, ~0ull, 0, 0, stream);
                issued = true;
            }
        }
        if (!issued)
            return;
    }
}

} // namespace ferry::lazy
