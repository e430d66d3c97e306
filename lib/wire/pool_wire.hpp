// The memory pool's binary frames, between pool clients (the source's push,
// the destination's reads, rebuild, scrub) and pool nodes. A connection
// opens with a `pool_open` control frame (control.proto); after the node's
// `pool_accepted`, only these frames flow. Every field is little-endian and
// the layouts have no padding.
//
//   request (40 bytes)                reply (40 bytes)
//   0  u32 magic "FRYP"               0  u32 magic "FRYR"
//   4  u16 version                    4  u16 version
//   6  u16 op                         6  u8  status, 7 u8 tier that served it
//   8  u64 object                     8  u64 object
//   16 u64 chunk                      16 u64 chunk
//   24 u32 meta_len                   24 u32 meta_len
//   28 u32 data_len                   28 u32 data_len
//   32 u64 request_id                 32 u64 request_id
//
// A put request, and the ok reply to a get, are followed by meta_len bytes of
// metadata (the stripe's page checksums) and then data_len bytes of data.
// A stats reply carries a JSON document as data. Replies come in request
// order on each connection.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ferry::pool {

inline constexpr uint32_t request_magic = 0x50595246; // "FRYP"
inline constexpr uint32_t reply_magic = 0x52595246;   // "FRYR"
inline constexpr uint16_t protocol_version = 1;
inline constexpr size_t header_size = 40;
inline constexpr uint32_t max_meta_len = 256;
inline constexpr uint32_t max_data_len = 64u << 10;

enum class op : uint16_t {
    put = 1,   // store (object, chunk), replacing any earlier copy
    get = 2,   // return (object, chunk)
    drop = 3,  // forget every chunk of `object`
    stats = 4, // the node's counters, as JSON
    ping = 5,  // an empty ok reply: liveness and round-trip time
    grant = 6, // let the peer named in the metadata at `object` too
};

enum class status : uint8_t {
    ok = 0,
    not_found = 1,
    bad_request = 2,
    no_space = 3,  // the arena and the disk tier are both full
    io_error = 4,  // the disk tier failed
    corrupt = 5,   // the stored copy failed the node's own checksum
    forbidden = 6, // the peer is not one of the object's members
};

enum class tier : uint8_t { none = 0, memory = 1, disk = 2 };

[[nodiscard]] std::string_view to_string(status s) noexcept;
[[nodiscard]] std::string_view to_string(op o) noexcept;

struct request {
    op operation = op::get;
    uint64_t object = 0;
    uint64_t chunk = 0;
    uint32_t meta_len = 0;
    uint32_t data_len = 0;
    uint64_t request_id = 0;
};

struct reply {
    status result = status::ok;
    tier served_from = tier::none;
    uint64_t object = 0;
    uint64_t chunk = 0;
    uint32_t meta_len = 0;
    uint32_t data_len = 0;
    uint64_t request_id = 0;
};

// A stripe member's key on a node: members of one stripe sit on different
// nodes, but the member index keeps a rebuilt or moved chunk self-describing.
[[nodiscard]] constexpr uint64_t chunk_of(uint64_t stripe, uint32_t member) noexcept {
    return (stripe << 8) | member;
}
[[nodiscard]] constexpr uint64_t stripe_of(uint64_t chunk) noexcept {
    return chunk >> 8;
}
[[nodiscard]] constexpr uint32_t member_of(uint64_t chunk) noexcept {
    return uint32_t(chunk & 0xff);
}

using header_bytes = std::array<std::byte, header_size>;

enum class decode_error : uint8_t {
    none,
    bad_magic,
    bad_version,
    bad_op,
    bad_status,
    bad_length, // meta or data longer than the maximum, or a payload where none belongs
};

[[nodiscard]] std::string_view to_string(decode_error e) noexcept;

header_bytes encode(const request& r) noexcept;
header_bytes encode(const reply& r) noexcept;
[[nodiscard]] decode_error decode(const header_bytes& b, request& out) noexcept;
[[nodiscard]] decode_error decode(const header_bytes& b, reply& out) noexcept;

} // namespace ferry::pool
