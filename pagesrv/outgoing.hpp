// Source role: one outgoing migration. The dumped tasks stay frozen with
// their memory intact until CRIU's lazy dump ends, so lazy pages are read
// straight from them with process_vm_readv, guided by the pagemap images.
#pragma once

#include "criu/criu_deadlines.hpp"
#include "criu/criu_image.hpp"
#include "frozen_vmas.hpp"
#include "pool_push.hpp"
#include "transport/backend.hpp"
#include "transport/page_holes.hpp"
#include "transport/page_source.hpp"
#include "wire/page_wire.hpp"

#include <spdlog/logger.h>
#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ferry::pagesrv {

class outgoing_migration final : public transport::page_source {
  public:
    enum class state : uint8_t {
        registered, // frozen; an abort resumes the source
        committed,  // the destination may resume: the source must never run again
        finished,   // CRIU's dump closed; the source tasks are gone
        aborted,    // the source tasks were resumed
    };

    // Reads the images and maps image pids to host pids. Throws on failure.
    // `fabric`'s backend gets `prepared`, what it did before the freeze, and
    // starts serving (transport/backend.hpp). `deadline_scale` multiplies
    // every deadline on CRIU (criu::deadlines).
    outgoing_migration(std::string id, const std::filesystem::path& images_dir, pid_t root_pid,
                       uint16_t criu_port, const transport::backend& fabric,
                       std::unique_ptr<transport::source_state> prepared,
                       double deadline_scale = 1.0);
    ~outgoing_migration() override;

    [[nodiscard]] const std::string& id() const noexcept override { return _id; }
    [[nodiscard]] spdlog::logger& log() const noexcept { return *_log; }
    [[nodiscard]] const criu::lazy_page_index& lazy_pages() const noexcept override {
        return _index;
    }
    [[nodiscard]] uint64_t pages_total() const noexcept { return _pages_total; }
    [[nodiscard]] uint32_t processes() const noexcept { return uint32_t(_procs.size()); }

    // Reads the pages of one request into `pages` and their checksums into
    // `checksums`. Safe to call from several channel threads at once.
    [[nodiscard]] wire::status read_pages(const wire::page_request& r, std::byte* pages,
                                          uint64_t* checksums) override;
    void count_sent(uint64_t pages, uint64_t bytes) noexcept override;
    void count_cpu(uint64_t ns) noexcept override { _serve_cpu_ns += ns; }
    // The destination reported every page installed.
    void destination_done() override;
    void destination_discarded() override;
    [[nodiscard]] double deadline_scale() const noexcept override { return _deadline_scale; }

    // CRIU read the VMA flags before the freeze: `reader` reads them from
    // the frozen tree, and the commit compares. Set once, before commit.
    void check_vma_flags_with(std::unique_ptr<frozen_vma_reader> reader);
    // Empty if the commit may go ahead: no check was asked for, or the
    // images' VMA flags match the frozen tree's. Else why not. Bounded.
    [[nodiscard]] std::string vma_flags_problem();

    // State changes; each returns false when the current state forbids it.
    bool commit();
    // Ends CRIU's dump with CLOSE (the frozen tasks die). Requires committed.
    // If CRIU does not take CLOSE, it is killed and so are the tasks: the
    // destination runs the workload. Throws if the tasks cannot be ended.
    // Returns what had to be done when CRIU did not take CLOSE (else empty).
    std::string finish();
    // Makes CRIU resume the frozen tasks. Refused once committed, unless the
    // destination's restore is known to have failed before its tasks ran.
    // A CRIU that does not take the abort in time is killed and the tasks
    // released (lib/workload_release.hpp); `criu_gone`: the migrator did
    // that already. Bounded.
    bool abort(const std::string& reason, bool destination_never_ran = false,
               bool criu_gone = false);

    [[nodiscard]] state current_state() const;
    // True once the destination reports every page installed, within
    // `timeout`; false at once after abandon() or an abort.
    [[nodiscard]] bool wait_destination_done(std::chrono::milliseconds timeout);
    // When the destination reported every page installed, if it has.
    [[nodiscard]] std::optional<std::chrono::steady_clock::time_point> destination_done_at() const;
    // The daemon stops: nothing waits for the destination any more (its
    // page channels are shut down, so its report can no longer come).
    void abandon();
    [[nodiscard]] bool abandoned() const;

    // A destination's channel (its connection's socket) while a thread
    // serves it: an abort shuts the socket down, so that the thread ends and
    // lets go of this migration at once, whatever it waits on. Empty (not
    // held) when the migration was aborted already: refuse the channel.
    class channel_hold {
      public:
        channel_hold() = default;
        channel_hold(outgoing_migration* m, int fd) : _m(m), _fd(fd) {}
        channel_hold(channel_hold&& o) noexcept : _m(std::exchange(o._m, nullptr)), _fd(o._fd) {}
        channel_hold& operator=(channel_hold&&) = delete;
        ~channel_hold();
        [[nodiscard]] explicit operator bool() const noexcept { return _m != nullptr; }

      private:
        outgoing_migration* _m = nullptr;
        int _fd = -1;
    };
    [[nodiscard]] channel_hold hold_channel(int fd);
    [[nodiscard]] uint64_t pages_served() const noexcept { return _pages_served; }

    // The runs of lazy pages that do not exist in the frozen tasks (they
    // read as zeros; CRIU records lazy VMAs whole, criu-patches/0006): the
    // small areas' from the commit on, the others once the destination
    // asks (scan_holes_now), after its restore has finished.
    struct holes_result {
        bool done = false;
        std::string unknown; // why the scan could not tell: then no holes
        std::vector<page_hole> holes;
        uint64_t pages = 0, scan_ns = 0;
    };
    // Lets the scan go on to the large areas, if the migration committed
    // (false if not).
    bool scan_holes_now();
    // The small areas' holes, waiting up to `timeout` (done false if not
    // over).
    [[nodiscard]] holes_result wait_small_holes(std::chrono::milliseconds timeout);
    // The other areas' holes, likewise.
    [[nodiscard]] holes_result wait_holes(std::chrono::milliseconds timeout);

    // Pool mode: starts pushing every lazy page into the pool (once).
    void start_pool_push(const pool::pool_spec& spec);
    // Waits up to `timeout` for the push (nullopt if it is not over); an
    // error result if none was started.
    std::optional<push_result> wait_pool_push(std::chrono::milliseconds timeout);
    // The destination has every page: stops the push and drops what it
    // stored. Bounded by the push's current batch.
    void cancel_pool_push() noexcept;

    // The fabric's backend and what it keeps for this migration.
    [[nodiscard]] const transport::backend& fabric() const noexcept { return _fabric; }
    [[nodiscard]] transport::source_state* fabric_state() const noexcept {
        return _fabric_state.get();
    }
    [[nodiscard]] uint64_t bytes_sent() const noexcept { return _bytes_sent; }
    // CPU time of the threads that served the pages (page channels, shm
    // stager), as they last reported it.
    [[nodiscard]] uint64_t serve_cpu_ns() const noexcept { return _serve_cpu_ns; }

    // Who may read the pages, and how. Set once, before the migration is
    // findable: the migration id is not a bearer secret.
    struct access_grant {
        std::string destination_identity; // the destination daemon's certificate name
        bool plaintext_pages = false;     // --insecure-plaintext-pages
    };
    void grant(access_grant g) { _access = std::move(g); }
    [[nodiscard]] const access_grant& access() const noexcept { return _access; }

  private:
    pool_pusher* pusher(); // null until start_pool_push
    access_grant _access;
    struct process {
        pid_t host_pid = 0;
        std::vector<criu::lazy_range> lazy; // sorted, immutable after construction
    };
    [[nodiscard]] bool is_lazy(const process& p, uint64_t start, uint64_t end) const noexcept;
    void scan_holes();
    [[nodiscard]] holes_result scan_areas(bool small) const;
    void resume_source();

    const std::string _id;
    std::shared_ptr<spdlog::logger> _log; // every line names the migration
    const pid_t _root_pid;
    const uint16_t _criu_port;
    std::map<uint32_t, process> _procs; // by image pid; immutable after construction
    // Every dumped process's VMAs, by host pid, for the VMA flags check.
    std::map<pid_t, std::vector<criu::vma>> _dumped_vmas;
    std::unique_ptr<frozen_vma_reader> _vma_reader;
    criu::lazy_page_index _index; // the same lazy pages, numbered
    uint64_t _pages_total = 0;
    criu::deadlines _deadlines;
    double _deadline_scale = 1.0;
    std::atomic<uint64_t> _pages_served{0};
    std::atomic<uint64_t> _bytes_sent{0};
    std::atomic<uint64_t> _serve_cpu_ns{0};
    std::atomic<bool> _corrupted_once{false}; // fault injection only

    mutable std::mutex _mutex;
    std::condition_variable _changed;
    state _state = state::registered;
    std::vector<int> _channel_fds; // under _mutex: the channels being served
    const transport::backend& _fabric;
    std::mutex _holes_mutex;
    std::condition_variable _holes_scanned;
    holes_result _small_holes, _holes;
    bool _scan_rest = false, _holes_stop = false;

    // Declared last: their threads read from this object.
    std::thread _holes_thread;
    std::unique_ptr<transport::source_state> _fabric_state;
    std::unique_ptr<pool_pusher> _pusher;
    // When the destination reported every page installed.
    std::optional<std::chrono::steady_clock::time_point> _destination_done_at;
    bool _abandoned = false;
};

} // namespace ferry::pagesrv
