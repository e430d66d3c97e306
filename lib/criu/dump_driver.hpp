// Who runs the source's lazy dump. For a bare process tree Ferry speaks CRIU's
// RPC itself (criu_dump); under a container engine the engine's own checkpoint
// runs it, made lazy by Ferry's runc shim (engine_dump). Either way CRIU
// freezes the tasks, writes every image but lazy page contents, and keeps
// them frozen with its page server on 127.0.0.1:port until CLOSE or an abort.
//
// Every wait on CRIU is bounded (criu::deadlines). A wait that runs out
// marks the dump as stuck: from then on nothing waits on CRIU again, and the
// way out is migration's release (lib/workload_release.hpp).
#pragma once

#include "core/error.hpp"
#include "criu/criu_deadlines.hpp"

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ferry::criu {

// A file the destination needs besides CRIU's images (an engine's config,
// a container's writable-layer changes). Sent as "engine.<name>".
struct engine_file {
    std::string name;
    std::vector<uint8_t> data;
};

// What every dump is given.
struct dump_settings {
    std::string criu = "criu";                       // the binary (host_tools::criu)
    int log_level = 2;                               // host_tools::criu_log_level
    std::optional<std::filesystem::path> plugin_dir; // Ferry's CRIU plugin, if installed
    deadlines limits;
    // Extra lines for CRIU's config file (e.g. "tcp-close\n").
    std::string criu_options;
    // The tree's TCP connections move with it (criu_options holds
    // tcp-established): an engine's checkpoint command is told so too.
    bool tcp_established = false;
    // CRIU locks the dumped network namespace with nftables (the destination
    // can restore that). Ferry's own RPC dump puts it in the request, an
    // engine's runc gets it as a config line: CRIU 4.1.1 crashes on
    // network-lock in an RPC config file (config.c reads argv[optind]).
    bool network_lock_nftables = false;
    // CRIU locks nothing (lazy_dump_features::network_lock_skip); wins over
    // nftables.
    bool network_lock_skip = false;
    // Environment entries for CRIU (e.g. "CRIU_FAULT=130"); an engine's runc
    // gets them through the shim.
    std::vector<std::string> criu_env;
    // The destination can start its engine's restore before the freeze: an
    // engine dump that can holds before the freeze for it (wait_held).
    bool warm_destination = false;
    // Whether the waits on CRIU should end early (the operator asked to stop,
    // or the source daemon gave up on the migrator), until
    // ignore_interrupts(). Polled at least every 200 ms by every wait, so
    // the migrator's heartbeat goes from it too. Must not throw.
    std::function<bool()> interrupted = [] { return false; };
};

// Moments of a dump on this host's monotonic clock, ns.
struct dump_times {
    uint64_t freeze = 0; // the tasks stop (or the best estimate of it)
    uint64_t dumped = 0; // every image is written
};

// CRIU did not answer within its deadline.
class criu_timeout : public error {
  public:
    using error::error;
};

class dump_driver {
  public:
    virtual ~dump_driver() = default;
    // Starts the freeze; CRIU's page server will listen on 127.0.0.1:port.
    virtual void start(uint16_t port) = 0;
    // A dump that holds before the freeze so that the destination can start
    // its restore first (an engine whose checkpoint writes the container's
    // configuration before its runc starts): until it holds, at most
    // `bound`; returns that configuration. Empty: this dump does not hold.
    // Throws if the dump ended or did not hold in time.
    virtual std::vector<engine_file> wait_held(std::chrono::milliseconds /*bound*/) { return {}; }
    // What the destination starts a warm restore from, for a dump that
    // cannot hold before the freeze (docker pauses the container before its
    // runc starts): read before start(). Empty: none, or the dump holds.
    [[nodiscard]] virtual std::vector<engine_file> configuration_before_start() const { return {}; }
    // A held dump goes on to the freeze.
    virtual void release_hold() {}
    // A dump started with a hold that was never released: it is refused
    // and ends before anything froze, within `bound`. False if this dump
    // was released (or never holds).
    virtual bool refuse_hold(std::chrono::milliseconds /*bound*/) noexcept { return false; }
    // Until every image is written. Throws if the dump failed (then CRIU
    // has resumed the tasks), or criu_timeout.
    virtual dump_times wait_dumped() = 0;
    [[nodiscard]] virtual std::filesystem::path images_dir() const = 0;
    // What else the destination needs, gathered while the tasks are frozen.
    virtual std::vector<engine_file> engine_files() { return {}; }
    // While the migrator waits on something else: an fd that turns readable
    // when the dump has news (-1: none expected), and its handler, which
    // throws if the dump ended by itself.
    [[nodiscard]] virtual int event_fd() const = 0;
    virtual void on_event() = 0;
    // Until CRIU's page server listens (CLOSE and aborts go through it), at
    // most `bound`; throws criu_timeout.
    virtual void wait_page_server(std::chrono::milliseconds bound) = 0;
    [[nodiscard]] virtual bool page_server_ready() const = 0;
    // While the migrator waits on the local daemon's abort: answers what
    // CRIU asks meanwhile, at once (its network-unlock notification, for a
    // namespace it locked: CRIU waits for the answer, the daemon for CRIU
    // to end). Never blocks, never throws.
    virtual void answer_notifications() noexcept {}
    // After CLOSE or an abort: until the dump is over, at most `bound`. True
    // if it succeeded; false if it failed or did not end (then stuck()).
    virtual bool wait_end(std::chrono::milliseconds bound) = 0;
    // Why the dump failed, once wait_end said so.
    [[nodiscard]] virtual std::string end_error() const = 0;
    // The dump ended by itself (it failed, and CRIU resumed the tasks).
    [[nodiscard]] virtual bool ended() const = 0;
    // A deadline on CRIU ran out: do not wait on it again.
    [[nodiscard]] virtual bool stuck() const = 0;
    // CRIU processes this driver started itself (others are found by the
    // migration id).
    [[nodiscard]] virtual std::vector<pid_t> criu_pids() const { return {}; }
    // After CRIU was killed: collects what is left (reaps the child, waits a
    // bounded time for the engine's command). Never throws.
    virtual void after_criu_killed() noexcept = 0;
    // After the destination has taken over and the dump has ended: removes
    // what is left of the source (a container's record). False if it could not.
    virtual bool remove_source() { return true; }

    // From the abort on, an interrupt no longer cuts waits short: the abort
    // itself must finish (it is bounded).
    void ignore_interrupts() noexcept { _interrupts_ignored = true; }

  protected:
    explicit dump_driver(std::function<bool()> interrupted)
        : _interrupt_requested(std::move(interrupted)) {}
    [[nodiscard]] bool interrupted() const {
        return !_interrupts_ignored && _interrupt_requested && _interrupt_requested();
    }

  private:
    std::function<bool()> _interrupt_requested;
    bool _interrupts_ignored = false;
};

// Bare process tree: CRIU's RPC (criu swrk), images in `dir` (rpc_dump.cpp).
std::unique_ptr<dump_driver> make_rpc_dump(pid_t pid, const std::filesystem::path& dir,
                                           const std::string& migration_id,
                                           const dump_settings& settings);

// The last line of a CRIU log, to say where it stopped.
std::string last_log_line(const std::filesystem::path& log);

} // namespace ferry::criu
