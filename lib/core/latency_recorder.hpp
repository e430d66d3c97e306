// Records latencies into a buffer reserved up front, so recording on the
// fault path never allocates. Past capacity it keeps a uniform reservoir
// sample; count and max stay exact.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace ferry {

class latency_recorder {
  public:
    explicit latency_recorder(size_t capacity = 1u << 20);

    void record(uint64_t ns) noexcept;

    [[nodiscard]] uint64_t count() const noexcept { return _count; }
    [[nodiscard]] uint64_t max() const noexcept { return _max; }
    // p in [0, 100]; 0 when empty. Sorts a copy: call off the hot path.
    [[nodiscard]] uint64_t percentile(double p) const;
    [[nodiscard]] uint64_t sum() const noexcept { return _sum; }
    // Counts per bucket of `bounds` (ascending upper bounds, ns) plus one for
    // anything slower, scaled from the sample to count(). Off the hot path.
    [[nodiscard]] std::vector<uint64_t> histogram(std::span<const uint64_t> bounds) const;

  private:
    std::vector<uint64_t> _samples;
    size_t _capacity;
    uint64_t _count = 0;
    uint64_t _max = 0;
    uint64_t _sum = 0;
    std::minstd_rand _rng{12345};
};

// The buckets Ferry reports fault latencies in (Prometheus'
// ferry_fault_latency_seconds): 25 us to 100 ms.
inline constexpr uint64_t latency_buckets_ns[] = {25'000,     50'000,     100'000,    200'000,
                                                  500'000,    1'000'000,  2'000'000,  5'000'000,
                                                  10'000'000, 20'000'000, 50'000'000, 100'000'000};

// Percentile of an unsorted sample set, nearest-rank.
[[nodiscard]] uint64_t percentile_of(std::vector<uint64_t> samples, double p);

} // namespace ferry
