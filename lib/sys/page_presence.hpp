// Which pages of a task's memory exist, by PAGEMAP_SCAN on /proc/PID/pagemap
// (Linux 6.7+): one ioctl returns whole runs, where the older pagemap read
// costs 8 bytes and a copy per page. The kernel still walks every page
// table entry of the range, so a caller does this outside a freeze.
#pragma once

#include "core/unique_fd.hpp"

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace ferry::proc {

// Kernel ABI (include/uapi/linux/fs.h, 6.7), absent from older headers.
namespace pagemap_abi {
struct page_region {
    uint64_t start, end, categories;
};
struct pm_scan_arg {
    uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
    uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
};
static_assert(sizeof(pm_scan_arg) == 96);
// _IOWR('f', 16, struct pm_scan_arg)
inline constexpr unsigned long pagemap_scan = (3ul << 30) | (96ul << 16) | ('f' << 8) | 16;
inline constexpr uint64_t pm_scan_wp_matching = 1u << 0;
inline constexpr uint64_t pm_scan_check_wpasync = 1u << 1;
inline constexpr uint64_t page_is_written = 1u << 1;
inline constexpr uint64_t page_is_present = 1u << 3;
inline constexpr uint64_t page_is_swapped = 1u << 4;
inline constexpr uint64_t page_is_pfnzero = 1u << 5;
// How many regions one PAGEMAP_SCAN call may return.
inline constexpr size_t regions_per_call = 1024;
} // namespace pagemap_abi

struct page_run {
    uint64_t start = 0, end = 0;
    bool operator==(const page_run&) const = default;
};

// Appends a PAGEMAP_SCAN call's output to `out`: regions that touch (they
// differ only in a category not asked for) become one run.
void append_runs(std::span<const pagemap_abi::page_region> regions, std::vector<page_run>& out);

class page_presence {
  public:
    // Opens /proc/PID/pagemap. Throws if it cannot.
    explicit page_presence(pid_t pid);

    // Appends to `out` the runs of [start, end) whose pages exist: present
    // or swapped out, and not the shared zero page. nullopt if this kernel
    // has no PAGEMAP_SCAN (then nothing is known); throws on other errors.
    [[nodiscard]] std::optional<bool> existing(uint64_t start, uint64_t end,
                                               std::vector<page_run>& out);

  private:
    pid_t _pid;
    unique_fd _fd;
    std::vector<pagemap_abi::page_region> _regions; // the ioctl's output
};

// [start, end) minus the sorted, disjoint runs `present`: the holes.
[[nodiscard]] std::vector<page_run> holes_in(uint64_t start, uint64_t end,
                                             const std::vector<page_run>& present);

} // namespace ferry::proc
