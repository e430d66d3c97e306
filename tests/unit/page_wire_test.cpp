#include "core/checksum.hpp"
#include "wire/page_wire.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

// A named namespace keeps the directive out of the other tests in a unity build.
namespace page_wire_test {
using namespace ferry::wire;

TEST_CASE("page request round-trips with its documented layout", "[wire]") {
    page_request r{op::get, 1234, 17, 0x7f0000001000ull, 0x1122334455667788ull};
    auto b = encode(r);
    // Spot-check the layout: magic "FRYQ", version 1, little-endian fields.
    REQUIRE(std::memcmp(b.data(), "FRYQ", 4) == 0);
    REQUIRE(std::to_integer<int>(b[4]) == 1);
    REQUIRE(std::to_integer<int>(b[8]) == (1234 & 0xff));
    REQUIRE(std::to_integer<int>(b[24]) == 0x88);
    page_request out;
    REQUIRE(decode(b, out) == decode_error::none);
    REQUIRE(out.operation == op::get);
    REQUIRE(out.pid == 1234);
    REQUIRE(out.nr_pages == 17);
    REQUIRE(out.vaddr == 0x7f0000001000ull);
    REQUIRE(out.request_id == 0x1122334455667788ull);
}

TEST_CASE("page reply round-trips", "[wire]") {
    page_reply r{status::out_of_range, 7, 0, 0x2000, 99};
    page_reply out;
    REQUIRE(decode(encode(r), out) == decode_error::none);
    REQUIRE(out.result == status::out_of_range);
    REQUIRE(out.request_id == 99);
}

TEST_CASE("malformed page frames are rejected", "[wire]") {
    page_request good{op::get, 1, 1, 0x1000, 1};
    page_request out;

    auto b = encode(good);
    b[0] = std::byte{'X'};
    REQUIRE(decode(b, out) == decode_error::bad_magic);

    b = encode(good);
    b[4] = std::byte{2};
    REQUIRE(decode(b, out) == decode_error::bad_version);

    b = encode(good);
    b[6] = std::byte{9};
    REQUIRE(decode(b, out) == decode_error::bad_op);

    REQUIRE(decode(encode(page_request{op::get, 1, 0, 0x1000, 1}), out) ==
            decode_error::bad_length);
    REQUIRE(decode(encode(page_request{op::get, 1, max_pages_per_request + 1, 0x1000, 1}), out) ==
            decode_error::bad_length);
    REQUIRE(decode(encode(page_request{op::get, 1, 1, 0x1001, 1}), out) == decode_error::unaligned);
    // A request header is not a reply.
    page_reply rep;
    REQUIRE(decode(encode(good), rep) == decode_error::bad_magic);
    // An error reply must not carry pages.
    REQUIRE(decode(encode(page_reply{status::read_failed, 1, 3, 0x1000, 1}), rep) ==
            decode_error::bad_length);
    auto rb = encode(page_reply{status::ok, 1, 1, 0x1000, 1});
    rb[6] = std::byte{42};
    REQUIRE(decode(rb, rep) == decode_error::bad_status);
}

TEST_CASE("the destination's notices carry no pages", "[wire]") {
    page_request out;
    REQUIRE(decode(encode(page_request{op::discarded, 0, 0, 0, 5}), out) == decode_error::none);
    REQUIRE(out.operation == op::discarded);
    REQUIRE(decode(encode(page_request{op::done, 0, 0, 0, 6}), out) == decode_error::none);
    REQUIRE(is_notice(op::discarded));
    REQUIRE(is_notice(op::done));
    REQUIRE_FALSE(is_notice(op::get));
    REQUIRE_FALSE(is_notice(op::refetch));
}

TEST_CASE("page checksums detect a single flipped bit", "[checksum]") {
    std::vector<unsigned char> page(ferry::page_size);
    for (size_t i = 0; i < page.size(); i++)
        page[i] = static_cast<unsigned char>(i * 31);
    const uint64_t sum = ferry::page_checksum(page.data());
    REQUIRE(sum == ferry::page_checksum(page.data()));
    for (size_t bit : {0ul, 777ul, 4095ul * 8 + 7}) {
        page[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
        REQUIRE(ferry::page_checksum(page.data()) != sum);
        page[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    }
    // Zero pages at different addresses agree; the checksum covers content only.
    std::vector<unsigned char> z1(ferry::page_size), z2(ferry::page_size);
    REQUIRE(ferry::page_checksum(z1.data()) == ferry::page_checksum(z2.data()));
}

} // namespace page_wire_test
