// The page data path's fixed binary frames. Every field is little-endian and
// the layouts have no padding; offsets are spelled out below.
//
//   request (32 bytes)                reply header (32 bytes)
//   0  u32 magic  "FRYQ"              0  u32 magic  "FRYA"
//   4  u16 version                    4  u16 version
//   6  u16 op                         6  u16 status
//   8  u32 pid (image pid)            8  u32 pid
//   12 u32 nr_pages                   12 u32 nr_pages (pages that follow)
//   16 u64 vaddr (image address)      16 u64 vaddr
//   24 u64 request_id                 24 u64 request_id
//
// A reply with status ok is followed by nr_pages u64 xxh3 checksums, then
// nr_pages pages of data.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ferry::wire {

inline constexpr uint32_t request_magic = 0x51595246; // "FRYQ"
inline constexpr uint32_t reply_magic = 0x41595246;   // "FRYA"
inline constexpr uint16_t page_protocol_version = 1;
inline constexpr size_t page_header_size = 32;
// Largest request a server accepts: 4 MiB of pages.
inline constexpr uint32_t max_pages_per_request = 1024;

enum class op : uint16_t {
    get = 1,     // send nr_pages pages starting at vaddr
    done = 2,    // the destination has installed every page
    refetch = 3, // like get, after a copy failed its checksum: read the source again
    // The destination killed its restored copy before it ran (its gate was
    // refused or never answered): the source is the only copy and may run.
    discarded = 4,
};

// A notice carries no pages and wants no reply.
[[nodiscard]] constexpr bool is_notice(op o) noexcept {
    return o == op::done || o == op::discarded;
}

enum class status : uint16_t {
    ok = 0,
    unknown_migration = 1,
    out_of_range = 2, // not a lazy range of that pid
    read_failed = 3,  // the source could not read the task's memory
    bad_request = 4,
};

[[nodiscard]] std::string_view to_string(status s) noexcept;

struct page_request {
    op operation = op::get;
    uint32_t pid = 0;
    uint32_t nr_pages = 0;
    uint64_t vaddr = 0;
    uint64_t request_id = 0;
};

struct page_reply {
    status result = status::ok;
    uint32_t pid = 0;
    uint32_t nr_pages = 0;
    uint64_t vaddr = 0;
    uint64_t request_id = 0;
};

using header_bytes = std::array<std::byte, page_header_size>;

enum class decode_error : uint8_t {
    none,
    bad_magic,
    bad_version,
    bad_op,
    bad_status,
    bad_length, // nr_pages 0 for a get, or above the maximum
    unaligned,  // vaddr not page aligned
};

[[nodiscard]] std::string_view to_string(decode_error e) noexcept;

header_bytes encode(const page_request& r) noexcept;
header_bytes encode(const page_reply& r) noexcept;
[[nodiscard]] decode_error decode(const header_bytes& b, page_request& out) noexcept;
[[nodiscard]] decode_error decode(const header_bytes& b, page_reply& out) noexcept;

} // namespace ferry::wire
