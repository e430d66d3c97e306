#include "access_pattern.hpp"

#include <catch2/catch.hpp>

#include <random>

using ferry::lazy::access_pattern;
using kind = access_pattern::kind;

TEST_CASE("a sequential scan doubles the window up to its maximum", "[prefetch]") {
    access_pattern a(2, 64);
    uint64_t page = 1000;
    auto p = a.on_fault(page);
    REQUIRE(p.pattern == kind::random); // nothing to go by yet
    REQUIRE(p.window == 2);
    uint32_t expected = 2;
    for (int i = 0; i < 10; i++) {
        page += p.window; // the next fault lands right after the pages fetched
        p = a.on_fault(page);
        expected = std::min<uint32_t>(expected * 2, 64);
        REQUIRE(p.pattern == kind::sequential);
        REQUIRE(p.window == expected);
    }
    REQUIRE(p.window == 64);
}

TEST_CASE("a stride farther than the window is prefetched at that stride", "[prefetch]") {
    access_pattern a(4, 64);
    (void)a.on_fault(0);
    (void)a.on_fault(100); // the first distance: not yet a pattern
    for (uint64_t page = 200; page < 2000; page += 100) {
        const auto p = a.on_fault(page);
        REQUIRE(p.pattern == kind::strided);
        REQUIRE(p.stride_pages == 100);
        REQUIRE(p.strided == access_pattern::strided_prefetch);
        REQUIRE(p.window == 4);
    }
    // Backwards strides count too.
    access_pattern b(4, 64);
    (void)b.on_fault(10000);
    (void)b.on_fault(9950);
    REQUIRE(b.on_fault(9900).stride_pages == -50);
}

TEST_CASE("random faults keep the window at its minimum", "[prefetch]") {
    access_pattern a(2, 64);
    std::minstd_rand rng(3);
    int sequential = 0;
    for (int i = 0; i < 1000; i++) {
        const auto p = a.on_fault(rng() % 1'000'000);
        sequential += p.pattern == kind::sequential;
        if (p.pattern == kind::random)
            REQUIRE(p.window == 2);
    }
    REQUIRE(sequential < 10); // a chance hit now and then, no more
}

TEST_CASE("a scan that turns random drops back to the minimum", "[prefetch]") {
    access_pattern a(1, 32);
    uint64_t page = 0;
    auto p = a.on_fault(page);
    for (int i = 0; i < 6; i++)
        p = a.on_fault(page += p.window);
    REQUIRE(p.window == 32);
    p = a.on_fault(page + 5000);
    REQUIRE(p.pattern == kind::random);
    REQUIRE(p.window == 1);
}
