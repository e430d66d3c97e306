// The background pull's policy: how hard to pull while the application is
// faulting, and what to pull next. A policy object, so that the loop that
// runs it (fault_loop.cpp) says nothing of when to back off.
//
// Faults are counted in windows of cfg.fault_window; a window with at least
// cfg.faulting_threshold faults marks the application as faulting until the
// next window ends (a stray fault now and then does not count). While it
// faults, the background steps back to one small request at a time, so that
// fault replies share the channel, the source's CPU and this loop with as
// little as possible (CRIU's lazy-pages does the same with its transfer
// length).
#pragma once

#include "core/range_map.hpp"
#include "loop_config.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ferry::lazy {

struct fault_state;
struct lazy_process;

class background_pacer {
  public:
    explicit background_pacer(const loop_config& cfg) : _cfg(cfg) {}

    void note_fault(uint64_t now_ns) noexcept;
    [[nodiscard]] bool faulting() const noexcept;
    // Background streams that may ask for more now: all of them, or only
    // the first while the application faults and for a fault window after
    // any single fault.
    [[nodiscard]] uint32_t streams() const noexcept;
    // Background requests to keep in flight now, per stream.
    [[nodiscard]] uint32_t depth() const noexcept;
    // Pages per background request now.
    [[nodiscard]] uint32_t chunk_pages() const noexcept;

  private:
    const loop_config& _cfg;
    uint64_t _window_start_ns = 0;
    uint32_t _window_faults = 0;
    uint64_t _busy_until_ns = 0;
    uint64_t _last_fault_ns = 0;
};

// Which of a process's lazy areas the background pulls first: the small
// ones, smallest first (up to cfg.early_area_pages each, at most
// cfg.early_total_pages in all). A server's small areas are its allocator's
// metadata and small-object arenas, its stacks and globals: what every
// request touches. Its large areas hold the bulk data, touched here and
// there. Pulled first, and from the moment CRIU reaches post-restore, they
// are mostly in place when the workload resumes, instead of each costing a
// fault in its first milliseconds (a Redis container's first GET after the
// move took ~45 faults, ~13 ms, in its 8 MiB arena).
std::vector<address_range> early_areas(const range_map& lazy, const loop_config& cfg);

// Keeps background requests in flight on one stream once the lazy areas are
// registered: each process's early areas, then runs of lazy pages after its
// cursor, none that a fault asked for, taken from the processes in turn
// (the streams share the cursors). Under the state lock, by the stream's
// own thread.
void pump_background(fault_state& s, uint8_t stream);

} // namespace ferry::lazy
