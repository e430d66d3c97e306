#include "core/range_map.hpp"

#include <catch2/catch.hpp>

using ferry::address_range;
using ferry::range_map;

TEST_CASE("range_map inserts, finds and merges touching ranges", "[range_map]") {
    range_map m;
    m.insert(0x1000, 0x3000, 0x1000);
    m.insert(0x3000, 0x5000, 0x3000); // touches in both spaces: merges
    REQUIRE(m.count() == 1);
    REQUIRE(m.bytes() == 0x4000);
    REQUIRE(m.find(0x4fff) == address_range{0x1000, 0x5000, 0x1000});
    REQUIRE_FALSE(m.find(0x5000));
    REQUIRE_FALSE(m.find(0xfff));

    m.insert(0x5000, 0x6000, 0x9000); // touches in address only: stays separate
    REQUIRE(m.count() == 2);
}

TEST_CASE("range_map without merging keeps VMA boundaries", "[range_map]") {
    range_map m(false);
    m.insert(0x1000, 0x2000, 0x1000);
    m.insert(0x2000, 0x3000, 0x2000);
    REQUIRE(m.count() == 2);
    REQUIRE(m.find(0x1000)->end == 0x2000);
    REQUIRE(m.erase(0x1800, 0x2800) == 0x1000);
    REQUIRE(m.to_vector() ==
            std::vector<address_range>{{0x1000, 0x1800, 0x1000}, {0x2800, 0x3000, 0x2800}});
}

TEST_CASE("range_map erase splits and trims", "[range_map]") {
    range_map m;
    m.insert(0x10000, 0x20000, 0x10000);
    REQUIRE(m.erase(0x14000, 0x15000) == 0x1000);
    REQUIRE(m.to_vector() ==
            std::vector<address_range>{{0x10000, 0x14000, 0x10000}, {0x15000, 0x20000, 0x15000}});
    REQUIRE(m.erase(0x0, 0x11000) == 0x1000);
    REQUIRE(m.erase(0x1f000, 0x30000) == 0x1000);
    REQUIRE(m.erase(0x14000, 0x15000) == 0);
    REQUIRE(m.bytes() == 0x3000 + 0xa000);
    REQUIRE(m.erase(0, ~0ull) == 0xd000);
    REQUIRE(m.empty());
}

TEST_CASE("range_map erase spanning several ranges", "[range_map]") {
    range_map m(false);
    for (uint64_t a = 0; a < 10; a++)
        m.insert(a * 0x2000, a * 0x2000 + 0x1000, a * 0x2000);
    REQUIRE(m.erase(0x1800, 0x8800) == 3 * 0x1000 + 0x800); // [0, 0x1000) is untouched
    REQUIRE(m.find(0x1000 - 1));
    REQUIRE_FALSE(m.find(0x2000));
    REQUIRE(m.find(0x8800)->start == 0x8800);
    REQUIRE(m.find(0x8800)->img_start == 0x8800);
}

TEST_CASE("range_map remap moves ranges and keeps image addresses", "[range_map]") {
    range_map m(false);
    m.insert(0x1000, 0x5000, 0x1000);
    m.insert(0x8000, 0x9000, 0x8000);
    // mremap of [0x2000, 0x4000) to 0x100000
    m.remap(0x2000, 0x100000, 0x2000);
    auto v = m.to_vector();
    REQUIRE(v == std::vector<address_range>{{0x1000, 0x2000, 0x1000},
                                            {0x4000, 0x5000, 0x4000},
                                            {0x8000, 0x9000, 0x8000},
                                            {0x100000, 0x102000, 0x2000}});
    REQUIRE(m.find(0x101000)->img_of(0x101000) == 0x3000);
    REQUIRE(m.bytes() == 0x5000);
}

TEST_CASE("range_map first_ending_after and covered_from", "[range_map]") {
    range_map m;
    m.insert(0x1000, 0x2000, 0x1000);
    m.insert(0x5000, 0x7000, 0x5000);
    REQUIRE(m.first_ending_after(0)->start == 0x1000);
    REQUIRE(m.first_ending_after(0x1800)->start == 0x1000);
    REQUIRE(m.first_ending_after(0x2000)->start == 0x5000);
    REQUIRE_FALSE(m.first_ending_after(0x7000));
    REQUIRE(m.covered_from(0x5800) == 0x1800);
    REQUIRE(m.covered_from(0x3000) == 0);
}

TEST_CASE("range_map copy is independent", "[range_map]") {
    range_map m(false);
    m.insert(0x1000, 0x3000, 0x1000);
    range_map c(m);
    c.erase(0x1000, 0x2000);
    REQUIRE(m.bytes() == 0x2000);
    REQUIRE(c.bytes() == 0x1000);
}
