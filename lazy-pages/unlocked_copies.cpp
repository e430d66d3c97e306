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

// Copies one run a few pages at a time; false when the copies end here.
bool copy_run(const lazy_process& p, unlocked_run& run, uint32_t pages_per_copy) noexcept {
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
    }
    return true;
}

} // namespace

void copy_without_lock(lazy_process& p, std::span<unlocked_run> runs, uint32_t pages_per_copy,
                       copy_policy policy) noexcept {
    // Registered before the policy drops, so that a guard that sees this
    // copy running can always raise it.
    std::atomic<pid_t>* slot = nullptr;
    if (policy == copy_policy::idle) {
        const pid_t self = pid_t(::gettid());
        for (auto& s : p.idle_copiers) {
            pid_t none = 0;
            if (s.compare_exchange_strong(none, self, std::memory_order_seq_cst)) {
                slot = &s;
                break;
            }
        }
        if (slot)                              // no free slot: the copy stays at the normal policy
            (void)proc::set_idle_policy(true); // best effort
    }
    for (unlocked_run& run : runs)
        if (!copy_run(p, run, pages_per_copy))
            break;
    if (slot) {
        (void)proc::set_idle_policy(false);
        slot->store(0, std::memory_order_seq_cst);
    }
    p.unlocked_copies.fetch_sub(1, std::memory_order_seq_cst);
}

quiet_copies::quiet_copies(lazy_process& p, std::chrono::milliseconds wait) : _p(p) {
    _p.quiet_wanted.fetch_add(1, std::memory_order_seq_cst);
    if (_p.unlocked_copies.load(std::memory_order_seq_cst) == 0)
        return;
    // The copier stops after its current copy of a few pages, at the
    // normal policy (raised here, again on every look: it may drop to idle
    // after a look); `wait` (2 s on real hosts) means it is not being
    // scheduled at all.
    const uint64_t give_up = monotonic_ns() + uint64_t(wait.count()) * 1'000'000;
    while (_p.unlocked_copies.load(std::memory_order_seq_cst) != 0) {
        for (const auto& copier : _p.idle_copiers)
            if (const pid_t tid = copier.load(std::memory_order_seq_cst))
                (void)proc::set_idle_policy(false, tid); // a thread gone is no matter
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
