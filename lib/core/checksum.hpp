// The 64-bit page checksum carried from the source to the uffd copy.
#pragma once

#include "core/page.hpp"

#include <xxhash.h>

#include <cstddef>
#include <cstdint>

namespace ferry {

[[nodiscard]] inline uint64_t page_checksum(const void* page) noexcept {
    return XXH3_64bits(page, page_size);
}

[[nodiscard]] inline uint64_t buffer_checksum(const void* data, size_t len) noexcept {
    return XXH3_64bits(data, len);
}

} // namespace ferry
