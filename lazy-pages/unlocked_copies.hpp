// Copies into a process without the state lock, and the guard that stops
// them.
//
// The background claims a slice of pages under the lock (replies.cpp checks
// them against the process's lazy map), copies them with UFFDIO_COPY
// without it, and takes the lock again to account for them. A handler then
// never waits for a background copy to get the state lock, and the
// background never waits for a handler's install to copy.
//
// The guard keeps that safe. Reading a uffd event releases the kernel's
// side of it: a discard (REMOVE) zaps its range right after, a mremap moves
// it, and the handler updates the lazy map only once the read returns. A
// copy running across the read could land after the zap and leave stale
// data where the application expects zeros. So a lock holder that reads a
// process's events, or closes its uffd, first asks the unlocked copies on
// that uffd to stop and waits for the one in progress. New ones are claimed
// only under the lock, so none starts meanwhile; copies go a few pages at a
// time, so the wait is one short copy.
#pragma once

#include "lazy_process.hpp"
#include "uffd_ops.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

namespace ferry::lazy {

// Pages per UFFDIO_COPY without the lock: what a guard may wait for.
inline constexpr uint32_t unlocked_copy_pages = 8;
// ... from the pre-copy's staged copy, which is local memory. A handler
// that reads a uffd waits for the copy in progress, and on this project's
// VM a page costs ~1.7 us to install (fresh guest memory), so the chunk is
// what a staged fault waits for: with 64 pages a Redis under load waited
// 56 us on average in a third of its uffd reads, with 16 pages 30 us, and
// its replies' p99 during the post-copy fell by about a fifth (about 16
// moves; lazy-pages/README.md). Below 16 the per-call cost stops paying.
inline constexpr uint32_t staged_copy_pages = 16;

// Contiguous pages of one reply, lazy when claimed.
struct unlocked_run {
    uint64_t addr = 0;
    const std::byte* data = nullptr;
    uint32_t first = 0; // the run's first page in its request
    uint32_t pages = 0;
    uint32_t copied = 0; // pages installed
    uffd::outcome result = uffd::outcome::done;
    int err = 0;
    [[nodiscard]] bool whole() const noexcept {
        return copied == pages && result == uffd::outcome::done;
    }
};

// Under the state lock: `p`'s copies may run without it until
// copy_without_lock ends them.
void begin_unlocked_copies(lazy_process& p) noexcept;

// How a copy without the lock is scheduled. At `idle` the copier drops to
// SCHED_IDLE between two copies, so that every thread of the host waiting
// to run goes first: the pre-copy's local pass installs a GiB while the
// application runs, and copying at the normal policy throughout, a waking
// application thread often waited out the copier's time slice (a loaded
// Redis's replies, p90 0.4 ms instead of 0.07). Each copy itself runs at
// the normal policy: it holds the VMA's lock and every guard's wait, and
// an idle-class copier preempted inside it held them until the host had
// nothing else to run (2026-12-07, a loaded Redis's pre-copy moves, 24 a
// side interleaved: its replies' p99 during the post-copy 362 -> 320 us,
// median). The copier returns at the normal policy.
enum class copy_policy { normal, idle };

// Without the lock, after begin_unlocked_copies: copies the runs in order,
// a few pages per UFFDIO_COPY, and ends at the first run that is not whole:
// a lock holder asked for quiet, or an outcome other than done. Ends the
// unlocked copies either way.
void copy_without_lock(lazy_process& p, std::span<unlocked_run> runs,
                       uint32_t pages_per_copy = unlocked_copy_pages,
                       copy_policy policy = copy_policy::normal) noexcept;

// Under the state lock: no copy runs without the lock on `p`'s uffd while
// this lives. A copier caught at the idle policy between two copies is
// raised to the normal one while the guard waits: on a busy host it might
// not run again for a long time otherwise. Throws if the copy in progress
// does not end within `wait`.
class quiet_copies {
  public:
    quiet_copies(lazy_process& p, std::chrono::milliseconds wait);
    ~quiet_copies();
    quiet_copies(const quiet_copies&) = delete;
    quiet_copies& operator=(const quiet_copies&) = delete;

  private:
    lazy_process& _p;
};

} // namespace ferry::lazy
