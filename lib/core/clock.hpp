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

// CPU time (user and system) of the calling thread, or of the whole
// process: what serving a migration costs a host, beside how long it took.
[[nodiscard]] inline uint64_t thread_cpu_ns() noexcept {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}
[[nodiscard]] inline uint64_t process_cpu_ns() noexcept {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

[[nodiscard]] inline double ns_to_ms(uint64_t ns) noexcept {
    return double(ns) / 1e6;
}
[[nodiscard]] inline double ns_to_us(uint64_t ns) noexcept {
    return double(ns) / 1e3;
}

} // namespace ferry
