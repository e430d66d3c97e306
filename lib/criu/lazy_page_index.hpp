// How both ends of a migration number a dump's lazy pages: ranges sorted by
// (pid, start), pages counted in that order. The source builds it from the
// pagemap images it serves, the destination from the same images; the shm
// region and the pool place page N at the same spot on both sides.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace ferry::criu {

class lazy_page_index {
  public:
    struct range {
        uint32_t pid;
        uint64_t start, end, first_page;
    };
    // Ranges must be added in (pid, start) order; throws ferry::error.
    void add(uint32_t pid, uint64_t start, uint64_t end);
    // The index of the page at `vaddr` if [vaddr, +nr_pages) lies inside one
    // lazy range of `pid`.
    [[nodiscard]] std::optional<uint64_t> find(uint32_t pid, uint64_t vaddr,
                                               uint32_t nr_pages) const noexcept;
    // The range holding page `index` (which must be below total_pages()).
    [[nodiscard]] const range& range_of(uint64_t index) const noexcept;
    [[nodiscard]] uint64_t total_pages() const noexcept { return _total; }
    [[nodiscard]] const std::vector<range>& ranges() const noexcept { return _ranges; }

  private:
    std::vector<range> _ranges;
    uint64_t _total = 0;
};

} // namespace ferry::criu
