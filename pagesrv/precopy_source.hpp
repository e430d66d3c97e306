// Source side of a pre-copy (migrator --precopy). While the tree still
// runs, its memory goes to the destination's lazy-pages on a PRECOPY
// channel: every page present in its tracked areas, then, round after
// round, the pages written since the round before
// (lib/sys/write_tracker.hpp). At the freeze one last scan says which
// staged pages are what the frozen tasks hold (sent, not written since, and
// present); then the pages written in the last round go from the frozen
// tasks (up to precopy_final_round_pages), and a complete list follows.
// The destination installs the valid pages from its copy as soon as each
// list comes and fetches only the rest: pages of areas mapped after the
// attach, a last round over the bound, and the last round's pages touched
// before they arrive.
#pragma once

#include "core/range_map.hpp"
#include "sys/net.hpp"
#include "sys/write_tracker.hpp"
#include "wire/page_wire.hpp"

#include <spdlog/logger.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace ferry::pagesrv {

// At the freeze the pages written in the last round go too, up to this
// many (32 MiB, tens of ms on a fast link, so that the valid runs come
// before the destination resumes): they are what the workload touches
// most, and fetched one fault at a time they held a loaded Redis's replies
// back for the whole post-copy. Any more are fetched after the freeze.
inline constexpr uint64_t precopy_final_round_pages = 8192;

struct precopy_summary {
    std::string error; // why there is no pre-copy: nothing staged is used
    uint32_t rounds = 0;
    uint64_t tracked_pages = 0; // present in the tracked areas at the attach
    uint64_t pages_sent = 0;
    uint64_t last_round_pages = 0;
    uint64_t final_round_pages = 0; // sent after the freeze
    bool converged = false;         // the rounds stopped shrinking
    bool connected = false;         // the destination's channel came
};

// A frame's pages, read with others in one process_vm_readv and sent with
// them in one write (the pre-copy's rounds).
struct frame_piece {
    uint64_t at = 0;
    uint32_t pages = 0;
};
// Of pieces read in order by one process_vm_readv that returned `read`
// pages (it stops at the first page it cannot read): `frames` of them carry
// pages, the last perhaps only its start, and the next read begins after
// `done` of them (those, and a piece whose first page could not be read).
struct pieces_read {
    size_t frames = 0;
    size_t done = 0;
};
[[nodiscard]] pieces_read count_pieces_read(std::span<const frame_piece> pieces,
                                            uint64_t read) noexcept;

class precopy_source {
  public:
    // Rounds come at most this often: each scans every tracked page (~1 ms
    // per GiB) and sends what was written meanwhile.
    static constexpr auto default_round_interval = std::chrono::milliseconds(20);

    // Attaches a write tracker to every process of the tree rooted at
    // `root`, each within `bound`. Never throws: a tree none of whose
    // processes can be tracked gives a source whose summary says why.
    precopy_source(std::string id, pid_t root, std::string destination_identity,
                   std::chrono::milliseconds bound,
                   std::chrono::milliseconds round_interval = default_round_interval);
    ~precopy_source();
    precopy_source(const precopy_source&) = delete;
    precopy_source& operator=(const precopy_source&) = delete;

    [[nodiscard]] const std::string& id() const noexcept { return _id; }
    [[nodiscard]] const std::string& destination_identity() const noexcept { return _reader; }

    // Serves the destination's PRECOPY channel: the rounds, until freeze()
    // or stop(), then (frozen) the valid runs. After a stop() the trackers
    // are detached when it returns, else when this object goes (the
    // migration ended). One channel per migration; throws on I/O errors.
    void serve(net::stream& conn);
    // Waits up to `timeout` for the rounds to stop shrinking (or for the
    // pre-copy to end); the summary then.
    [[nodiscard]] precopy_summary wait_converged(std::chrono::milliseconds timeout);
    // The freeze is near (the migrator was told to go on): the rounds go on,
    // at the idle policy, until the tree's root is seen freezing (its
    // cgroup freezer, or CRIU's ptrace stop), checked before every frame:
    // what the last round at the freeze sends stays small, and no round
    // starts a read of the tasks' memory (their mmap lock) while CRIU works
    // on them. (Stopped here instead, a loaded Redis wrote ~2,000 pages
    // before its freeze, and their sending at the freeze slowed the
    // destination's restore on a shared machine; going on, 5-190.)
    void freeze_near() noexcept;
    // The tree is frozen: the round in progress stops, and the last scan
    // and the valid runs follow on the channel's thread.
    void freeze() noexcept;
    // The migration ended or was aborted: the channel is shut down and its
    // thread ends, detaching the trackers (the source may run on).
    void stop() noexcept;
    [[nodiscard]] precopy_summary summary() const;

  private:
    struct process {
        pid_t host_pid = 0;
        uint32_t image_pid = 0;
        std::unique_ptr<proc::write_tracker> tracker;
        range_map clean; // sent, and not written since (identity addresses)
    };
    enum class phase { rounds, rounds_until_freezing, frozen, stopped };

    // Sends the pages of `runs` of `p` in frames while the pre-copy is in
    // phase `while_in` (the rounds: either kind, and not once the tree
    // freezes); false once it left it (the freeze or a stop).
    bool send_runs(net::stream& conn, process& p, const std::vector<proc::page_run>& runs,
                   uint32_t round, uint64_t& sent, phase while_in);
    // Reads the pieces in `_batch` with one process_vm_readv and sends
    // them, a frame each, with one write; a piece that cannot be read is
    // skipped from there to its end (it is fetched after the freeze), and
    // the pieces after it go in the next read. Empties `_batch`.
    void send_batch(net::stream& conn, process& p, uint32_t round, uint64_t& sent);
    // Pages of every tracked area written since the last look, taken off
    // the clean sets; an area that cannot be scanned any more counts as
    // written whole and is tracked no more.
    void take_written(process& p, std::vector<proc::page_run>& out);
    void send_valid(net::stream& conn);
    void note_round(uint64_t pages);
    [[nodiscard]] phase current() const;
    [[nodiscard]] bool still_in(phase want) const;
    [[nodiscard]] static bool in_rounds(phase p) noexcept; // either kind
    void detach() noexcept;

    const std::string _id;
    const std::string _reader;
    const std::chrono::milliseconds _round_interval;
    pid_t _root;
    std::shared_ptr<spdlog::logger> _log;
    std::vector<process> _procs; // the channel's thread's alone once serving
    std::vector<std::byte> _buffer;
    std::vector<uint64_t> _checksums;
    std::vector<frame_piece> _batch;
    std::vector<wire::header_bytes> _headers;
    std::vector<iovec> _remote, _out;

    mutable std::mutex _mu;
    std::condition_variable _changed;
    phase _phase = phase::rounds;
    bool _serving = false;
    bool _served = false;
    bool _corrupted_once = false; // fault corrupt-precopy-page
    uint32_t _slow_shrinks = 0;   // rounds in a row that shrank by less than a fifth
    net::stream* _conn = nullptr; // while serving: stop() shuts it down
    precopy_summary _summary;
};

} // namespace ferry::pagesrv
