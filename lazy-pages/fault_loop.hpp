// The destination's fault path: one epoll loop that reads uffd events,
// requests pages, verifies and installs them, and pulls the rest in the
// background once restore has finished. Faults travel on their own channel
// and are always handled before background data.
#pragma once

#include "core/latency_recorder.hpp"
#include "core/unique_fd.hpp"
#include "criu/criu_image.hpp"
#include "lazy_process.hpp"
#include "request_ring.hpp"
#include "transport/page_channel.hpp"

#include <linux/userfaultfd.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ferry::lazy {

struct loop_config {
    uint32_t fault_window_pages = 4; // pages per fault (the faulting one and its successors) ...
    uint32_t max_window_pages = 64;  // ... growing to this while the access is sequential
    uint32_t background_chunk_pages = 256;        // 1 MiB per background request
    uint32_t background_depth = 2;                // background requests in flight
    uint32_t faulting_chunk_pages = 16;           // background request size while faults arrive
    std::chrono::microseconds fault_window{2000}; // faults are counted per window ...
    uint32_t faulting_threshold = 4;   // ... and this many mean "the application is faulting"
    uint32_t install_batch_pages = 32; // install background data as it arrives, in runs this long
    std::chrono::milliseconds fetch_deadline{10'000};
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
    uint64_t pages_dropped = 0; // unmapped, removed, or owned by an exited process
    uint64_t pages_forked = 0;  // installed into children forked after restore
    uint64_t pages_refetched = 0;
    uint64_t pages_duplicate = 0; // arrived after the page was already installed
    uint64_t faults = 0;
    uint64_t events = 0;
    uint32_t processes = 0;
    [[nodiscard]] uint64_t pages_done() const noexcept {
        return pages_faulted + pages_prefetched + pages_background + pages_dropped;
    }
};

class fault_loop {
  public:
    using progress_fn = std::function<void(const loop_stats&)>;
    using uffd_fn = std::function<void(int uffd)>;

    fault_loop(loop_config cfg, std::unique_ptr<page_channel> fault_channel,
               std::unique_ptr<page_channel> background_channel);
    ~fault_loop();

    // The socket CRIU's restore is connected on: "restore finished" arrives
    // there, and a hang-up before it means restore failed.
    void watch_restore(unique_fd criu_socket);
    // Assume restore has finished (for tests without CRIU).
    void set_restore_finished() noexcept;

    void add_process(uint32_t image_pid, unique_fd uffd,
                     const std::vector<criu::lazy_range>& ranges);
    void on_progress(progress_fn fn) { _progress = std::move(fn); }
    // Called with every uffd created by a FORK event.
    void on_new_uffd(uffd_fn fn) { _new_uffd = std::move(fn); }

    // Runs until every page is installed (or its process is gone). Throws
    // ferry::error on anything that must stop the migration.
    void run();
    // Tells the source that every page is in place, so it may end the dump.
    void announce_done();

    [[nodiscard]] const loop_stats& stats() const noexcept { return _stats; }
    [[nodiscard]] const latency_recorder& fault_latency() const noexcept { return _fault_latency; }
    // The two halves of a fault's service time (see the README's budget).
    [[nodiscard]] const latency_recorder& fetch_latency() const noexcept { return _fetch_latency; }
    [[nodiscard]] const latency_recorder& install_latency() const noexcept {
        return _install_latency;
    }
    [[nodiscard]] uint64_t bytes_received() const noexcept;

  private:
    enum class source : uint8_t { uffd, fault_channel, criu_socket, wake };

    void handler_main(size_t index);
    void lock_as_handler(std::unique_lock<std::mutex>& lock);
    void background_main();
    void stop_with(std::exception_ptr error) noexcept;

    // Event handling: one function per uffd event type.
    void drain_uffd(lazy_process& p);
    void handle_pagefault(lazy_process& p, const uffd_msg& msg);
    void handle_fork(lazy_process& p, const uffd_msg& msg);
    void handle_remap(lazy_process& p, const uffd_msg& msg);
    void handle_remove(lazy_process& p, const uffd_msg& msg);
    void prefetch_strided(lazy_process& p, uint64_t addr, int64_t stride_pages, uint32_t count);
    void handle_criu_socket();

    // Replies.
    void drain_channel(page_channel& ch, request_kind kind, size_t budget);
    void consume_pages(outstanding_request& req, const incoming_reply& reply, uint32_t upto);
    void install_run(outstanding_request& req, const std::byte* data, uint32_t first,
                     uint32_t count);
    void finish_request(const outstanding_request& req);

    // Requests.
    void issue(request_kind kind, lazy_process& p, uint64_t addr, uint64_t img_addr,
               uint32_t nr_pages, uint64_t fault_addr, uint64_t fault_ns, uint8_t attempt);
    void pump_background();
    bool next_background_run(lazy_process& p, uint64_t& addr, uint64_t& img, uint32_t& n);

    void process_gone(lazy_process& p);
    void check_deadlines();
    [[nodiscard]] bool finished() const noexcept;
    [[nodiscard]] bool faulting() const noexcept;
    void note_fault(uint64_t now) noexcept;
    void epoll_add(int epoll, int fd, source src, uint32_t index);
    void epoll_add_all(int fd, source src, uint32_t index);
    void epoll_del_all(int fd);

    loop_config _cfg;
    std::unique_ptr<page_channel> _fault_ch;
    std::unique_ptr<page_channel> _bg_ch;
    request_ring<256> _fault_reqs;
    request_ring<16> _bg_reqs;
    // Everything below is guarded by _mu, except what is set up before run().
    std::mutex _mu;
    std::vector<int> _cpus;         // one handler thread per CPU
    std::vector<unique_fd> _epolls; // one per handler; each holds every uffd
    unique_fd _wake;                // eventfd that ends every handler's wait
    bool _stop = false;
    bool _polling = false;                      // a handler is polling the fault channel
    std::atomic<uint32_t> _handlers_waiting{0}; // the background yields the lock to them
    std::exception_ptr _error;
    unique_fd _criu_sock;
    bool _restore_finished = false;
    std::vector<std::unique_ptr<lazy_process>> _procs;
    size_t _bg_next_proc = 0;
    uint64_t _next_request_id = 1;
    loop_stats _stats;
    latency_recorder _fault_latency;
    latency_recorder _fetch_latency{1u << 18};
    latency_recorder _install_latency{1u << 18};
    progress_fn _progress;
    uffd_fn _new_uffd;
    uint64_t _last_progress_ns = 0;
    uint64_t _window_start_ns = 0;
    uint32_t _window_faults = 0;
    uint64_t _busy_until_ns = 0;
};

} // namespace ferry::lazy
