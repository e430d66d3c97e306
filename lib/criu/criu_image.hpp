// Reads the CRIU 4.1 images Ferry needs: inventory, pstree, mm (VMAs) and
// pagemap. Images are framed as [magic][type magic]{u32 len, packed proto}*;
// corrupt input raises image_error naming the file and offset.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace ferry::criu {

class image_error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

inline constexpr uint32_t common_magic = 0x54564319;
inline constexpr uint32_t inventory_magic = 0x58313116;
inline constexpr uint32_t pstree_magic = 0x50273030;
inline constexpr uint32_t pagemap_magic = 0x56084025;
inline constexpr uint32_t mm_magic = 0x57492820;
inline constexpr uint32_t supported_img_version = 2;

// Pagemap entry flags.
inline constexpr uint32_t pe_parent = 1;
inline constexpr uint32_t pe_lazy = 2;
inline constexpr uint32_t pe_present = 4;

// VMA status bits that exclude a VMA from lazy restore.
inline constexpr uint32_t vma_area_vsyscall = 1u << 2;
inline constexpr uint32_t vma_area_vdso = 1u << 3;
inline constexpr uint32_t vma_area_vvar = 1u << 12;

struct task {
    uint32_t pid = 0; // the virtual pid inside the dumped tree
    uint32_t ppid = 0;
    std::vector<uint32_t> threads;
};

struct vma {
    uint64_t start = 0;
    uint64_t end = 0;
    uint32_t prot = 0;
    uint32_t flags = 0;
    uint32_t status = 0;
    uint64_t madv = 0; // 1 << MADV_x for each madvise flag CRIU restores

    // CRIU registers these with userfaultfd and leaves their pages lazy.
    [[nodiscard]] bool lazy_capable() const noexcept;
};

struct pagemap_entry {
    uint64_t vaddr = 0;
    uint32_t nr_pages = 0;
    uint32_t flags = 0;

    [[nodiscard]] uint64_t end() const noexcept { return vaddr + uint64_t(nr_pages) * 4096; }
    [[nodiscard]] bool lazy() const noexcept { return flags & pe_lazy; }
};

struct pagemap {
    uint32_t pages_id = 0;
    std::vector<pagemap_entry> entries;
};

// A lazy run of pages inside one VMA (UFFDIO_COPY cannot cross a VMA).
struct lazy_range {
    uint64_t start = 0;
    uint64_t end = 0;
    bool operator==(const lazy_range&) const = default;
};

struct inventory {
    uint32_t img_version = 0;
    std::vector<std::string> plugins;
};

// Splits the raw bytes of an image file into its entries after checking the
// magics. `type_magic` is inventory_magic for inventory.img (which has no
// common magic) and the type magic otherwise.
std::vector<std::span<const uint8_t>> split_entries(std::span<const uint8_t> file,
                                                    uint32_t type_magic, const std::string& name);

inventory parse_inventory(std::span<const uint8_t> file);
std::vector<task> parse_pstree(std::span<const uint8_t> file);
std::vector<vma> parse_mm(std::span<const uint8_t> file, const std::string& name);
pagemap parse_pagemap(std::span<const uint8_t> file, const std::string& name);

// Lazy pagemap entries split at VMA boundaries, sorted. Fails if a lazy entry
// falls outside the VMAs or inside one that cannot be lazy.
std::vector<lazy_range> compute_lazy_ranges(const pagemap& pm, const std::vector<vma>& vmas,
                                            const std::string& name);

// One dumped process, as Ferry needs it.
struct process_image {
    task t;
    std::vector<vma> vmas;
    pagemap pm;
    std::vector<lazy_range> lazy;
    [[nodiscard]] uint64_t lazy_pages() const noexcept;
};

// The images of one dumped tree, read from a directory.
struct image_set {
    inventory inv;
    std::vector<task> tasks; // pstree order; tasks[0] is the root
    std::vector<process_image> processes;

    static image_set load(const std::filesystem::path& dir);
    [[nodiscard]] uint64_t lazy_pages() const noexcept;
    [[nodiscard]] const process_image* find(uint32_t pid) const noexcept;
};

std::vector<uint8_t> read_file(const std::filesystem::path& path);

} // namespace ferry::criu
