// Time stamps. Monotonic for durations inside one process or host; realtime
// only where two hosts' clocks must be compared.
#pragma once

#include <time.h>

#include <cstdint>

namespace ferry {

[[nodiscard]] inline uint64_t clock_ns(clockid_t clock) noexcept {
    timespec ts;
    clock_gettime(clock, &ts);
    return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

[[nodiscard]] inline uint64_t monotonic_ns() noexcept {
    return clock_ns(CLOCK_MONOTONIC);
}

// CPU time (user and system) of the calling thread, or of the whole
// process: what serving a migration costs a host, beside how long it took.
[[nodiscard]] inline uint64_t thread_cpu_ns() noexcept {
    return clock_ns(CLOCK_THREAD_CPUTIME_ID);
}
[[nodiscard]] inline uint64_t process_cpu_ns() noexcept {
    return clock_ns(CLOCK_PROCESS_CPUTIME_ID);
}

[[nodiscard]] inline double ns_to_ms(uint64_t ns) noexcept {
    return double(ns) / 1e6;
}
[[nodiscard]] inline double ns_to_us(uint64_t ns) noexcept {
    return double(ns) / 1e3;
}

} // namespace ferry
