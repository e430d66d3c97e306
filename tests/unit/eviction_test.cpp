// Eviction policies: each one's order, and LRU/LFU against plain reference
// models under random operations.
#include "core/error.hpp"
#include "eviction.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <list>
#include <map>
#include <random>
#include <set>
#include <vector>

using namespace ferry;
using pagesrv::make_eviction_policy;

namespace {

std::vector<uint32_t> drain(pagesrv::eviction_policy& p) {
    std::vector<uint32_t> out;
    while (auto v = p.victim())
        out.push_back(*v);
    return out;
}

} // namespace

TEST_CASE("eviction: fifo evicts in store order, reads do not matter") {
    auto p = make_eviction_policy("fifo", 8);
    for (uint32_t s : {3, 1, 2})
        p->stored(s);
    p->accessed(3);
    CHECK(drain(*p) == std::vector<uint32_t>{3, 1, 2});
}

TEST_CASE("eviction: lru evicts the least recently used") {
    auto p = make_eviction_policy("lru", 8);
    for (uint32_t s : {0, 1, 2})
        p->stored(s);
    p->accessed(0);
    CHECK(drain(*p) == std::vector<uint32_t>{1, 2, 0});
}

TEST_CASE("eviction: lfu evicts the least frequently used, oldest first among equals") {
    auto p = make_eviction_policy("lfu", 8);
    for (uint32_t s : {0, 1, 2, 3})
        p->stored(s);
    p->accessed(2);
    p->accessed(2);
    p->accessed(0);
    p->accessed(3); // frequencies: 0:2, 1:1, 2:3, 3:2
    CHECK(drain(*p) == std::vector<uint32_t>{1, 0, 3, 2});
}

TEST_CASE("eviction: clock gives referenced slots a second chance") {
    auto p = make_eviction_policy("clock", 4);
    for (uint32_t s : {0, 1, 2, 3})
        p->stored(s);
    CHECK(p->victim() == 0u); // a full sweep clears every bit, then 0 goes
    p->accessed(1);
    CHECK(p->victim() == 2u); // 1 was read again: spared
    CHECK(p->victim() == 3u);
    CHECK(p->victim() == 1u);
    CHECK_FALSE(p->victim());
}

TEST_CASE("eviction: random is seeded, complete, and skips removed slots") {
    auto a = make_eviction_policy("random", 64, 9), b = make_eviction_policy("random", 64, 9);
    for (uint32_t s = 0; s < 64; s++) {
        a->stored(s);
        b->stored(s);
    }
    a->removed(10);
    b->removed(10);
    const auto va = drain(*a), vb = drain(*b);
    CHECK(va == vb);
    std::set<uint32_t> seen(va.begin(), va.end());
    CHECK(seen.size() == 63);
    CHECK_FALSE(seen.count(10));
    CHECK(va != std::vector<uint32_t>(seen.begin(), seen.end())); // not just in order
}

TEST_CASE("eviction: every policy ignores unknown slots and empties cleanly") {
    for (auto name : {"fifo", "lru", "lfu", "clock", "random"}) {
        CAPTURE(name);
        auto p = make_eviction_policy(name, 4);
        CHECK_FALSE(p->victim());
        p->accessed(2);
        p->removed(3);
        p->stored(99); // outside the arena: ignored
        p->stored(1);
        p->stored(1); // twice: still one entry
        CHECK(p->victim() == 1u);
        CHECK_FALSE(p->victim());
        CHECK(p->name() == name);
    }
    CHECK_THROWS_AS(make_eviction_policy("mru", 4), error);
    CHECK_THROWS_AS(make_eviction_policy("lru", 0), error);
}

TEST_CASE("eviction: lru and lfu match reference models under random operations") {
    constexpr uint32_t cap = 64;
    std::mt19937_64 rng(1234);
    auto lru = make_eviction_policy("lru", cap);
    auto lfu = make_eviction_policy("lfu", cap);
    std::list<uint32_t> lru_ref;                               // front = next victim
    std::map<uint32_t, std::pair<uint32_t, uint64_t>> lfu_ref; // slot -> (freq, tick of last move)
    uint64_t tick = 0;
    auto lfu_ref_victim = [&] {
        auto best = lfu_ref.begin();
        for (auto it = lfu_ref.begin(); it != lfu_ref.end(); ++it)
            if (it->second < best->second)
                best = it;
        return best;
    };
    for (int op = 0; op < 20000; op++) {
        const uint32_t s = uint32_t(rng() % cap);
        switch (rng() % 4) {
        case 0: // store (if absent)
            if (!lfu_ref.count(s)) {
                lru->stored(s);
                lfu->stored(s);
                lru_ref.push_back(s);
                lfu_ref[s] = {1, tick++};
            }
            break;
        case 1: // read
            lru->accessed(s);
            lfu->accessed(s);
            if (lfu_ref.count(s)) {
                lru_ref.remove(s);
                lru_ref.push_back(s);
                lfu_ref[s] = {lfu_ref[s].first + 1, tick++};
            }
            break;
        case 2: // delete
            lru->removed(s);
            lfu->removed(s);
            lru_ref.remove(s);
            lfu_ref.erase(s);
            break;
        case 3: // evict
            if (lfu_ref.empty()) {
                REQUIRE_FALSE(lru->victim());
                REQUIRE_FALSE(lfu->victim());
                break;
            }
            const uint32_t lru_victim = lru_ref.front();
            REQUIRE(lru->victim() == lru_victim);
            lru_ref.pop_front();
            const uint32_t lfu_victim = lfu_ref_victim()->first;
            REQUIRE(lfu->victim() == lfu_victim);
            lfu_ref.erase(lfu_victim);
            // Keep both tracking the same set: each drops the other's victim.
            lfu->removed(lru_victim);
            lfu_ref.erase(lru_victim);
            lru->removed(lfu_victim);
            lru_ref.remove(lfu_victim);
            break;
        }
    }
}
