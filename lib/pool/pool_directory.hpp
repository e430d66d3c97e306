// Where a pool node's arena chunks are, in a form a client can READ
// one-sided over RDMA (pagesrv --pool-rdma): a table of buckets in
// registered memory. A chunk's bucket is any bucket of the window of
// `window` buckets from its home; readers scan the whole window, so removal
// needs no tombstones. The node writes buckets under its store's lock; a
// reader may see one torn or stale (a slot reused meanwhile), which the
// chunk checksum in the bucket catches: the reader then asks the node
// two-sided.
#pragma once

#include "core/mapping.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace ferry::pool {

struct directory_bucket {
    uint64_t object;
    uint64_t chunk;
    uint32_t slot_plus_one; // 0: empty
    uint32_t data_len;
    uint32_t meta_len;
    uint32_t reserved;
    uint64_t checksum; // chunk_checksum(data, meta)
};
static_assert(sizeof(directory_bucket) == 40);

inline constexpr uint32_t directory_window = 8;

// The first bucket of (object, chunk)'s window in a table of `buckets` (a
// power of two); the table holds buckets + directory_window - 1 entries, so
// a window never wraps.
[[nodiscard]] uint64_t directory_home(uint64_t object, uint64_t chunk, uint64_t buckets) noexcept;

// The checksum a bucket carries: over the data, seeded with the metadata's.
[[nodiscard]] uint64_t chunk_checksum(const std::byte* data, uint32_t data_len,
                                      const std::byte* meta, uint32_t meta_len) noexcept;

// The bucket of (object, chunk) in a window a reader fetched, if any.
[[nodiscard]] std::optional<directory_bucket>
find_in_window(std::span<const directory_bucket> window, uint64_t object, uint64_t chunk) noexcept;

// The node's table: twice as many buckets as arena slots, rounded up to a
// power of two.
class pool_directory {
  public:
    explicit pool_directory(uint64_t slots);

    // Publishes (or updates) where a chunk lies; false if its window is full
    // (readers then find nothing and ask two-sided).
    bool publish(uint64_t object, uint64_t chunk, uint32_t slot, uint32_t data_len,
                 uint32_t meta_len, uint64_t checksum) noexcept;
    void unpublish(uint64_t object, uint64_t chunk) noexcept;

    [[nodiscard]] uint64_t buckets() const noexcept { return _buckets; }
    [[nodiscard]] std::byte* data() const noexcept { return _map.data(); }
    [[nodiscard]] size_t size() const noexcept { return _map.size(); }

  private:
    [[nodiscard]] directory_bucket* window(uint64_t object, uint64_t chunk) const noexcept;

    uint64_t _buckets;
    mapping _map;
};

} // namespace ferry::pool
