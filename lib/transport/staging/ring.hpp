// A bounded lock-free queue that lives in memory shared between processes
// (Vyukov's bounded MPMC design): any number of producers and consumers,
// fixed-size entries, no locks and no system calls. Each slot carries a
// sequence number; a producer claims a position with a CAS on `head` and
// publishes the slot with a release store of seq = pos + 1; a consumer
// claims with a CAS on `tail` once it acquires seq == pos + 1, and frees the
// slot for the next lap with seq = pos + Capacity.
//
// The object must be placed in shared memory and init() called once, before
// any other process maps it. std::atomic<uint64_t> is lock-free on x86-64,
// so it works across processes.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace ferry {

template <typename T, size_t Capacity>
struct shm_ring {
    static_assert((Capacity & (Capacity - 1)) == 0, "Capacity must be a power of two");
    static_assert(std::is_trivially_copyable_v<T>);
    static_assert(std::atomic<uint64_t>::is_always_lock_free);

    struct slot {
        std::atomic<uint64_t> seq;
        T value;
    };

    alignas(64) std::atomic<uint64_t> head; // next position to produce
    alignas(64) std::atomic<uint64_t> tail; // next position to consume
    alignas(64) slot slots[Capacity];

    void init() noexcept {
        head.store(0, std::memory_order_relaxed);
        tail.store(0, std::memory_order_relaxed);
        for (size_t i = 0; i < Capacity; i++)
            slots[i].seq.store(i, std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_release);
    }

    // Returns false when the ring is full.
    [[nodiscard]] bool try_push(const T& v) noexcept {
        uint64_t pos = head.load(std::memory_order_relaxed);
        for (;;) {
            slot& s = slots[pos & (Capacity - 1)];
            const uint64_t seq = s.seq.load(std::memory_order_acquire);
            const int64_t dif = int64_t(seq) - int64_t(pos);
            if (dif == 0) {
                if (head.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed))
                    break;
            } else if (dif < 0) {
                return false;
            } else {
                pos = head.load(std::memory_order_relaxed);
            }
        }
        slot& s = slots[pos & (Capacity - 1)];
        s.value = v;
        s.seq.store(pos + 1, std::memory_order_release); // pairs with the acquire in try_pop
        return true;
    }

    // Returns false when the ring is empty.
    [[nodiscard]] bool try_pop(T& out) noexcept {
        uint64_t pos = tail.load(std::memory_order_relaxed);
        for (;;) {
            slot& s = slots[pos & (Capacity - 1)];
            const uint64_t seq = s.seq.load(std::memory_order_acquire);
            const int64_t dif = int64_t(seq) - int64_t(pos + 1);
            if (dif == 0) {
                if (tail.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed))
                    break;
            } else if (dif < 0) {
                return false;
            } else {
                pos = tail.load(std::memory_order_relaxed);
            }
        }
        slot& s = slots[pos & (Capacity - 1)];
        out = s.value;
        s.seq.store(pos + Capacity,
                    std::memory_order_release); // pairs with the acquire in try_push
        return true;
    }

    [[nodiscard]] bool empty() const noexcept {
        return head.load(std::memory_order_acquire) == tail.load(std::memory_order_acquire);
    }
};

// A doorbell for a consumer that sleeps when idle: producers ring() after
// pushing; the consumer sleeps in wait() only after checking that nothing is
// pending. It is a futex on shared memory (not process-private).
struct shm_doorbell {
    std::atomic<uint32_t> rings;
    std::atomic<uint32_t> sleepers;

    void init() noexcept {
        rings.store(0, std::memory_order_relaxed);
        sleepers.store(0, std::memory_order_relaxed);
    }
    // Wakes the consumer if it sleeps; costs no system call otherwise.
    void ring() noexcept;
    // Sleeps until rung or `timeout_ns` passes, unless `pending()` already
    // holds once the consumer has announced that it sleeps.
    template <typename Pending>
    void wait(Pending&& pending, uint64_t timeout_ns) noexcept {
        const uint32_t seen = rings.load(std::memory_order_acquire);
        sleepers.fetch_add(1, std::memory_order_seq_cst);
        if (!pending())
            sleep(seen, timeout_ns);
        sleepers.fetch_sub(1, std::memory_order_relaxed);
    }

  private:
    void sleep(uint32_t seen, uint64_t timeout_ns) noexcept;
};

} // namespace ferry
