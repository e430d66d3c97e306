// Records latencies into a buffer reserved up front, so recording on the
// fault path never allocates. Past capacity it keeps a uniform reservoir
// sample; count and max stay exact.
#pragma once

#include <cstdint>
#include <random>
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

  private:
    std::vector<uint64_t> _samples;
    size_t _capacity;
    uint64_t _count = 0;
    uint64_t _max = 0;
    std::minstd_rand _rng{12345};
};

// Percentile of an unsorted sample set, nearest-rank.
[[nodiscard]] uint64_t percentile_of(std::vector<uint64_t> samples, double p);

} // namespace ferry
