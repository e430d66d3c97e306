// The rdma backend's two halves against a real RDMA device, in one process:
// the source's registered staging region and stage RPC (rdma_server), and
// the destination's channel (rdma_channel). Hidden ("[.rdma]"): they need
// an RDMA device, so integration-vm runs them inside a VM with Soft-RoCE,
// with FERRY_RDMA_TEST_IP naming that device's address.
#include "core/checksum.hpp"
#include "core/clock.hpp"
#include "core/page.hpp"
#include "criu/lazy_page_index.hpp"
#include "sys/net.hpp"
#include "transport/backend.hpp"
#include "transport/rdma/rdma_channel.hpp"

#include <catch2/catch.hpp>
#include <sys/socket.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <list>
#include <thread>
#include <vector>

using namespace ferry;

namespace {

constexpr uint32_t test_pid = 4242;
constexpr uint64_t rdma_test_base = 0x7f0000000000;

// The frozen task's memory, as the staging thread reads it: a pattern
// per page, read `delay_us` slowly per call, with the first read of one
// page coming back damaged (its checksum is of the good data).
class pattern_source final : public transport::page_source {
  public:
    explicit pattern_source(uint64_t pages) {
        _index.add(test_pid, rdma_test_base, rdma_test_base + pages * page_size);
    }
    const std::string& id() const noexcept override { return _id; }
    const criu::lazy_page_index& lazy_pages() const noexcept override { return _index; }
    wire::status read_pages(const wire::page_request& r, std::byte* pages,
                            uint64_t* checksums) override {
        if (delay_us)
            std::this_thread::sleep_for(std::chrono::microseconds(delay_us.load()));
        for (uint32_t i = 0; i < r.nr_pages; i++) {
            const uint64_t page = (r.vaddr - rdma_test_base) / page_size + i;
            fill(page, pages + size_t(i) * page_size);
            checksums[i] = page_checksum(pages + size_t(i) * page_size);
            if (page == damaged_page && !damage_done.exchange(true))
                pages[size_t(i) * page_size + 100] ^= std::byte{0xff};
        }
        staged += r.nr_pages;
        return wire::status::ok;
    }
    void count_sent(uint64_t, uint64_t) noexcept override {}
    void destination_done() override {}

    static void fill(uint64_t page, std::byte* out) {
        for (size_t w = 0; w < page_size / 8; w++) {
            const uint64_t v = page * 0x9e3779b97f4a7c15ull + w;
            std::memcpy(out + w * 8, &v, 8);
        }
    }

    std::atomic<uint32_t> delay_us{0};
    std::atomic<uint64_t> damaged_page{~0ull};
    std::atomic<bool> damage_done{false};
    std::atomic<uint64_t> staged{0};

  private:
    std::string _id = "rdma-unit-test";
    criu::lazy_page_index _index;
};

std::string rdma_ip() {
    const char* ip = std::getenv("FERRY_RDMA_TEST_IP");
    REQUIRE(ip != nullptr); // run by integration-vm, which sets it
    return ip;
}

// A TCP connection to ourselves on the RDMA device's address: the control
// connection whose peer address the channel dials with the RDMA CM.
struct control_pair {
    unique_fd server, client;
    explicit control_pair(const std::string& ip) {
        auto any = net::parse_endpoint(ip + ":1");
        any.addr.sin_port = 0;
        unique_fd l = net::tcp_listen(any, 2);
        client = net::tcp_connect(net::local_endpoint(l.get()), std::chrono::seconds(5));
        server.reset(::accept4(l.get(), nullptr, nullptr, SOCK_CLOEXEC));
        REQUIRE(server);
    }
};

// A migration's source half and a channel to it.
struct rdma_pair {
    const transport::backend& backend = transport::find("rdma");
    pattern_source src;
    std::unique_ptr<transport::source_state> state;
    std::list<control_pair> controls;
    FerryControl__PageChannelAccepted ok = FERRY_CONTROL__PAGE_CHANNEL_ACCEPTED__INIT;
    std::unique_ptr<transport::accept_storage> keep;

    // The source's staging starts at once, as at a migration's commit (the
    // stager stages every page only from then on): set the source's
    // switches first.
    explicit rdma_pair(uint64_t pages, uint32_t delay_us = 0, uint64_t damaged_page = ~0ull)
        : src(pages) {
        src.delay_us = delay_us;
        src.damaged_page = damaged_page;
        state = backend.start(src, nullptr);
        state->committed();
    }
    // The source's acceptance of a new channel (a fresh token each).
    void accept() {
        controls.emplace_back(rdma_ip());
        ok = FERRY_CONTROL__PAGE_CHANNEL_ACCEPTED__INIT;
        ok.page_size = uint32_t(page_size);
        ok.max_pages_per_request = wire::max_pages_per_request;
        keep = backend.accept(ok, state.get());
    }
    // A channel opened with the last acceptance, as if it had crossed TLS.
    std::unique_ptr<page_channel> open_accepted(FerryControl__ChannelKind kind,
                                                uint32_t max_pages) {
        return backend.open(std::make_unique<net::socket_stream>(std::move(controls.back().client)),
                            ok, fabric_spec::parse("rdma"), kind, max_pages);
    }
    std::unique_ptr<page_channel> open(FerryControl__ChannelKind kind, uint32_t max_pages) {
        accept();
        return open_accepted(kind, max_pages);
    }
    void wait_all_staged() {
        const uint64_t until = monotonic_ns() + 30'000'000'000ull;
        while (src.staged < src.lazy_pages().total_pages() && monotonic_ns() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        REQUIRE(src.staged >= src.lazy_pages().total_pages());
    }
};

struct read_result {
    std::vector<std::byte> pages;
    std::vector<uint64_t> checksums;
};

// Sends `r` and pumps until its reply is complete (30 s at most).
read_result fetch(page_channel& ch, const wire::page_request& r) {
    ch.send(r);
    const uint64_t until = monotonic_ns() + 30'000'000'000ull;
    for (;;) {
        incoming_reply* rep = ch.pump(SIZE_MAX);
        if (rep && rep->complete()) {
            REQUIRE(rep->header.result == wire::status::ok);
            REQUIRE(rep->header.request_id == r.request_id);
            read_result out{{rep->pages, rep->pages + size_t(r.nr_pages) * page_size},
                            {rep->checksums, rep->checksums + r.nr_pages}};
            ch.finish_reply();
            return out;
        }
        REQUIRE(monotonic_ns() < until);
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
}

wire::page_request get(uint64_t first_page, uint32_t n, uint32_t id, wire::op op = wire::op::get) {
    return {op, test_pid, n, rdma_test_base + first_page * page_size, id};
}

// Every page is the pattern and matches its checksum.
void verify(const read_result& r, uint64_t first_page) {
    std::vector<std::byte> want(page_size);
    for (size_t i = 0; i < r.checksums.size(); i++) {
        pattern_source::fill(first_page + i, want.data());
        REQUIRE(std::memcmp(r.pages.data() + i * page_size, want.data(), page_size) == 0);
        REQUIRE(page_checksum(r.pages.data() + i * page_size) == r.checksums[i]);
    }
}

const transport::rdma::channel_traffic& traffic(const page_channel& ch) {
    return dynamic_cast<const transport::rdma::rdma_channel&>(ch).traffic();
}

} // namespace

TEST_CASE("staged pages are READ one-sided: one round trip each, none through the source's CPU",
          "[.rdma]") {
    rdma_pair p(4096);
    auto ch = p.open(FERRY_CONTROL__CHANNEL_KIND__BACKGROUND, 1024);
    p.wait_all_staged();
    uint32_t id = 1;
    for (uint64_t first = 0; first < 4096; first += 1024)
        verify(fetch(*ch, get(first, 1024, id++)), first);
    auto fault = p.open(FERRY_CONTROL__CHANNEL_KIND__FAULT, 64);
    (void)fault; // a second channel of the same migration connects too
    REQUIRE(traffic(*ch).requests == 4);
    REQUIRE(traffic(*ch).read_batches == 4);
    REQUIRE(traffic(*ch).stage_asks == 0);
    REQUIRE(ch->bytes_received() == 4096 * (page_size + 9));
}

TEST_CASE("pages not staged yet are asked for, and arrive once staged", "[.rdma]") {
    // 256 reads of 16 pages, 3 ms each: the last pages are staged ~0.8 s in.
    rdma_pair p(4096, 3000);
    auto fault = p.open(FERRY_CONTROL__CHANNEL_KIND__FAULT, 64);
    verify(fetch(*fault, get(4090, 6, 1)), 4090);
    REQUIRE(traffic(*fault).stage_asks >= 1);
    REQUIRE(p.src.staged < 4096); // it jumped the stager's queue
    auto bg = p.open(FERRY_CONTROL__CHANNEL_KIND__BACKGROUND, 1024);
    verify(fetch(*bg, get(3000, 1024, 2)), 3000);
    REQUIRE(traffic(*bg).stage_asks >= 1);
}

TEST_CASE("a bad copy is restaged by the source before it is read again", "[.rdma]") {
    rdma_pair p(1024, 0, 77);
    auto ch = p.open(FERRY_CONTROL__CHANNEL_KIND__FAULT, 64);
    p.wait_all_staged();
    const auto bad = fetch(*ch, get(64, 64, 1));
    REQUIRE(page_checksum(bad.pages.data() + 13 * page_size) != bad.checksums[13]);
    REQUIRE(traffic(*ch).stage_asks == 0);
    verify(fetch(*ch, get(77, 1, 2, wire::op::refetch)), 77);
    REQUIRE(traffic(*ch).stage_asks == 1);
}

TEST_CASE("a connect without this migration's token is refused", "[.rdma]") {
    rdma_pair p(64);
    p.accept();
    auto* token = const_cast<uint8_t*>(p.ok.rdma_token.data);
    token[0] ^= 1;
    REQUIRE_THROWS_WITH(p.open_accepted(FERRY_CONTROL__CHANNEL_KIND__FAULT, 64),
                        Catch::Contains("REJECTED"));
    auto ch = p.open(FERRY_CONTROL__CHANNEL_KIND__FAULT, 64);
    p.wait_all_staged();
    verify(fetch(*ch, get(0, 8, 1)), 0);
}

TEST_CASE("a source that goes away fails the channel within seconds", "[.rdma]") {
    SECTION("while a request waits for staging") {
        rdma_pair p(4096, 200'000); // 0.2 s per 16 pages: the end stays unstaged
        auto ch = p.open(FERRY_CONTROL__CHANNEL_KIND__FAULT, 64);
        ch->send(get(4000, 1, 1));
        const uint64_t t0 = monotonic_ns();
        while (traffic(*ch).stage_asks == 0 && monotonic_ns() - t0 < 10'000'000'000ull)
            (void)ch->pump(SIZE_MAX);
        REQUIRE(traffic(*ch).stage_asks == 1);
        p.state.reset(); // the source's daemon ends the migration
        const uint64_t gone = monotonic_ns();
        REQUIRE_THROWS([&] {
            while (monotonic_ns() - gone < 20'000'000'000ull)
                (void)ch->pump(SIZE_MAX);
        }());
        REQUIRE(monotonic_ns() - gone < 5'000'000'000ull);
    }
    SECTION("before a READ") {
        rdma_pair p(256);
        auto ch = p.open(FERRY_CONTROL__CHANNEL_KIND__BACKGROUND, 64);
        p.wait_all_staged();
        verify(fetch(*ch, get(0, 64, 1)), 0);
        p.state.reset();
        const uint64_t gone = monotonic_ns();
        REQUIRE_THROWS([&] {
            ch->send(get(64, 64, 2));
            while (monotonic_ns() - gone < 20'000'000'000ull)
                (void)ch->pump(SIZE_MAX);
        }());
        REQUIRE(monotonic_ns() - gone < 5'000'000'000ull);
    }
}
