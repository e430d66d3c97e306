// The wakes a handler owes the threads whose pages it installed under the
// state lock.
//
// A thread woken by UFFDIO_COPY usually runs on the handler's own CPU, and
// preempts the handler there; a handler preempted while it holds the lock
// stalls every other fault until the woken thread blocks again. Measured on
// 2026-12-01 (1 GiB touched once per page in random order over shm, on a
// 2-CPU AMD EPYC guest), the two handlers were preempted at least 73k times in
// ~87k faults. So installs under the lock copy without waking
// (UFFDIO_COPY_MODE_DONTWAKE) and owe the wake here; the handler wakes the
// threads once it has let the lock go.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

namespace ferry::lazy {

class owed_wakes {
  public:
    struct wake {
        int uffd = -1;
        uint64_t addr = 0;
        uint64_t len = 0;
        // The fault this wake serves, if any: its page, when it was read,
        // and (set by wake_taken) when its thread was woken. A fault's
        // service time ends at its wake, not at its copy.
        uint64_t fault_addr = ~0ull;
        uint64_t fault_ns = 0;
        uint64_t woken_ns = 0;
        [[nodiscard]] bool serves_fault() const noexcept { return fault_ns != 0; }
    };
    static constexpr size_t capacity = 64;
    using batch = std::array<wake, capacity>;

    // Under the lock: threads faulting in [addr, addr + len) may go on;
    // `fault_ns`, if not 0, is when the fault at `fault_addr` in it was
    // read. A range right after the last owed one joins it unless it serves
    // a fault of its own; when the list is full, every owed wake happens
    // now, under the lock (their faults' times are then not recorded).
    void owe(int uffd, uint64_t addr, uint64_t len, uint64_t fault_addr = ~0ull,
             uint64_t fault_ns = 0) noexcept;
    // Under the lock, before `uffd` closes: its owed wakes are dropped, and
    // no wake taken out of the lock (take) is left in progress, so none can
    // reach another file that reuses the descriptor. Throws if a wake in
    // progress does not end within 2 s.
    void forget(int uffd);
    // Under the lock: moves the owed wakes to `out` and returns their
    // count. The caller unlocks and then must call wake_taken.
    [[nodiscard]] size_t take(batch& out) noexcept;
    // Without the lock: wakes what take() moved out, stamping woken_ns.
    void wake_taken(std::span<wake> taken) noexcept;

    [[nodiscard]] size_t owed() const noexcept { return _n; }

  private:
    static void wake_now(std::span<wake> wakes) noexcept;

    batch _owed;
    size_t _n = 0;
    std::atomic<uint32_t> _waking{0}; // take() calls whose wakes are in progress
};

} // namespace ferry::lazy
