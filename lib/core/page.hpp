// Page geometry shared by every component.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace ferry {

inline constexpr size_t page_size = 4096;
inline constexpr uint64_t page_mask = page_size - 1;

// The wire formats are little-endian and Ferry reads them in place.
static_assert(std::endian::native == std::endian::little, "Ferry assumes a little-endian host");

[[nodiscard]] constexpr uint64_t page_down(uint64_t addr) noexcept {
    return addr & ~page_mask;
}
[[nodiscard]] constexpr uint64_t pages_in(uint64_t bytes) noexcept {
    return bytes / page_size;
}
// `v` rounded up to a multiple of `to`.
[[nodiscard]] constexpr uint64_t round_up(uint64_t v, uint64_t to) noexcept {
    return (v + to - 1) / to * to;
}

} // namespace ferry
