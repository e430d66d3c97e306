#include "core/page.hpp"
#include "criu/lazy_page_index.hpp"
#include "pool/pool_layout.hpp"

#include <catch2/catch.hpp>

#include <set>

using namespace ferry;
using namespace ferry::pool;

TEST_CASE("whole-page stripes: one page per data member, members rotate over the nodes") {
    const auto l = stripe_layout::make(raid::level::raid5, 5, stripe_kind::whole_pages);
    CHECK(l.geo.data == 4);
    CHECK(l.pages_per_stripe == 4);
    CHECK(l.member_len == page_size);
    CHECK(l.meta_len() == 32);
    CHECK(l.stripe_of_page(9) == 2);
    CHECK(l.first_member_of_page(9) == 1);
    CHECK(l.last_member_of_page(9) == 1);
    // Every stripe puts its 5 members on 5 different nodes, and parity moves.
    std::set<uint32_t> parity_nodes;
    for (uint64_t s = 0; s < 10; s++) {
        std::set<uint32_t> nodes;
        for (uint32_t m = 0; m < 5; m++)
            nodes.insert(l.node_of(s, m));
        CHECK(nodes.size() == 5);
        parity_nodes.insert(l.node_of(s, 4));
    }
    CHECK(parity_nodes.size() == 5);
    CHECK(l.stripes_for(9) == 3);
}

TEST_CASE("split-page stripes cut a page into equal slices, or refuse") {
    const auto l = stripe_layout::make(raid::level::raid6, 6, stripe_kind::split_pages);
    CHECK(l.pages_per_stripe == 1);
    CHECK(l.member_len == 1024);
    CHECK(l.first_member_of_page(7) == 0);
    CHECK(l.last_member_of_page(7) == 3);
    CHECK(l.meta_len() == 8);
    // RAID-5 over 4 nodes has 3 data members: 4096 / 3 is not a slice.
    CHECK_THROWS(stripe_layout::make(raid::level::raid5, 4, stripe_kind::split_pages));
    CHECK_THROWS(stripe_layout::make(raid::level::raid6, 3, stripe_kind::whole_pages));
}

TEST_CASE("pool spec round-trips through its text form and rejects bad input") {
    pool_spec s;
    s.nodes = pool_spec::parse_nodes("10.0.0.1:7140,10.0.0.2:7140,10.0.0.3:7140");
    s.spares = pool_spec::parse_nodes("10.0.0.4:7140");
    s.level = raid::level::raid5;
    s.kind = stripe_kind::split_pages;
    s.nodes.push_back(net::parse_endpoint("10.0.0.5:7140")); // 4 nodes: 3 data... split needs 2^k
    CHECK_THROWS(s.layout());
    s.nodes.push_back(net::parse_endpoint("10.0.0.6:7140"));
    const auto back = pool_spec::parse(s.to_string());
    CHECK(back.to_string() == s.to_string());
    CHECK(back.nodes.size() == 5);
    CHECK(back.spares.size() == 1);
    CHECK(back.level == raid::level::raid5);
    CHECK(back.kind == stripe_kind::split_pages);
    CHECK_THROWS(pool_spec::parse("raid=5"));
    CHECK_THROWS(pool_spec::parse("raid=7 nodes=10.0.0.1:1,10.0.0.2:1,10.0.0.3:1"));
    CHECK_THROWS(pool_spec::parse("raid=6 nodes=10.0.0.1:1,10.0.0.2:1,10.0.0.3:1"));
    CHECK_THROWS(pool_spec::parse("raid=5 colour=blue nodes=10.0.0.1:1,10.0.0.2:1,10.0.0.3:1"));

    // A parked workload's pages keep the object id of the checkpoint.
    CHECK(s.object_of("m1") == object_for("m1"));
    s.object = 0x00ab00cd00ef0012ull;
    const auto named = pool_spec::parse(s.to_string());
    REQUIRE(named.object);
    CHECK(*named.object == 0x00ab00cd00ef0012ull);
    CHECK(named.object_of("m1") == 0x00ab00cd00ef0012ull);
    CHECK(pool_spec::parse("raid=0 object=ff nodes=10.0.0.1:1").object == 0xffu);
    CHECK_THROWS(pool_spec::parse("raid=0 object=xyz nodes=10.0.0.1:1"));
    CHECK_THROWS(pool_spec::parse("raid=0 object= nodes=10.0.0.1:1"));
    CHECK_THROWS(pool_spec::parse("raid=0 object=12345678901234567 nodes=10.0.0.1:1"));
    CHECK_THROWS(pool_spec::parse_nodes("10.0.0.1:1,,10.0.0.2:1"));
    CHECK_THROWS(pool_spec::parse_nodes(""));
}

TEST_CASE("the lazy page index numbers pages in (pid, address) order") {
    criu::lazy_page_index idx;
    idx.add(1, 0x10000, 0x14000); // pages 0-3
    idx.add(1, 0x20000, 0x21000); // page 4
    idx.add(7, 0x10000, 0x12000); // pages 5-6
    CHECK(idx.total_pages() == 7);
    CHECK(idx.find(1, 0x10000, 4) == 0u);
    CHECK(idx.find(1, 0x13000, 1) == 3u);
    CHECK(idx.find(1, 0x20000, 1) == 4u);
    CHECK(idx.find(7, 0x11000, 1) == 6u);
    CHECK_FALSE(idx.find(1, 0x13000, 2)); // runs past the range
    CHECK_FALSE(idx.find(2, 0x10000, 1));
    CHECK_FALSE(idx.find(7, 0x12000, 1));
    CHECK_THROWS(idx.add(1, 0x30000, 0x31000)); // out of order
    CHECK_THROWS(idx.add(9, 0x30001, 0x31000)); // unaligned
    CHECK(object_for("abc") == object_for("abc"));
    CHECK(object_for("abc") != object_for("abd"));
}
