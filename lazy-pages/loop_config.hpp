// The fault path's tuning and its account.
#pragma once

#include "core/page.hpp"
#include "transport/page_holes.hpp"

#include <chrono>
#include <cstdint>

namespace ferry::lazy {

struct loop_config {
    uint32_t fault_window_pages = 4; // pages per fault (the faulting one and its successors) ...
    uint32_t max_window_pages = 64;  // ... growing to this while the access is sequential
    uint32_t background_chunk_pages = 256; // 1 MiB per background request
    uint32_t background_depth = 2;         // background requests in flight, per stream
    // Background streams: each a channel and a thread of its own, so that
    // one receives, decrypts and verifies while another installs (installs
    // hold the state lock). main.cpp opens as many as the fabric gains from.
    uint32_t background_streams = 2;
    uint32_t faulting_chunk_pages = 64;           // background request size while faults arrive
    uint32_t faulting_depth = 2;                  // background requests in flight meanwhile
    std::chrono::microseconds fault_window{2000}; // faults are counted per window ...
    uint32_t faulting_threshold = 4;   // ... and this many mean "the application is faulting"
    uint32_t install_batch_pages = 32; // install background data once this many pages are verified
    // The background pulls a process's small areas first, smallest first:
    // areas up to early_area_pages, at most early_total_pages in all (see
    // background_pacer.hpp).
    uint32_t early_area_pages = uint32_t(small_area_bytes / page_size); // 16 MiB
    uint32_t early_total_pages = 16384;                                 // 64 MiB
    // Whether the main pass (the rest, in address order) starts at CRIU's
    // post-restore too, or only once the tasks run: until then
    // the bulk transfer takes the CPU from CRIU's last steps and the tasks'
    // first ones, inside the downtime.
    bool main_pass_before_resume = false;
    // CRIU says "restore finished" before its last steps; the daemon says
    // when the tasks run. Should it not, the main pass starts this long
    // after "restore finished" anyway.
    std::chrono::milliseconds tasks_run_wait{200};
    std::chrono::milliseconds fetch_deadline{10'000};
    // How long a handler waits for a background copy of a few pages to end
    // before it takes the process's uffd: longer means the copier is not
    // scheduled at all (times --deadline-scale: an emulated host is slow).
    std::chrono::milliseconds copy_quiet_wait{2'000};
    std::chrono::milliseconds progress_interval{200};
    std::chrono::microseconds spin{200}; // a handler polls a tcp channel this long for a reply
    uint32_t handlers = 0;               // handler threads (0: one per allowed CPU)
};

struct loop_stats {
    uint64_t pages_total = 0; // lazy pages of the restored processes
    uint64_t pages_faulted = 0;
    uint64_t pages_prefetched = 0;
    uint64_t pages_background = 0;
    uint64_t pages_zero = 0;
    uint64_t pages_absent = 0;  // holes on the source: left to the zero page, never fetched
    uint64_t pages_dropped = 0; // unmapped, removed, or owned by an exited process
    uint64_t pages_forked = 0;  // installed into children forked after restore
    uint64_t pages_refetched = 0;
    uint64_t pages_duplicate = 0; // arrived after the page was already installed
    // Installed from the pre-copy's staged copy, not fetched: by the local
    // pass (and a fault's successors), and for faults.
    uint64_t pages_precopied = 0;
    uint64_t pages_precopy_faulted = 0;
    uint64_t faults = 0;
    uint64_t events = 0;
    uint32_t processes = 0;
    [[nodiscard]] uint64_t pages_done() const noexcept {
        return pages_faulted + pages_prefetched + pages_background + pages_dropped + pages_absent +
               pages_precopied + pages_precopy_faulted;
    }
};

} // namespace ferry::lazy
