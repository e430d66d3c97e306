// Bytes that differ by seed and position, for tests that check data comes
// through a cipher or a channel intact.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ferry::test {

inline std::vector<std::byte> byte_pattern(size_t n, unsigned seed) {
    std::vector<std::byte> v(n);
    uint32_t x = seed * 2654435761u + 1;
    for (auto& b : v) {
        x = x * 1664525u + 1013904223u;
        b = std::byte(x >> 24);
    }
    return v;
}

} // namespace ferry::test
