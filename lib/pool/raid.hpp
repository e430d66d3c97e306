// Erasure coding of the memory pool's stripes, on ISA-L. Both the side that
// writes pages into the pool and the side that reads them (or rebuilds a lost
// node) use this one codec, so they cannot disagree on the parity.
//
// A stripe has `data` members followed by `parity` members, all `len` bytes,
// 32-byte aligned (ISA-L's SIMD paths want that):
//   RAID-0  data = n, parity = 0      striping only
//   RAID-1  data = 1, parity = n - 1  n-way replicas
//   RAID-5  data = n - 1, parity = 1  P = XOR of the data      (xor_gen)
//   RAID-6  data = n - 2, parity = 2  P, and Q = sum 2^i * D_i (pq_gen)
// Lost members are rebuilt by inverting the surviving rows of the code's
// generator matrix in GF(2^8) (gf_invert_matrix, ec_encode_data).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace ferry::raid {

enum class level : uint8_t { raid0, raid1, raid5, raid6 };

constexpr uint32_t max_members = 16;
constexpr size_t alignment = 32;

[[nodiscard]] std::string_view to_string(level l) noexcept;
// "0", "1", "5", "6" (also "raid5" etc.); throws ferry::error otherwise.
[[nodiscard]] level parse_level(std::string_view s);

struct geometry {
    level lvl = level::raid0;
    uint32_t data = 1;
    uint32_t parity = 0;

    [[nodiscard]] uint32_t members() const noexcept { return data + parity; }
    // Members that may be lost with every byte still recoverable.
    [[nodiscard]] uint32_t tolerates() const noexcept { return parity; }
    // Raw bytes stored per byte of data.
    [[nodiscard]] double overhead() const noexcept { return double(members()) / double(data); }
    // The geometry of `l` over `nodes` pool nodes; throws ferry::error when
    // the level needs more nodes (RAID-1/5: 2/3, RAID-6: 4) or too many.
    static geometry over(level l, uint32_t nodes);
    [[nodiscard]] std::string describe() const;
};

class codec {
  public:
    explicit codec(geometry g);

    [[nodiscard]] const geometry& geo() const noexcept { return _geo; }

    // Writes the parity members from the data members. `members` holds
    // geo().members() pointers; `len` is a multiple of 32.
    void encode(std::span<std::byte* const> members, size_t len) const;

    // Rebuilds every member flagged in `lost` from the others, in place.
    // Returns false, touching nothing, if more members are lost than the
    // geometry tolerates.
    [[nodiscard]] bool reconstruct(std::span<std::byte* const> members, std::span<const bool> lost,
                                   size_t len) const;

    // Checks that the parity members match the data (for scrubbing and
    // tests). Needs `len` bytes of scratch per parity member.
    [[nodiscard]] bool verify(std::span<std::byte* const> members, size_t len,
                              std::span<std::byte* const> scratch) const;

  private:
    // Row `r` of the generator matrix: the coefficients of member r over the
    // data members.
    [[nodiscard]] uint8_t coefficient(uint32_t row, uint32_t col) const noexcept;

    geometry _geo;
};

} // namespace ferry::raid
