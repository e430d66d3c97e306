// The destination's fault path: the loop and its threads. A handler per
// CPU reads uffd events (uffd_events.hpp) and fault replies (replies.hpp);
// a background thread pulls the rest once every lazy area is registered
// (CRIU at post-restore, or restore finished), paced by
// background_pacer.hpp. What they share is fault_state.hpp. Faults travel
// on their own channel and are always handled before background data.
#pragma once

#include "core/latency_recorder.hpp"
#include "core/unique_fd.hpp"
#include "criu/criu_image.hpp"
#include "fault_state.hpp"
#include "loop_config.hpp"
#include "transport/page_channel.hpp"
#include "uffd_events.hpp"

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

class fault_loop {
  public:
    using progress_fn = std::function<void(const loop_stats&)>;

    // One background stream per background channel (at least one).
    fault_loop(loop_config cfg, std::unique_ptr<page_channel> fault_channel,
               std::vector<std::unique_ptr<page_channel>> background_channels);
    ~fault_loop();

    // The socket CRIU's restore is connected on: "restore finished" arrives
    // there, and a hang-up before it means restore failed.
    void watch_restore(unique_fd criu_socket);
    // The socket to the daemon (not owned): "lazy areas ready" arrives there
    // when CRIU's restore reaches post-restore, and starts the background
    // pull of the small areas ahead of "restore finished", while the
    // migrator commits; "tasks run" starts the main pass.
    void watch_daemon(int daemon_socket);
    // Assume restore has finished (for tests without CRIU).
    void set_restore_finished() noexcept;

    void add_process(uint32_t image_pid, unique_fd uffd,
                     const std::vector<criu::lazy_range>& ranges);
    // The source's holes (transport/page_holes.hpp): applied once restore
    // has finished, a slice per background turn. Thread-safe.
    void post_holes(std::vector<page_hole> holes);
    // Before run(): the pre-copy's staged pages (staged_pages.hpp), which a
    // thread of its own installs once they are published and the lazy
    // areas registered, and faults take before fetching.
    void use_staged(const staged_pages& staged) noexcept { _s.staged = &staged; }
    void on_progress(progress_fn fn) { _progress = std::move(fn); }
    // Called with every uffd created by a FORK event.
    void on_new_uffd(uffd_fn fn) { _new_uffd = std::move(fn); }
    // Called once, under the loop's lock, when the main pass may start (the
    // tasks run: fault_state::main_pass_open), with how long after CRIU's
    // "restore finished" and whether the daemon said so.
    using main_pass_fn = std::function<void(uint64_t after_restore_finished_ns, bool told)>;
    void on_main_pass(main_pass_fn fn) { _main_pass = std::move(fn); }

    // Runs until every page is installed (or its process is gone). Throws
    // ferry::error on anything that must stop the migration.
    void run();
    // Tells the source that every page is in place, so it may end the dump.
    void announce_done();

    [[nodiscard]] const loop_stats& stats() const noexcept { return _s.stats; }
    [[nodiscard]] const latency_recorder& fault_latency() const noexcept {
        return _s.fault_latency;
    }
    // The first faults' timeline (first_faults.hpp), for the log.
    [[nodiscard]] const first_faults& first() const noexcept { return _s.first; }
    // The two halves of a fault's service time (see the README's budget).
    [[nodiscard]] const latency_recorder& fetch_latency() const noexcept {
        return _s.fetch_latency;
    }
    [[nodiscard]] const latency_recorder& install_latency() const noexcept {
        return _s.install_latency;
    }
    [[nodiscard]] uint64_t bytes_received() const noexcept;

  private:
    enum class source : uint8_t { uffd, fault_channel, criu_socket, daemon_socket, wake };

    void handler_main(size_t index);
    void poll_fault_replies(std::unique_lock<std::mutex>& lock);
    void lock_as_handler(std::unique_lock<std::mutex>& lock);
    void background_main(uint8_t stream);
    // The local pass over the staged pages (staged_installs.hpp).
    void staged_main();
    void receive_background(uint8_t stream);
    void lock_as_background(std::unique_lock<std::mutex>& lock);
    bool background_turn(uint8_t stream);
    void handle_criu_socket();
    void handle_daemon_socket();
    void stop_with(std::exception_ptr error) noexcept;
    void wake_all() noexcept;
    void epoll_add(int epoll, int fd, source src, uint32_t index);
    void epoll_add_all(int fd, source src, uint32_t index);
    void epoll_del_all(int fd);

    loop_config _cfg;
    std::unique_ptr<page_channel> _fault_ch;
    std::vector<std::unique_ptr<page_channel>> _bg_chs;
    // Per stream: the background reply being received (its thread's own).
    std::vector<incoming_reply*> _bg_replies;
    std::vector<int> _cpus;         // one handler thread per CPU
    std::vector<unique_fd> _epolls; // one per handler; each holds every uffd
    unique_fd _wake;                // eventfd that ends every handler's wait
    unique_fd _criu_sock;
    int _daemon_sock = -1;
    progress_fn _progress;
    uffd_fn _new_uffd;
    main_pass_fn _main_pass;
    bool _main_pass_started = false;
    // The state lock guards _s and what follows it.
    std::mutex _mu;
    fault_state _s;
    bool _stop = false;
    bool _polling = false; // a handler is polling the fault channel
    std::exception_ptr _error;
    uint64_t _last_progress_ns = 0;
    std::atomic<uint32_t> _handlers_waiting{0}; // the background yields the lock to them
};

} // namespace ferry::lazy
