// What the fault path's threads share (fault_loop.cpp): the restored
// processes, the requests in flight, the account. Every member is guarded by
// the loop's state lock; nothing here allocates in steady state.
#pragma once

#include "background_pacer.hpp"
#include "core/latency_recorder.hpp"
#include "first_faults.hpp"
#include "lazy_process.hpp"
#include "loop_config.hpp"
#include "request_ring.hpp"
#include "staged_pages.hpp"
#include "transport/page_channel.hpp"
#include "transport/page_holes.hpp"

#include <functional>
#include <memory>
#include <vector>

namespace ferry::lazy {

// A background stream: a channel of its own and its requests in flight,
// answered in order. One thread per stream (fault_loop.cpp) issues its
// requests, receives its replies and installs them; the stream's ring is
// pushed and popped by that thread alone (under the state lock), so it may
// read the front outside the lock while it receives. Handlers read the
// fronts under the lock, for deadlines.
struct background_stream {
    explicit background_stream(page_channel& c) noexcept : ch(c) {}
    page_channel& ch;
    request_ring<16> reqs;
};

struct fault_state {
    // At least one background channel; their number is fixed from here on.
    fault_state(const loop_config& c, page_channel& fault,
                const std::vector<page_channel*>& background)
        : cfg(c), fault_ch(fault), pacer(c) {
        bg.reserve(background.size());
        for (page_channel* ch : background)
            bg.emplace_back(*ch);
    }

    const loop_config& cfg;
    page_channel& fault_ch; // faults travel alone, ahead of background data
    request_ring<256> fault_reqs;
    std::vector<background_stream> bg;
    std::vector<std::unique_ptr<lazy_process>> procs;
    size_t bg_next_proc = 0;
    // The pre-copy's staged pages (null without one), and the local pass
    // over them: the next process it looks at, and whether it is over (the
    // background streams then stop skipping staged pages).
    const staged_pages* staged = nullptr;
    size_t staged_next_proc = 0;
    bool staged_pass_over = false;
    uint32_t staged_publications_seen = 0; // the lists the pass has started over for
    // What the background streams leave to the local pass: null once it is
    // over, or while nothing staged is published.
    [[nodiscard]] const staged_pages* staged_for_background() const noexcept {
        return staged && !staged_pass_over && staged->ready() ? staged : nullptr;
    }
    uint64_t next_request_id = 1;
    bool restore_finished = false;
    uint64_t restore_finished_ns = 0;
    // CRIU's "restore finished" comes before it stops each task at its
    // rt_sigreturn, unmaps the restorer and detaches: the tasks run only
    // once the daemon says so (when one is watched: expect_tasks_run).
    bool expect_tasks_run = false;
    bool tasks_run = false;
    // The daemon said CRIU reached post-restore: every task's lazy areas are
    // registered with its uffd, ahead of "restore finished".
    bool areas_registered = false;
    // Pages may go in without a fault: the background and the holes start.
    [[nodiscard]] bool lazy_areas_ready() const noexcept {
        return restore_finished || areas_registered;
    }
    // The main pass (the large areas, and their holes from the source) may
    // start: the tasks run, or the daemon was silent for cfg.tasks_run_wait.
    [[nodiscard]] bool main_pass_open(uint64_t now) const noexcept;
    loop_stats stats;
    latency_recorder fault_latency;
    latency_recorder fetch_latency{1u << 18};
    latency_recorder install_latency{1u << 18};
    first_faults first; // the first faults' timeline, for the log
    background_pacer pacer;
    // The source's holes, as they arrived, and how many have been applied
    // (holes.hpp): the background applies them in slices once restore is over.
    std::vector<page_hole> holes;
    size_t holes_applied = 0;
    // The loop's epoll sets: a uffd joins every handler's (as process
    // `index`), or leaves them.
    std::function<void(int uffd, uint32_t index)> watch_uffd;
    std::function<void(int uffd)> unwatch_uffd;

    // A new process (restored, or forked after restore) joins the loop.
    lazy_process& add(std::unique_ptr<lazy_process> p);
    // Sends a request and records it in flight: a fault's on the fault
    // channel, a background one on background stream `stream`.
    void issue(request_kind kind, lazy_process& p, uint64_t addr, uint64_t img_addr,
               uint32_t nr_pages, uint64_t fault_addr, uint64_t fault_ns, uint8_t attempt,
               uint8_t stream = 0);
    // The process exited: its lazy pages are dropped, its uffd forgotten.
    void process_gone(lazy_process& p);
    // [start, end) of `p` is no longer the migration's to fill (discarded,
    // unmapped or replaced): dropped from the lazy and in-flight maps, and
    // threads blocked there woken to retry their access.
    void range_gone(lazy_process& p, uint64_t start, uint64_t end);
    // Throws if the oldest request of either kind has waited too long: a
    // page that cannot be served never turns into a zero page.
    void check_deadlines() const;
    // Every page installed (or its process gone), nothing in flight.
    [[nodiscard]] bool finished() const noexcept;
};

} // namespace ferry::lazy
