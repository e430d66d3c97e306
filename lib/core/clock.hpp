// Time stamps. Monotonic for durations inside one process or host; realtime
// only where two hosts' clocks must be compared.
#pragma once

#include <time.h>

#include <cstdint>

namespace ferry {

[[nodiscard]] inline uint64_t monotonic_ns() noexcept {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

[[nodiscard]] inline double ns_to_ms(uint64_t ns) noexcept {
    return double(ns) / 1e6;
}
[[nodiscard]] inline double ns_to_us(uint64_t ns) noexcept {
    return double(ns) / 1e3;
}

} // namespace ferry
