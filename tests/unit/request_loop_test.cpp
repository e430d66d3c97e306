// transport::serve_requests, the source's end of a page channel: replies
// carry the pages asked for, and the bytes it reports sent are the bytes
// that went out, for replies larger than the socket takes in one write;
// the CPU it reports is its thread's, no more than the time it ran.
#include "core/checksum.hpp"
#include "core/clock.hpp"
#include "core/page.hpp"
#include "patterned_source.hpp"
#include "sys/stream.hpp"
#include "transport/request_loop.hpp"
#include "wire/page_wire.hpp"

#include <fcntl.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

using namespace ferry;
using namespace ferry::transport;

namespace {

constexpr uint64_t base = 0x7f0000000000;
constexpr uint64_t pages = wire::max_pages_per_request;

// Asks for `n` pages at `vaddr` and reads the whole reply; returns its
// pages' first words, checked against their checksums.
std::vector<uint64_t> fetch(net::stream& s, uint64_t vaddr, uint32_t n, uint64_t id) {
    const auto req = wire::encode(wire::page_request{wire::op::get, 1, n, vaddr, id});
    net::write_full(s, req, net::no_deadline, "request");
    wire::header_bytes h;
    REQUIRE(net::read_full(s, h, net::no_deadline, "reply header"));
    wire::page_reply rep;
    REQUIRE(wire::decode(h, rep) == wire::decode_error::none);
    REQUIRE(rep.result == wire::status::ok);
    REQUIRE(rep.nr_pages == n);
    CHECK(rep.request_id == id);
    std::vector<uint64_t> sums(n);
    std::vector<std::byte> data(size_t(n) * page_size);
    REQUIRE(net::read_full(s, std::as_writable_bytes(std::span(sums)), net::no_deadline, "sums"));
    REQUIRE(net::read_full(s, data, net::no_deadline, "pages"));
    std::vector<uint64_t> first(n);
    for (uint32_t i = 0; i < n; i++) {
        CHECK(page_checksum(data.data() + size_t(i) * page_size) == sums[i]);
        std::memcpy(&first[i], data.data() + size_t(i) * page_size, sizeof first[i]);
    }
    return first;
}

} // namespace

TEST_CASE("a page channel's source sends what is asked and counts every byte it sent") {
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    // Non-blocking, with a small send buffer, as pagesrv's sockets are
    // under load: a 4 MiB reply takes many partial writes.
    const int small = 64 * 1024;
    REQUIRE(::setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small) == 0);
    REQUIRE(::fcntl(sv[0], F_SETFL, ::fcntl(sv[0], F_GETFL) | O_NONBLOCK) == 0);
    net::socket_stream server{unique_fd(sv[0])};
    net::socket_stream client{unique_fd(sv[1])};
    test::patterned_source src(base, pages);
    const uint64_t started = monotonic_ns();
    std::thread serving([&] { serve_requests(server, src); });

    const auto few = fetch(client, base + 5 * page_size, 3, 7);
    CHECK(few ==
          std::vector<uint64_t>{base + 5 * page_size, base + 6 * page_size, base + 7 * page_size});
    const auto all = fetch(client, base, uint32_t(pages), 8);
    CHECK(all.front() == base);
    CHECK(all.back() == base + (pages - 1) * page_size);
    const auto done = wire::encode(wire::page_request{wire::op::done, 1, 0, 0, 9});
    net::write_full(client, done, net::no_deadline, "done");
    client.shutdown();
    serving.join();
    const uint64_t ran_ns = monotonic_ns() - started;

    CHECK(src.done);
    // Reading and checksumming 4 MiB is not free, and one thread's CPU
    // cannot exceed the time it existed.
    CHECK(src.cpu_ns > 0);
    CHECK(src.cpu_ns <= ran_ns);
    CHECK(src.sent == 3 + pages);
    CHECK(src.sent_bytes ==
          2 * wire::page_header_size + (3 + pages) * (sizeof(uint64_t) + page_size));
}

TEST_CASE("a page channel's source hears that the destination killed its copy, and sends nothing") {
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    net::socket_stream server{unique_fd(sv[0])};
    net::socket_stream client{unique_fd(sv[1])};
    test::patterned_source src(base, pages);
    std::thread serving([&] { serve_requests(server, src); });
    const auto discarded = wire::encode(wire::page_request{wire::op::discarded, 0, 0, 0, 1});
    net::write_full(client, discarded, net::no_deadline, "discarded");
    // A page asked after the notice is still served: the notice is no reply.
    CHECK(fetch(client, base, 1, 2) == std::vector<uint64_t>{base});
    client.shutdown();
    serving.join();
    CHECK(src.discarded);
    CHECK_FALSE(src.done);
    CHECK(src.sent == 1);
}
