#include "core/latency_recorder.hpp"

#include <algorithm>
#include <cmath>

namespace ferry {

latency_recorder::latency_recorder(size_t capacity) : _capacity(capacity ? capacity : 1) {
    _samples.reserve(_capacity);
}

void latency_recorder::record(uint64_t ns) noexcept {
    _count++;
    _sum += ns;
    _max = std::max(_max, ns);
    if (_samples.size() < _capacity) {
        _samples.push_back(ns); // within reserved capacity: no allocation
        return;
    }
    const uint64_t slot = std::uniform_int_distribution<uint64_t>(0, _count - 1)(_rng);
    if (slot < _capacity)
        _samples[slot] = ns;
}

std::vector<uint64_t> latency_recorder::histogram(std::span<const uint64_t> bounds) const {
    std::vector<uint64_t> counts(bounds.size() + 1, 0);
    for (uint64_t s : _samples)
        counts[size_t(std::lower_bound(bounds.begin(), bounds.end(), s) - bounds.begin())]++;
    if (_samples.size() < _count && !_samples.empty()) // a reservoir: scale up to the count
        for (auto& c : counts)
            c = c * _count / _samples.size();
    return counts;
}

uint64_t latency_recorder::percentile(double p) const {
    return percentile_of(_samples, p);
}

uint64_t percentile_of(std::vector<uint64_t> samples, double p) {
    if (samples.empty())
        return 0;
    p = std::clamp(p, 0.0, 100.0);
    size_t rank = size_t(std::ceil(p / 100.0 * double(samples.size())));
    rank = std::clamp<size_t>(rank, 1, samples.size());
    std::nth_element(samples.begin(), samples.begin() + long(rank - 1), samples.end());
    return samples[rank - 1];
}

} // namespace ferry
