#include "unlocked_copies.hpp"

#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/page.hpp"
#include "sys/sched_policy.hpp"

#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>

namespace ferry::lazy {

void begin_unlocked_copies(lazy_process& p) noexcept {
    p.unlocked_copies.fetch_add(1, std::memory_order_seq_cst);
}

namespace {

// Between two copies of an idle copier: at SCHED_IDLE for a moment, so that
// any thread of the host that is waiting to run goes first, and back at the
// normal policy for the next copy. A copy holds the VMA's lock and every
// guard's wait, which no idle-class thread should hold while preempted:
// the application's mmap writers and the handlers would wait until the
// host had nothing else to run.
void let_waiting_threads_run(idle_copier& self) noexcept {
    self.at_idle.store(true, std::memory_order_seq_cst);
    (void)proc::set_idle_policy(true); // best effort
    (void)proc::set_idle_policy(false);
    self.at_idle.store(false, std::memory_order_seq_cst);
}

// Copies one run a few pages at a time; false when the copies end here.
bool copy_run(const lazy_process& p, unlocked_run& run, uint32_t pages_per_copy,
              idle_copier* idle) noexcept {
    while (run.copied < run.pages) {
        // Seen before each copy: a guard that asked first waits for this
        // copy, one that asks later finds none started.
        if (p.quiet_wanted.load(std::memory_order_seq_cst) != 0)
            return false;
        const uint32_t n = std::min(pages_per_copy, run.pages - run.copied);
        const auto res =
            uffd::copy(p.uffd.get(), run.addr + uint64_t(run.copied) * page_size,
                       run.data + size_t(run.copied) * page_size, uint64_t(n) * page_size);
        run.copied += uint32_t(pages_in(res.bytes));
        if (res.result != uffd::outcome::done) {
            run.result = res.result;
            run.err = res.err;
            return false;
        }
        if (idle)
            let_waiting_threads_run(*idle);
    }
    return true;
}

} // namespace

void copy_without_lock(lazy_process& p, std::span<unlocked_run> runs, uint32_t pages_per_copy,
                       copy_policy policy) noexcept {
    // Registered first, so that a guard finds the copier whenever it is
    // at the idle policy.
    idle_copier* self = nullptr;
    if (policy == copy_policy::idle) {
        const pid_t tid = pid_t(::gettid());
        for (auto& slot : p.idle_copiers) {
            pid_t none = 0;
            if (slot.tid.compare_exchange_strong(none, tid, std::memory_order_seq_cst)) {
                self = &slot;
                break;
            }
        }
        // No free slot: its copies run without the idle moments between them.
    }
    for (unlocked_run& run : runs)
        if (!copy_run(p, run, pages_per_copy, self))
            break;
    if (self)
        self->tid.store(0, std::memory_order_seq_cst);
    p.unlocked_copies.fetch_sub(1, std::memory_order_seq_cst);
}

quiet_copies::quiet_copies(lazy_process& p, std::chrono::milliseconds wait) : _p(p) {
    _p.quiet_wanted.fetch_add(1, std::memory_order_seq_cst);
    if (_p.unlocked_copies.load(std::memory_order_seq_cst) == 0)
        return;
    // The copier stops after its current copy of a few pages, which it
    // runs at the normal policy. Between two copies it may be at the idle
    // one: raised here, on any look that finds it so. `wait` (2 s on real
    // hosts) means it is not being scheduled at all.
    const uint64_t give_up = monotonic_ns() + uint64_t(wait.count()) * 1'000'000;
    while (_p.unlocked_copies.load(std::memory_order_seq_cst) != 0) {
        for (const auto& copier : _p.idle_copiers) {
            const pid_t tid = copier.tid.load(std::memory_order_seq_cst);
            if (tid && copier.at_idle.load(std::memory_order_seq_cst))
                (void)proc::set_idle_policy(false, tid); // a thread gone is no matter
        }
        if (monotonic_ns() > give_up) {
            _p.quiet_wanted.fetch_sub(1, std::memory_order_seq_cst);
            throw error(fmt::format("a background copy into pid {} did not end within {} ms",
                                    _p.image_pid, wait.count()));
        }
        ::sched_yield();
    }
}

quiet_copies::~quiet_copies() {
    _p.quiet_wanted.fetch_sub(1, std::memory_order_seq_cst);
}

} // namespace ferry::lazy
