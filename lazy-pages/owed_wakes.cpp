#include "owed_wakes.hpp"

#include "core/clock.hpp"
#include "core/error.hpp"
#include "uffd_ops.hpp"

#include <sched.h>

#include <algorithm>

namespace ferry::lazy {

void owed_wakes::owe(int uffd, uint64_t addr, uint64_t len, uint64_t fault_addr,
                     uint64_t fault_ns) noexcept {
    if (len == 0)
        return;
    if (_n > 0 && fault_ns == 0) {
        wake& last = _owed[_n - 1];
        if (last.uffd == uffd && last.addr + last.len == addr) {
            last.len += len;
            return;
        }
    }
    if (_n == capacity) {
        // Rare (a burst of scattered installs): waking under the lock costs
        // the lock's hold, never a lost wake.
        wake_now(std::span(_owed).first(_n));
        _n = 0;
    }
    _owed[_n++] = wake{uffd, addr, len, fault_addr, fault_ns, 0};
}

void owed_wakes::forget(int uffd) {
    size_t kept = 0;
    for (size_t i = 0; i < _n; i++)
        if (_owed[i].uffd != uffd)
            _owed[kept++] = _owed[i];
    _n = kept;
    if (_waking.load(std::memory_order_seq_cst) == 0)
        return;
    // A waker holds no lock and makes a few ioctls: 2 s means it is not
    // being scheduled at all.
    const uint64_t give_up = monotonic_ns() + 2'000'000'000;
    while (_waking.load(std::memory_order_seq_cst) != 0) {
        if (monotonic_ns() > give_up)
            throw error("a wake of faulting threads did not end within 2 s");
        ::sched_yield();
    }
}

size_t owed_wakes::take(batch& out) noexcept {
    const size_t n = _n;
    if (n == 0)
        return 0;
    std::copy_n(_owed.begin(), n, out.begin());
    _n = 0;
    _waking.fetch_add(1, std::memory_order_seq_cst);
    return n;
}

void owed_wakes::wake_taken(std::span<wake> taken) noexcept {
    if (taken.empty())
        return;
    wake_now(taken);
    _waking.fetch_sub(1, std::memory_order_seq_cst);
}

void owed_wakes::wake_now(std::span<wake> wakes) noexcept {
    // A process that exited meanwhile answers with an error: nothing waits.
    for (wake& w : wakes) {
        (void)uffd::wake(w.uffd, w.addr, w.len);
        w.woken_ns = monotonic_ns();
    }
}

} // namespace ferry::lazy
