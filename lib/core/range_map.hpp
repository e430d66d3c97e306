// Disjoint, sorted, page-aligned address ranges, each remembering the image
// address its first byte came from (the two differ only after mremap). Used
// for a process's lazy ranges and, with identity image addresses, for its
// in-flight set.
//
// Nodes come from a pool owned by the map, so splitting a range on the fault
// path reuses freed nodes instead of calling malloc in steady state.
#pragma once

#include <cstdint>
#include <map>
#include <memory_resource>
#include <optional>
#include <vector>

namespace ferry {

struct address_range {
    uint64_t start = 0;
    uint64_t end = 0;
    uint64_t img_start = 0;

    [[nodiscard]] uint64_t length() const noexcept { return end - start; }
    [[nodiscard]] uint64_t img_of(uint64_t addr) const noexcept {
        return img_start + (addr - start);
    }
    bool operator==(const address_range&) const = default;
};

class range_map {
  public:
    // With merge_adjacent false, ranges keep the boundaries they were
    // inserted with (a process's lazy ranges end at VMA boundaries, which
    // UFFDIO_COPY cannot cross); erase still splits them.
    explicit range_map(bool merge_adjacent = true);
    range_map(const range_map& other);
    range_map& operator=(const range_map&) = delete;

    // Adds [start, end) whose image address is img_start. Any overlap with
    // existing ranges is replaced.
    void insert(uint64_t start, uint64_t end, uint64_t img_start);
    void insert_identity(uint64_t start, uint64_t end) { insert(start, end, start); }

    // Removes [start, end) and returns how many bytes were present.
    uint64_t erase(uint64_t start, uint64_t end);

    // Moves the part of the map inside [from, from + len) to start at `to`,
    // keeping each piece's image address (the effect of mremap).
    void remap(uint64_t from, uint64_t to, uint64_t len);

    // The range containing addr.
    [[nodiscard]] std::optional<address_range> find(uint64_t addr) const;
    // The first range that ends after addr.
    [[nodiscard]] std::optional<address_range> first_ending_after(uint64_t addr) const;

    // Length of the run starting at addr that lies inside one range.
    [[nodiscard]] uint64_t covered_from(uint64_t addr) const;

    [[nodiscard]] bool empty() const noexcept { return _ranges.empty(); }
    [[nodiscard]] uint64_t bytes() const noexcept { return _bytes; }
    [[nodiscard]] size_t count() const noexcept { return _ranges.size(); }
    [[nodiscard]] std::vector<address_range> to_vector() const;
    void clear();

  private:
    struct tail {
        uint64_t end;
        uint64_t img_start;
    };
    using map_type = std::pmr::map<uint64_t, tail>;

    void merge_around(map_type::iterator it);

    std::pmr::unsynchronized_pool_resource _pool;
    map_type _ranges{&_pool};
    uint64_t _bytes = 0;
    bool _merge_adjacent;
};

} // namespace ferry
