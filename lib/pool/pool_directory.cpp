#include "pool/pool_directory.hpp"

#include "core/xxh3.hpp"

#include <sys/mman.h>

#include <bit>

namespace ferry::pool {

uint64_t directory_home(uint64_t object, uint64_t chunk, uint64_t buckets) noexcept {
    return (object * 0x9e3779b97f4a7c15ull ^ chunk * 0xc2b2ae3d27d4eb4full) & (buckets - 1);
}

uint64_t chunk_checksum(const std::byte* data, uint32_t data_len, const std::byte* meta,
                        uint32_t meta_len) noexcept {
    return XXH3_64bits_withSeed(data, data_len, XXH3_64bits(meta, meta_len));
}

std::optional<directory_bucket> find_in_window(std::span<const directory_bucket> window,
                                               uint64_t object, uint64_t chunk) noexcept {
    for (const auto& b : window)
        if (b.slot_plus_one && b.object == object && b.chunk == chunk)
            return b;
    return std::nullopt;
}

pool_directory::pool_directory(uint64_t slots)
    : _buckets(std::bit_ceil(slots * 2)),
      // Populated (written) now: registering untouched private memory for
      // remote READ only may pin the shared zero page, and the node's later
      // writes would then never reach its readers.
      _map(mapping::anonymous((_buckets + directory_window - 1) * sizeof(directory_bucket),
                              "the pool directory", MAP_POPULATE)) {}

directory_bucket* pool_directory::window(uint64_t object, uint64_t chunk) const noexcept {
    return reinterpret_cast<directory_bucket*>(_map.data()) +
           directory_home(object, chunk, _buckets);
}

bool pool_directory::publish(uint64_t object, uint64_t chunk, uint32_t slot, uint32_t data_len,
                             uint32_t meta_len, uint64_t checksum) noexcept {
    directory_bucket* w = window(object, chunk);
    directory_bucket* free = nullptr;
    for (uint32_t i = 0; i < directory_window; i++) {
        if (w[i].slot_plus_one && w[i].object == object && w[i].chunk == chunk) {
            free = &w[i];
            break;
        }
        if (!w[i].slot_plus_one && !free)
            free = &w[i];
    }
    if (!free)
        return false;
    // Empty first, the location last: a reader racing this sees no bucket,
    // or one whose checksum matches what it then reads, or a mismatch.
    std::atomic_ref(free->slot_plus_one).store(0, std::memory_order_release);
    free->object = object;
    free->chunk = chunk;
    free->data_len = data_len;
    free->meta_len = meta_len;
    free->checksum = checksum;
    std::atomic_ref(free->slot_plus_one).store(slot + 1, std::memory_order_release);
    return true;
}

void pool_directory::unpublish(uint64_t object, uint64_t chunk) noexcept {
    directory_bucket* w = window(object, chunk);
    for (uint32_t i = 0; i < directory_window; i++)
        if (w[i].slot_plus_one && w[i].object == object && w[i].chunk == chunk)
            std::atomic_ref(w[i].slot_plus_one).store(0, std::memory_order_release);
}

} // namespace ferry::pool
