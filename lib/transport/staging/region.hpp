// The staging region of the one-sided fabrics: one shared-memory file per
// migration, written by the source and read one-sided by the destination
// (shm maps it; rdma registers it as a memory region and READs it).
//
//   [header: 4 KiB][request ring][page states: 1 byte/page]
//   [checksums: 8 bytes/page][page data: 4 KiB/page, page-aligned]
//
// Page i holds the i-th lazy page in layout order (the ranges travel in the
// channel handshake). The source stages a page by writing its data and
// checksum, then storing state 1 with release; a reader that acquires
// state 1 may use the page (and may hand it straight to UFFDIO_COPY). Pages
// that are not staged yet are asked for through the request ring (shm
// readers push to it; rdma's server pushes what it receives); the source
// stages everything else on its own, in layout order.
#pragma once

#include "transport/staging/ring.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace ferry::transport::staging {

inline constexpr uint32_t region_magic = 0x4d595246; // "FRYM"
inline constexpr uint16_t region_version = 1;

struct stage_request {
    uint64_t first_page;
    uint32_t count;
    uint32_t flags; // restage: write the pages again from the source task
};
inline constexpr uint32_t restage_flag = 1;

using request_ring = shm_ring<stage_request, 1024>;

inline constexpr uint8_t page_absent = 0;
inline constexpr uint8_t page_staged = 1;

struct region_geometry {
    uint64_t page_count;
    uint64_t ring_offset;
    uint64_t states_offset;
    uint64_t checksums_offset;
    uint64_t data_offset;
    uint64_t total_size;
};

struct region_header {
    uint32_t magic;
    uint16_t version;
    uint16_t reserved;
    region_geometry geo;
    alignas(64) shm_doorbell stager_bell; // rung by readers that posted requests
    alignas(64) std::atomic<uint64_t> staged_pages;
    std::atomic<uint32_t> stager_alive; // 0 once the source stops staging
};
static_assert(sizeof(region_header) <= 4096);

// Offsets for a region of `page_count` pages.
region_geometry layout(uint64_t page_count) noexcept;

// Typed views of a mapped region.
struct region_view {
    std::byte* base = nullptr;

    [[nodiscard]] region_header& header() const noexcept {
        return *reinterpret_cast<region_header*>(base);
    }
    [[nodiscard]] request_ring& ring() const noexcept {
        return *reinterpret_cast<request_ring*>(base + header().geo.ring_offset);
    }
    [[nodiscard]] std::atomic<uint8_t>* states() const noexcept {
        return reinterpret_cast<std::atomic<uint8_t>*>(base + header().geo.states_offset);
    }
    [[nodiscard]] uint64_t* checksums() const noexcept {
        return reinterpret_cast<uint64_t*>(base + header().geo.checksums_offset);
    }
    [[nodiscard]] std::byte* page(uint64_t i) const noexcept {
        return base + header().geo.data_offset + i * 4096;
    }
    // Pages [first, first + count) staged, counted from the start.
    [[nodiscard]] uint32_t staged_prefix(uint64_t first, uint32_t count) const noexcept;
};

} // namespace ferry::transport::staging
