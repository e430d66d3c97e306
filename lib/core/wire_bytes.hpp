// Little-endian field access for Ferry's fixed binary frames.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry::wire_bytes {

template <typename T>
void store_le(std::byte* p, T v) noexcept {
    for (size_t i = 0; i < sizeof(T); i++)
        p[i] = std::byte((uint64_t(v) >> (8 * i)) & 0xff);
}

template <typename T>
[[nodiscard]] T load_le(const std::byte* p) noexcept {
    uint64_t v = 0;
    for (size_t i = 0; i < sizeof(T); i++)
        v |= uint64_t(std::to_integer<uint8_t>(p[i])) << (8 * i);
    return T(v);
}

} // namespace ferry::wire_bytes
