#include "pool/raid.hpp"

#include "core/error.hpp"

#include <fmt/format.h>
#include <isa-l/erasure_code.h>
#include <isa-l/raid.h>

#include <cstring>

namespace ferry::raid {

namespace {

uint8_t gf_pow2(uint32_t e) noexcept {
    uint8_t v = 1;
    for (uint32_t i = 0; i < e; i++)
        v = gf_mul(v, 2);
    return v;
}

void check_len(size_t len) {
    if (len == 0 || len % alignment != 0 || len > size_t(INT32_MAX))
        throw error(fmt::format("stripe member length {} is not a positive multiple of {}", len,
                                alignment));
}

} // namespace

std::string_view to_string(level l) noexcept {
    switch (l) {
    case level::raid0:
        return "raid0";
    case level::raid1:
        return "raid1";
    case level::raid5:
        return "raid5";
    case level::raid6:
        return "raid6";
    }
    return "?";
}

level parse_level(std::string_view s) {
    if (s.starts_with("raid"))
        s.remove_prefix(4);
    if (s == "0")
        return level::raid0;
    if (s == "1")
        return level::raid1;
    if (s == "5")
        return level::raid5;
    if (s == "6")
        return level::raid6;
    throw error(fmt::format("unknown RAID level '{}' (expected 0, 1, 5 or 6)", s));
}

geometry geometry::over(level l, uint32_t nodes) {
    static constexpr uint32_t min_nodes[] = {1, 2, 3, 4};
    const uint32_t need = min_nodes[uint8_t(l)];
    if (nodes < need)
        throw error(
            fmt::format("{} needs at least {} pool nodes, got {}", to_string(l), need, nodes));
    if (nodes > max_members)
        throw error(fmt::format("at most {} pool nodes per stripe, got {}", max_members, nodes));
    switch (l) {
    case level::raid0:
        return {l, nodes, 0};
    case level::raid1:
        return {l, 1, nodes - 1};
    case level::raid5:
        return {l, nodes - 1, 1};
    case level::raid6:
        return {l, nodes - 2, 2};
    }
    throw error("unknown RAID level");
}

std::string geometry::describe() const {
    return fmt::format("{} ({} data + {} redundant members)", to_string(lvl), data, parity);
}

codec::codec(geometry g) : _geo(g) {
    if (g.members() == 0 || g.members() > max_members || g.data == 0)
        throw error(fmt::format("invalid stripe geometry {}", g.describe()));
}

uint8_t codec::coefficient(uint32_t row, uint32_t col) const noexcept {
    if (row < _geo.data)
        return row == col ? 1 : 0;
    switch (_geo.lvl) {
    case level::raid1: // every replica is the data
    case level::raid5:
        return 1;
    case level::raid6:
        return row == _geo.data ? 1 : gf_pow2(col);
    case level::raid0:
        break;
    }
    return 0;
}

void codec::encode(std::span<std::byte* const> members, size_t len) const {
    check_len(len);
    if (members.size() != _geo.members())
        throw error("encode: wrong number of stripe members");
    std::array<void*, max_members> v{};
    for (size_t i = 0; i < members.size(); i++)
        v[i] = members[i];
    switch (_geo.lvl) {
    case level::raid0:
        return;
    case level::raid1:
        for (uint32_t i = 1; i < _geo.members(); i++)
            std::memcpy(members[i], members[0], len);
        return;
    case level::raid5:
        if (_geo.data == 1)
            std::memcpy(members[1], members[0], len);
        else if (xor_gen(int(_geo.members()), int(len), v.data()) != 0)
            throw error("xor_gen failed");
        return;
    case level::raid6:
        if (pq_gen(int(_geo.members()), int(len), v.data()) != 0)
            throw error("pq_gen failed");
        return;
    }
}

bool codec::reconstruct(std::span<std::byte* const> members, std::span<const bool> lost,
                        size_t len) const {
    check_len(len);
    const uint32_t n = _geo.members(), k = _geo.data;
    if (members.size() != n || lost.size() != n)
        throw error("reconstruct: wrong number of stripe members");
    uint32_t nlost = 0, lost_data = 0;
    for (uint32_t i = 0; i < n; i++)
        if (lost[i]) {
            nlost++;
            lost_data += i < k ? 1 : 0;
        }
    if (nlost == 0)
        return true;
    if (nlost > _geo.tolerates())
        return false;

    if (_geo.lvl == level::raid1) {
        uint32_t from = 0;
        while (lost[from])
            from++;
        for (uint32_t i = 0; i < n; i++)
            if (lost[i])
                std::memcpy(members[i], members[from], len);
        return true;
    }
    if (_geo.lvl == level::raid5 && k > 1) {
        // The lost member is the XOR of all the others.
        std::array<void*, max_members> v{};
        uint32_t j = 0, dest = 0;
        for (uint32_t i = 0; i < n; i++)
            if (lost[i])
                dest = i;
            else
                v[j++] = members[i];
        v[j] = members[dest];
        if (xor_gen(int(n), int(len), v.data()) != 0)
            throw error("xor_gen failed");
        return true;
    }

    if (lost_data > 0) {
        // Any k surviving rows of the generator matrix determine the data:
        // invert them, and the inverse's rows for the lost data members say
        // how to combine the survivors.
        std::array<uint8_t, max_members * max_members> rows{}, inverse{}, decode{};
        std::array<uint8_t, 32 * max_members * max_members> tables{};
        std::array<uint8_t*, max_members> sources{}, outputs{};
        uint32_t used = 0;
        for (uint32_t r = 0; r < n && used < k; r++) {
            if (lost[r])
                continue;
            for (uint32_t c = 0; c < k; c++)
                rows[used * k + c] = coefficient(r, c);
            sources[used++] = reinterpret_cast<uint8_t*>(members[r]);
        }
        if (gf_invert_matrix(rows.data(), inverse.data(), int(k)) != 0)
            throw error("the stripe's generator matrix is singular"); // cannot happen for P/Q
        uint32_t out = 0;
        for (uint32_t d = 0; d < k; d++) {
            if (!lost[d])
                continue;
            std::memcpy(&decode[out * k], &inverse[d * k], k);
            outputs[out++] = reinterpret_cast<uint8_t*>(members[d]);
        }
        ec_init_tables(int(k), int(out), decode.data(), tables.data());
        ec_encode_data(int(len), int(k), int(out), tables.data(), sources.data(), outputs.data());
    }
    if (nlost > lost_data)
        encode(members, len); // lost parity, from data that is whole again
    return true;
}

bool codec::verify(std::span<std::byte* const> members, size_t len,
                   std::span<std::byte* const> scratch) const {
    if (_geo.parity == 0)
        return true;
    if (scratch.size() < _geo.parity)
        throw error("verify: not enough scratch members");
    std::array<std::byte*, max_members> v{};
    for (uint32_t i = 0; i < _geo.data; i++)
        v[i] = members[i];
    for (uint32_t p = 0; p < _geo.parity; p++)
        v[_geo.data + p] = scratch[p];
    encode(std::span<std::byte* const>(v.data(), _geo.members()), len);
    for (uint32_t p = 0; p < _geo.parity; p++)
        if (std::memcmp(members[_geo.data + p], scratch[p], len) != 0)
            return false;
    return true;
}

} // namespace ferry::raid
