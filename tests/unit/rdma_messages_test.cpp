// What the rdma backend accepts from a peer before any READ: the connect's
// token (token_gate) and the stage RPC's messages. No device needed.
#include "transport/rdma/rdma_messages.hpp"
#include "transport/rdma/token_gate.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

using namespace ferry::transport::rdma;

namespace {

// A connect's private data as the CM delivers it: the hello, zero-padded to
// the 56 bytes RDMA_PS_TCP carries.
std::vector<std::byte> padded_hello(const channel_token& t) {
    connect_hello h;
    h.token = t;
    std::vector<std::byte> out(56);
    std::memcpy(out.data(), &h, sizeof h);
    return out;
}

} // namespace

TEST_CASE("a token admits exactly one connect, and only an issued one", "[rdma_wire]") {
    token_gate gate(4);
    const auto t = gate.issue();
    const auto u = gate.issue();
    REQUIRE(t != u);
    REQUIRE(gate.admit(padded_hello(t)));
    REQUIRE_FALSE(gate.admit(padded_hello(t))); // used up
    REQUIRE(gate.admit(padded_hello(u)));

    auto forged = gate.issue();
    auto wrong = forged;
    wrong[0] ^= std::byte{1};
    REQUIRE_FALSE(gate.admit(padded_hello(wrong)));
    REQUIRE(gate.admit(padded_hello(forged)));

    // Too short, or not a hello at all.
    const auto v = gate.issue();
    auto bytes = padded_hello(v);
    REQUIRE_FALSE(gate.admit(std::span(bytes).first(sizeof(connect_hello) - 1)));
    auto bad_magic = bytes;
    bad_magic[0] ^= std::byte{0xff};
    REQUIRE_FALSE(gate.admit(bad_magic));
    REQUIRE(gate.admit(bytes));
}

TEST_CASE("issuing beyond the limit retires the oldest token", "[rdma_wire]") {
    token_gate gate(2);
    const auto a = gate.issue();
    const auto b = gate.issue();
    const auto c = gate.issue();
    REQUIRE_FALSE(gate.admit(padded_hello(a)));
    REQUIRE(gate.admit(padded_hello(b)));
    REQUIRE(gate.admit(padded_hello(c)));
}

TEST_CASE("stage messages are read only at their exact size and magic", "[rdma_wire]") {
    stage_message m;
    m.ask = stage_ask::restage;
    m.first_page = 12345;
    m.count = 7;
    m.tag = 3;
    const auto bytes = as_bytes(m);
    const auto back = message_from<stage_message>(bytes);
    REQUIRE(back);
    REQUIRE(back->ask == stage_ask::restage);
    REQUIRE(back->first_page == 12345);
    REQUIRE(back->count == 7);
    REQUIRE(back->tag == 3);
    REQUIRE_FALSE(message_from<stage_message>(bytes.first(bytes.size() - 1)));
    std::vector<std::byte> longer(bytes.begin(), bytes.end());
    longer.push_back(std::byte{0});
    REQUIRE_FALSE(message_from<stage_message>(longer));
    // An answer is not a request, though both are 24 bytes or less.
    staged_message a;
    REQUIRE_FALSE(message_from<stage_message>(as_bytes(a)));
    REQUIRE(message_from<staged_message>(as_bytes(a)));
    std::vector<std::byte> flipped(bytes.begin(), bytes.end());
    flipped[1] ^= std::byte{0x10};
    REQUIRE_FALSE(message_from<stage_message>(flipped));
}
