// The pool node's store: arena, disk tier, eviction, integrity.
#include "core/error.hpp"
#include "pool_store.hpp"
#include "temp_dir.hpp"

#include <catch2/catch.hpp>
#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

using namespace ferry;
using namespace ferry::pagesrv;
using pool::status;
using pool::tier;

using test::temp_dir;

namespace {

constexpr uint32_t chunk = 4096;

std::vector<std::byte> pattern(uint64_t id) {
    std::vector<std::byte> v(chunk);
    for (size_t i = 0; i < v.size(); i++)
        v[i] = std::byte((id * 131 + i * 7) & 0xff);
    return v;
}

struct read_back {
    status st;
    tier from = tier::none;
    std::vector<std::byte> data = std::vector<std::byte>(chunk);
    std::array<std::byte, pool::max_meta_len> meta{};
    uint32_t meta_len = 0, data_len = 0;
};

read_back get(pool_store& s, uint64_t object, uint64_t id) {
    read_back r;
    r.st = s.get(object, id, r.meta.data(), r.meta_len, r.data.data(), r.data_len, r.from);
    return r;
}

void put(pool_store& s, uint64_t object, uint64_t id) {
    const auto d = pattern(id);
    const std::array<std::byte, 8> meta{std::byte(id), std::byte(object)};
    REQUIRE(s.put(object, id, meta, d) == status::ok);
}

pool_store_config small(const temp_dir& t, const std::string& policy, uint32_t slots) {
    return pool_store_config{.capacity_bytes = uint64_t(slots) * chunk,
                             .chunk_size = chunk,
                             .tier_dir = t.path,
                             .eviction = policy};
}

} // namespace

TEST_CASE("pool store: chunks read back with their metadata; overwrite replaces") {
    temp_dir t;
    pool_store s(small(t, "lru", 8));
    put(s, 7, 1);
    auto r = get(s, 7, 1);
    REQUIRE(r.st == status::ok);
    CHECK(r.from == tier::memory);
    CHECK(r.data == pattern(1));
    CHECK(r.data_len == chunk);
    REQUIRE(r.meta_len == 8);
    CHECK(r.meta[0] == std::byte(1));
    CHECK(r.meta[1] == std::byte(7));
    // Same chunk id, other content: the new one wins.
    const auto other = pattern(99);
    REQUIRE(s.put(7, 1, {}, other) == status::ok);
    r = get(s, 7, 1);
    CHECK(r.data == other);
    CHECK(r.meta_len == 0);
    CHECK(get(s, 7, 2).st == status::not_found);
    CHECK(get(s, 8, 1).st == status::not_found);
    const auto c = s.counters();
    CHECK(c.puts == 2);
    CHECK(c.memory_hits == 2);
    CHECK(c.disk_misses == 2);
    // A chunk larger than a slot is refused.
    std::vector<std::byte> big(chunk + 512);
    CHECK(s.put(7, 3, {}, big) == status::bad_request);
}

TEST_CASE("pool store: past the arena, chunks go to disk and all read back correct") {
    for (const char* policy : {"fifo", "lru", "lfu", "clock", "random"}) {
        DYNAMIC_SECTION(policy) {
            temp_dir t;
            pool_store s(small(t, policy, 16));
            for (uint64_t id = 0; id < 64; id++)
                put(s, 1, id);
            auto c = s.counters();
            CHECK(c.evictions == 48);
            uint64_t from_disk = 0;
            for (uint64_t id = 0; id < 64; id++) {
                const auto r = get(s, 1, id);
                REQUIRE(r.st == status::ok);
                CHECK(r.data == pattern(id));
                from_disk += r.from == tier::disk;
            }
            c = s.counters();
            CHECK(from_disk == c.disk_hits);
            CHECK(c.disk_hits >= 48); // every chunk that was on disk came back from there
            CHECK(c.promotions == c.disk_hits);
            CHECK(c.memory_hits + c.memory_misses == 64);
        }
    }
}

TEST_CASE("pool store: the policy chooses what leaves memory") {
    temp_dir t;
    SECTION("lru keeps the chunk read last") {
        pool_store s(small(t, "lru", 4));
        for (uint64_t id = 0; id < 4; id++)
            put(s, 1, id);
        REQUIRE(get(s, 1, 0).from == tier::memory); // 0 is now the most recent
        put(s, 1, 4);                               // evicts 1, the least recent
        CHECK(get(s, 1, 0).from == tier::memory);
        CHECK(get(s, 1, 1).from == tier::disk);
    }
    SECTION("fifo evicts the oldest stored, reads or not") {
        pool_store s(small(t, "fifo", 4));
        for (uint64_t id = 0; id < 4; id++)
            put(s, 1, id);
        REQUIRE(get(s, 1, 0).from == tier::memory);
        put(s, 1, 4); // evicts 0 despite the read
        CHECK(get(s, 1, 0).from == tier::disk);
    }
    SECTION("lfu keeps the chunk read most often") {
        pool_store s(small(t, "lfu", 4));
        for (uint64_t id = 0; id < 4; id++)
            put(s, 1, id);
        for (int i = 0; i < 3; i++)
            for (uint64_t id : {0, 1, 2})
                REQUIRE(get(s, 1, id).from == tier::memory);
        put(s, 1, 4); // 3 was never read
        CHECK(get(s, 1, 3).from == tier::disk);
        CHECK(get(s, 1, 0).from == tier::memory);
    }
}

TEST_CASE("pool store: drop forgets one object only") {
    temp_dir t;
    pool_store s(small(t, "lru", 4));
    for (uint64_t id = 0; id < 6; id++) { // two of them end on disk
        put(s, 1, id);
        put(s, 2, id);
    }
    CHECK(s.drop(1) == 6);
    for (uint64_t id = 0; id < 6; id++) {
        CHECK(get(s, 1, id).st == status::not_found);
        const auto r = get(s, 2, id);
        REQUIRE(r.st == status::ok);
        CHECK(r.data == pattern(id));
    }
    CHECK(s.drop(1) == 0);
    CHECK(s.counters().drops == 6);
}

TEST_CASE("pool store: a full disk tier says no_space and loses nothing") {
    temp_dir t;
    auto cfg = small(t, "lru", 2);
    cfg.disk_capacity_bytes = 2 * chunk;
    pool_store s(cfg);
    for (uint64_t id = 0; id < 4; id++)
        put(s, 1, id);
    const auto d = pattern(9);
    CHECK(s.put(1, 9, {}, d) == status::no_space);
    for (uint64_t id = 0; id < 4; id++) {
        const auto r = get(s, 1, id);
        REQUIRE(r.st == status::ok);
        CHECK(r.data == pattern(id));
    }
    CHECK(get(s, 1, 9).st == status::not_found);
}

TEST_CASE("pool store: a damaged disk tier gives corrupt, never the bad bytes") {
    temp_dir t;
    pool_store s(small(t, "fifo", 2));
    for (uint64_t id = 0; id < 6; id++)
        put(s, 1, id); // 0..3 go to disk
    {
        const int fd = ::open(s.tier_file().c_str(), O_WRONLY);
        REQUIRE(fd >= 0);
        const std::vector<char> junk(4 * chunk, 'x');
        REQUIRE(::pwrite(fd, junk.data(), junk.size(), 0) == ssize_t(junk.size()));
        ::close(fd);
    }
    uint64_t corrupt = 0;
    for (uint64_t id = 0; id < 6; id++) {
        const auto r = get(s, 1, id);
        if (r.st == status::corrupt)
            corrupt++;
        else
            CHECK((r.st == status::ok && r.data == pattern(id)));
    }
    CHECK(corrupt == 4);
    CHECK(s.counters().corrupt == 4);
}

TEST_CASE("pool store: sizes parse with units and bad text is refused") {
    CHECK(parse_size("4096") == 4096);
    CHECK(parse_size("512K") == 512u << 10);
    CHECK(parse_size("64M") == 64u << 20);
    CHECK(parse_size("1G") == 1ull << 30);
    CHECK_THROWS_AS(parse_size(""), ferry::error);
    CHECK_THROWS_AS(parse_size("12Q"), ferry::error);
    CHECK_THROWS_AS(parse_size("M"), ferry::error);
    pool_store_config tiny;
    tiny.capacity_bytes = 100; // not one chunk
    tiny.tier_dir = "/tmp";
    CHECK_THROWS_AS(pool_store(tiny), ferry::error);
}

// What a one-sided reader does (pool_one_sided.cpp), done on the store's own
// memory: the chunk's window, its bucket, then the slot's data and metadata
// checked against the bucket's checksum.
namespace {
std::optional<std::vector<std::byte>> read_one_sided(pool_store& s, uint64_t object, uint64_t id) {
    const auto a = s.arena();
    const auto* table = reinterpret_cast<const pool::directory_bucket*>(a.directory->data());
    const uint64_t home = pool::directory_home(object, id, a.directory->buckets());
    const auto b = pool::find_in_window({table + home, pool::directory_window}, object, id);
    if (!b)
        return std::nullopt;
    const std::byte* data = a.chunks + size_t(b->slot_plus_one - 1) * chunk;
    const std::byte* meta = a.meta + size_t(b->slot_plus_one - 1) * a.meta_stride;
    REQUIRE(pool::chunk_checksum(data, b->data_len, meta, b->meta_len) == b->checksum);
    return std::vector<std::byte>(data, data + b->data_len);
}
} // namespace

TEST_CASE("the directory shows one-sided readers every chunk in the arena, and only those",
          "[pool][store]") {
    temp_dir t;
    pool_store s(small(t, "lru", 8));
    for (uint64_t id = 0; id < 8; id++)
        put(s, 7, id);
    for (uint64_t id = 0; id < 8; id++)
        REQUIRE(read_one_sided(s, 7, id) == pattern(id));
    REQUIRE_FALSE(read_one_sided(s, 8, 0)); // another object's chunk 0
    // A ninth chunk evicts the least recently used (chunk 0) to disk: it
    // leaves the directory, the newcomer enters it.
    put(s, 7, 8);
    REQUIRE_FALSE(read_one_sided(s, 7, 0));
    REQUIRE(read_one_sided(s, 7, 8) == pattern(8));
    // Read back (two-sided) from disk, it is promoted and visible again.
    REQUIRE(get(s, 7, 0).from == tier::disk);
    REQUIRE(read_one_sided(s, 7, 0) == pattern(0));
    // Replacing a chunk moves its bucket to the new copy.
    const auto other = pattern(99);
    REQUIRE(s.put(7, 3, std::array<std::byte, 8>{}, other) == status::ok);
    REQUIRE(read_one_sided(s, 7, 3) == other);
    // Dropping the object empties its buckets.
    REQUIRE(s.drop(7) > 0);
    for (uint64_t id = 0; id <= 8; id++)
        REQUIRE_FALSE(read_one_sided(s, 7, id));
}

TEST_CASE("a full directory window leaves the chunk to two-sided reads", "[pool]") {
    pool::pool_directory d(4); // 8 buckets
    // Nine chunks whose windows are the same eight buckets.
    std::vector<uint64_t> ids;
    const uint64_t home = pool::directory_home(1, 0, d.buckets());
    for (uint64_t id = 0; ids.size() < 9; id++)
        if (pool::directory_home(1, id, d.buckets()) == home)
            ids.push_back(id);
    for (uint32_t i = 0; i < 8; i++)
        REQUIRE(d.publish(1, ids[i], i, 4096, 8, i));
    REQUIRE_FALSE(d.publish(1, ids[8], 9, 4096, 8, 9));
    REQUIRE(d.publish(1, ids[3], 12, 4096, 8, 12)); // an update needs no free bucket
    const auto* table = reinterpret_cast<const pool::directory_bucket*>(d.data());
    const auto b = pool::find_in_window({table + home, pool::directory_window}, 1, ids[3]);
    REQUIRE(b);
    REQUIRE(b->slot_plus_one == 13);
    d.unpublish(1, ids[5]);
    REQUIRE_FALSE(pool::find_in_window({table + home, pool::directory_window}, 1, ids[5]));
    REQUIRE(d.publish(1, ids[8], 9, 4096, 8, 9));
}
