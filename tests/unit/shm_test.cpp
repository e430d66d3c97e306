// The shm fabric's mechanisms: the lock-free request ring and the link model.
#include "core/clock.hpp"
#include "transport/backend.hpp"
#include "transport/fabric.hpp"
#include "transport/staging/region.hpp"
#include "transport/staging/ring.hpp"

#include <catch2/catch.hpp>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <thread>
#include <vector>

using namespace ferry;

namespace {

struct entry {
    uint64_t value;
    uint32_t producer;
    uint32_t pad;
};

// A ring in shared anonymous memory, as between two processes.
template <size_t N>
struct shared_ring {
    using ring = shm_ring<entry, N>;
    ring* r;
    shared_ring() {
        void* m = ::mmap(nullptr, sizeof(ring), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                         -1, 0);
        REQUIRE(m != MAP_FAILED);
        r = static_cast<ring*>(m);
        r->init();
    }
    ~shared_ring() { ::munmap(r, sizeof(ring)); }
};

} // namespace

TEST_CASE("the ring is FIFO, reports full and empty, and wraps around", "[shm][ring]") {
    shared_ring<8> s;
    entry e{};
    REQUIRE(s.r->empty());
    REQUIRE_FALSE(s.r->try_pop(e));
    // Many laps around 8 slots, filling the ring completely each time.
    uint64_t next_in = 0, next_out = 0;
    for (int lap = 0; lap < 100; lap++) {
        while (s.r->try_push(entry{next_in, 0, 0}))
            next_in++;
        REQUIRE(next_in - next_out == 8); // full at exactly its capacity
        REQUIRE_FALSE(s.r->try_push(entry{999, 0, 0}));
        for (int i = 0; i < 5; i++) {
            REQUIRE(s.r->try_pop(e));
            REQUIRE(e.value == next_out++);
        }
    }
    while (s.r->try_pop(e))
        REQUIRE(e.value == next_out++);
    REQUIRE(next_out == next_in);
    REQUIRE(s.r->empty());
}

TEST_CASE("several producer processes and a consumer lose and duplicate nothing", "[shm][ring]") {
    shared_ring<64> s;
    constexpr uint32_t producers = 3;
    constexpr uint64_t per_producer = 20000;
    std::vector<pid_t> kids;
    for (uint32_t p = 0; p < producers; p++) {
        pid_t pid = ::fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            for (uint64_t i = 0; i < per_producer; i++)
                while (!s.r->try_push(entry{i, p, 0}))
                    std::this_thread::yield(); // full: the consumer is behind
            ::_exit(0);
        }
        kids.push_back(pid);
    }
    std::vector<uint64_t> next(producers, 0);
    uint64_t received = 0;
    const uint64_t deadline = monotonic_ns() + 60'000'000'000ull;
    entry e{};
    while (received < producers * per_producer && monotonic_ns() < deadline) {
        if (!s.r->try_pop(e)) {
            std::this_thread::yield();
            continue;
        }
        REQUIRE(e.producer < producers);
        REQUIRE(e.value == next[e.producer]); // each producer's entries arrive in order, once
        next[e.producer]++;
        received++;
    }
    for (pid_t k : kids)
        ::waitpid(k, nullptr, 0);
    REQUIRE(received == producers * per_producer);
    REQUIRE_FALSE(s.r->try_pop(e));
}

TEST_CASE("the link model's cost is latency plus size over bandwidth", "[shm][model]") {
    auto spec = fabric_spec::parse("shm:lat=2us,bw=100gbit");
    REQUIRE(spec.name == "shm");
    REQUIRE(spec.model.latency_ns == 2000);
    // 100 Gbit/s is 12.5 bytes per ns: 4096 bytes take 327.68 ns.
    REQUIRE(spec.model.cost_ns(4096) == 2000 + 328);
    REQUIRE(spec.model.cost_ns(0) == 2000);
    REQUIRE(fabric_spec::parse("shm:bw=8gbyte").model.cost_ns(8000) == 1000);
    REQUIRE(fabric_spec::parse("shm:lat=1ms").model.latency_ns == 1'000'000);
    REQUIRE(fabric_spec::parse("shm").model.free());
    REQUIRE(fabric_spec::parse("tcp").name == "tcp");
    REQUIRE(fabric_spec::parse(spec.to_string()).model.cost_ns(4096) == spec.model.cost_ns(4096));
    REQUIRE_THROWS_WITH(fabric_spec::parse("ib"), Catch::Contains("unknown fabric"));
    REQUIRE_THROWS_WITH(fabric_spec::parse("shm:lat=2"), Catch::Contains("unit"));
    REQUIRE_THROWS_WITH(fabric_spec::parse("shm:bw=-1gbit"), Catch::Contains("not a bandwidth"));
    REQUIRE_THROWS_WITH(fabric_spec::parse("shm:jitter=1us"),
                        Catch::Contains("unknown fabric option"));
    REQUIRE_THROWS_WITH(fabric_spec::parse("tcp:lat=1us"),
                        Catch::Contains("takes no latency and bandwidth model"));
}

TEST_CASE("fabrics are the registered transport backends", "[transport]") {
    const auto names = transport::names();
    REQUIRE(names.front() == "tcp"); // the default
    for (const auto& n : names) {
        const auto& b = transport::find(n);
        CHECK(std::string(b.name()) == n);
        CHECK(fabric_spec::parse(n).name == n);
    }
    REQUIRE_THROWS_WITH(transport::find("ib"), Catch::Contains("known: tcp, shm, rdma"));
    CHECK(transport::find("shm").takes_link_model());
    CHECK_FALSE(transport::find("tcp").takes_link_model());
}

TEST_CASE("charging the link model waits at least its cost, measured on the clock",
          "[shm][model]") {
    const auto model =
        fabric_spec::parse("shm:lat=20us,bw=1gbyte").model; // 4096 B cost 4.096 us more
    for (int i = 0; i < 50; i++) {
        const uint64_t start = monotonic_ns();
        model.charge(start, 4096);
        const uint64_t elapsed = monotonic_ns() - start;
        // A lower bound only: a loaded machine may add time, never remove it.
        REQUIRE(elapsed >= model.cost_ns(4096));
    }
    // A charge whose time has already passed returns at once.
    const uint64_t past = monotonic_ns() - 1'000'000'000ull;
    const uint64_t t0 = monotonic_ns();
    model.charge(past, 4096);
    REQUIRE(monotonic_ns() - t0 < 1'000'000'000ull);
}

TEST_CASE("the region layout is aligned and covers every page", "[shm]") {
    for (uint64_t pages : {0ull, 1ull, 1000ull, 262144ull}) {
        const auto g = transport::staging::layout(pages);
        REQUIRE(g.ring_offset >= sizeof(transport::staging::region_header));
        REQUIRE(g.states_offset >= g.ring_offset + sizeof(transport::staging::request_ring));
        REQUIRE(g.checksums_offset >= g.states_offset + pages);
        REQUIRE(g.data_offset % 4096 == 0);
        REQUIRE(g.data_offset >= g.checksums_offset + pages * 8);
        REQUIRE(g.total_size == g.data_offset + pages * 4096);
    }
}
