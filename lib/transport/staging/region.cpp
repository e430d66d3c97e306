#include "transport/staging/region.hpp"

#include "core/page.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ctime>

namespace ferry {

void shm_doorbell::ring() noexcept {
    rings.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers.load(std::memory_order_seq_cst) > 0)
        ::syscall(SYS_futex, &rings, FUTEX_WAKE, 1, nullptr, nullptr,
                  0); // shared futex: no PRIVATE flag
}

void shm_doorbell::sleep(uint32_t seen, uint64_t timeout_ns) noexcept {
    timespec ts{time_t(timeout_ns / 1'000'000'000), long(timeout_ns % 1'000'000'000)};
    ::syscall(SYS_futex, &rings, FUTEX_WAIT, seen, &ts, nullptr, 0);
}

namespace transport::staging {

region_geometry layout(uint64_t page_count) noexcept {
    region_geometry h{};
    h.page_count = page_count;
    h.ring_offset = page_size;
    h.states_offset = round_up(h.ring_offset + sizeof(request_ring), 64);
    h.checksums_offset = round_up(h.states_offset + page_count, 64);
    h.data_offset = round_up(h.checksums_offset + page_count * sizeof(uint64_t), page_size);
    h.total_size = h.data_offset + page_count * page_size;
    return h;
}

uint32_t region_view::staged_prefix(uint64_t first, uint32_t count) const noexcept {
    const std::atomic<uint8_t>* s = states() + first;
    uint32_t n = 0;
    while (n < count &&
           s[n].load(std::memory_order_acquire) == page_staged) // pairs with the stager's release
        n++;
    return n;
}

} // namespace transport::staging
} // namespace ferry
