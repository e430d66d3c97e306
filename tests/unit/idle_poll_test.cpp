// The idle-poll hold (lib/sys/idle_poll.hpp) on this machine's real
// /dev/cpu_dma_latency: while it stands the host's CPU latency target is 0,
// released or lapsed it is back to what it was. Integration tests, which
// hold it too, never run alongside the unit tests.
#include "sys/idle_poll.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <thread>

using namespace ferry;
using namespace std::chrono_literals;

namespace {

// Waits, boundedly, for the target to read `want`.
bool target_becomes(long long want, std::chrono::milliseconds within) {
    const auto until = std::chrono::steady_clock::now() + within;
    while (idle_poll::current_target_us() != want) {
        if (std::chrono::steady_clock::now() > until)
            return false;
        std::this_thread::sleep_for(5ms);
    }
    return true;
}

} // namespace

TEST_CASE("a hold sets the host's CPU latency target to 0 while it stands", "[idle_poll]") {
    if (const auto why = idle_poll::why_no_effect(); !why.empty()) {
        idle_poll::hold h(1s);
        CHECK_FALSE(h.held());
        CHECK(h.state() == "not held: " + why);
        return;
    }
    const long long before = idle_poll::current_target_us();
    REQUIRE(before >= 0); // the tests run as root
    {
        idle_poll::hold h(10s);
        REQUIRE(h.held());
        CHECK(h.state() == "held");
        CHECK(idle_poll::current_target_us() == 0);
    }
    CHECK(idle_poll::current_target_us() == before);
}

TEST_CASE("a hold lapses on its own after its limit", "[idle_poll]") {
    if (!idle_poll::why_no_effect().empty())
        return; // nothing to lapse: the case above checks the refusal
    const long long before = idle_poll::current_target_us();
    if (before == 0) {
        WARN("another process holds the target at 0: a lapse cannot be seen");
        return;
    }
    idle_poll::hold h(50ms);
    REQUIRE(h.held());
    CHECK(idle_poll::current_target_us() == 0);
    CHECK(target_becomes(before, 5s));
    CHECK(h.state() == "lapsed after its limit of 50 ms");
}

TEST_CASE("a lapsed hold is renewed, a standing one kept", "[idle_poll]") {
    if (!idle_poll::why_no_effect().empty())
        return; // nothing to hold
    const long long before = idle_poll::current_target_us();
    if (before == 0) {
        WARN("another process holds the target at 0: a lapse cannot be seen");
        return;
    }
    auto standing = std::make_unique<idle_poll::hold>(10s);
    auto* const first = standing.get();
    standing = idle_poll::renewed(std::move(standing), 10s);
    CHECK(standing.get() == first);
    standing.reset();

    auto h = std::make_unique<idle_poll::hold>(50ms);
    REQUIRE(h->held());
    REQUIRE(target_becomes(before, 5s));
    CHECK(h->lapsed());
    h = idle_poll::renewed(std::move(h), 10s);
    REQUIRE(h);
    CHECK_FALSE(h->lapsed());
    CHECK(h->state() == "held");
    CHECK(idle_poll::current_target_us() == 0);
    h.reset();
    CHECK(idle_poll::current_target_us() == before);
}
