// Which page a pool node moves from memory to its disk tier when the arena
// is full. A policy tracks arena slots (0 .. capacity-1) that hold a page;
// every operation is O(1) and allocation-free after construction, since the
// node consults it on every store and every read.
//
//   fifo    oldest stored first
//   lru     least recently read or stored first
//   lfu     least often read first, oldest first among equals: O(1) with
//           frequency buckets (Shah, Mitra, Matani), as Camelot's DSM does
//   clock   second chance: a hand sweeps the slots, clearing reference bits
//   random  uniformly among resident slots (seeded, so runs repeat)
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

namespace ferry::pagesrv {

class eviction_policy {
  public:
    virtual ~eviction_policy() = default;
    // `slot` now holds a page.
    virtual void stored(uint32_t slot) noexcept = 0;
    // The page in `slot` was read.
    virtual void accessed(uint32_t slot) noexcept = 0;
    // `slot` no longer holds a page (deleted, or moved out by the caller).
    virtual void removed(uint32_t slot) noexcept = 0;
    // Picks the slot to evict and stops tracking it; nothing if none held.
    virtual std::optional<uint32_t> victim() noexcept = 0;
    [[nodiscard]] virtual std::string_view name() const noexcept = 0;
};

// "fifo", "lru", "lfu", "clock" or "random"; throws ferry::error otherwise.
std::unique_ptr<eviction_policy> make_eviction_policy(std::string_view name, uint32_t capacity,
                                                      uint64_t seed = 1);

} // namespace ferry::pagesrv
