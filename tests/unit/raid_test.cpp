// The pool's stripe codec: every level, every combination of lost members.
#include "core/error.hpp"
#include "pool/raid.hpp"

#include <catch2/catch.hpp>
#include <isa-l/erasure_code.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

using namespace ferry;

namespace {

constexpr size_t len = 4096;

struct stripe {
    explicit stripe(uint32_t members) : buf(members), ptrs(members) {
        for (uint32_t i = 0; i < members; i++) {
            buf[i] = static_cast<std::byte*>(std::aligned_alloc(raid::alignment, len));
            ptrs[i] = buf[i];
        }
    }
    ~stripe() {
        for (auto* b : buf)
            std::free(b);
    }
    std::vector<std::byte*> buf, ptrs;
};

void fill_random(std::byte* p, std::mt19937_64& rng) {
    for (size_t i = 0; i < len; i += 8) {
        const uint64_t v = rng();
        std::memcpy(p + i, &v, 8);
    }
}

} // namespace

TEST_CASE("raid: geometry per level and node count") {
    CHECK(raid::geometry::over(raid::level::raid0, 4).data == 4);
    CHECK(raid::geometry::over(raid::level::raid1, 3).parity == 2);
    CHECK(raid::geometry::over(raid::level::raid5, 5).data == 4);
    CHECK(raid::geometry::over(raid::level::raid6, 6).data == 4);
    CHECK(raid::geometry::over(raid::level::raid5, 5).overhead() == Approx(1.25));
    CHECK(raid::geometry::over(raid::level::raid1, 2).overhead() == Approx(2.0));
    CHECK_THROWS_AS(raid::geometry::over(raid::level::raid5, 2), error);
    CHECK_THROWS_AS(raid::geometry::over(raid::level::raid6, 3), error);
    CHECK_THROWS_AS(raid::geometry::over(raid::level::raid0, 17), error);
    CHECK(raid::parse_level("6") == raid::level::raid6);
    CHECK(raid::parse_level("raid1") == raid::level::raid1);
    CHECK_THROWS_AS(raid::parse_level("4"), error);
}

TEST_CASE("raid: RAID-6 Q is sum 2^i * D_i, as the rebuild assumes") {
    const raid::codec c(raid::geometry::over(raid::level::raid6, 6));
    stripe s(6);
    std::mt19937_64 rng(7);
    for (uint32_t d = 0; d < 4; d++)
        fill_random(s.buf[d], rng);
    c.encode(s.ptrs, len);
    for (size_t byte = 0; byte < len; byte += 97) {
        uint8_t p = 0, q = 0, coef = 1;
        for (uint32_t d = 0; d < 4; d++) {
            const auto v = uint8_t(s.buf[d][byte]);
            p ^= v;
            q ^= gf_mul(coef, v);
            coef = gf_mul(coef, 2);
        }
        REQUIRE(uint8_t(s.buf[4][byte]) == p);
        REQUIRE(uint8_t(s.buf[5][byte]) == q);
    }
}

TEST_CASE("raid: every level rebuilds every tolerable loss and refuses the rest") {
    struct shape {
        raid::level lvl;
        uint32_t nodes;
    };
    const shape shapes[] = {
        {raid::level::raid0, 1}, {raid::level::raid0, 4}, {raid::level::raid1, 2},
        {raid::level::raid1, 3}, {raid::level::raid5, 3}, {raid::level::raid5, 4},
        {raid::level::raid5, 6}, {raid::level::raid6, 4}, {raid::level::raid6, 5},
        {raid::level::raid6, 6}, {raid::level::raid6, 8},
    };
    std::mt19937_64 rng(42);
    for (const auto& sh : shapes) {
        const raid::codec c(raid::geometry::over(sh.lvl, sh.nodes));
        const uint32_t n = c.geo().members();
        CAPTURE(c.geo().describe());
        stripe s(n), original(n), scratch(2);
        for (uint32_t d = 0; d < c.geo().data; d++)
            fill_random(s.buf[d], rng);
        c.encode(s.ptrs, len);
        REQUIRE(c.verify(s.ptrs, len, scratch.ptrs));
        for (uint32_t i = 0; i < n; i++)
            std::memcpy(original.buf[i], s.buf[i], len);

        for (uint32_t mask = 1; mask < (1u << n); mask++) {
            CAPTURE(mask);
            bool lost[raid::max_members] = {};
            uint32_t count = 0;
            for (uint32_t i = 0; i < n; i++)
                if (mask & (1u << i)) {
                    lost[i] = true;
                    count++;
                    fill_random(s.buf[i], rng); // whatever a dead node leaves behind
                }
            const bool ok = c.reconstruct(s.ptrs, std::span<const bool>(lost, n), len);
            REQUIRE(ok == (count <= c.geo().tolerates()));
            if (ok) {
                for (uint32_t i = 0; i < n; i++)
                    REQUIRE(std::memcmp(s.buf[i], original.buf[i], len) == 0);
            } else {
                for (uint32_t i = 0; i < n; i++)
                    std::memcpy(s.buf[i], original.buf[i], len);
            }
        }
    }
}

TEST_CASE("raid: verify catches a corrupted member; bad lengths are refused") {
    const raid::codec c(raid::geometry::over(raid::level::raid5, 4));
    stripe s(4), scratch(1);
    std::mt19937_64 rng(3);
    for (uint32_t d = 0; d < 3; d++)
        fill_random(s.buf[d], rng);
    c.encode(s.ptrs, len);
    CHECK(c.verify(s.ptrs, len, scratch.ptrs));
    s.buf[1][100] ^= std::byte{1};
    CHECK_FALSE(c.verify(s.ptrs, len, scratch.ptrs));
    CHECK_THROWS_AS(c.encode(s.ptrs, 100), error);
    CHECK_THROWS_AS(c.encode(s.ptrs, 0), error);
}
