#include "sys/hw_breakpoints.hpp"

#include <catch2/catch.hpp>

using namespace ferry::hw_breakpoints;

TEST_CASE("breakpoints that trap are used, unless the fallback is forced", "[breakpoints]") {
    const auto m = decide(probe_outcome::trapped, false, std::nullopt);
    CHECK(m.use_breakpoints);
    CHECK(m.criu_env.empty());
    CHECK(m.reason == "hardware breakpoints");

    const auto forced = decide(probe_outcome::trapped, true, std::nullopt);
    CHECK_FALSE(forced.use_breakpoints);
    CHECK(forced.criu_env == "CRIU_FAULT=130");
    CHECK(forced.reason == "syscall stepping (forced)");
}

TEST_CASE("breakpoints that do not trap make CRIU step through syscalls", "[breakpoints]") {
    for (const auto outcome : {probe_outcome::did_not_trap, probe_outcome::probe_failed}) {
        const auto m = decide(outcome, false, std::nullopt);
        CHECK_FALSE(m.use_breakpoints);
        CHECK(m.criu_env == "CRIU_FAULT=130");
        CHECK(m.reason.find(to_string(outcome)) != std::string::npos);
    }
}

TEST_CASE("an operator's CRIU_FAULT is never overridden", "[breakpoints]") {
    // Already the fallback: nothing to add, the fallback holds.
    const auto same = decide(probe_outcome::did_not_trap, false, std::string("130"));
    CHECK_FALSE(same.use_breakpoints);
    // Another fault: CRIU holds one at a time, so Ferry cannot add its own;
    // the report says so.
    const auto other = decide(probe_outcome::did_not_trap, false, std::string("5"));
    CHECK(other.criu_env.empty());
    CHECK(other.reason.find("CRIU_FAULT=5") != std::string::npos);
    // Where breakpoints trap, another fault changes nothing either.
    const auto fine = decide(probe_outcome::trapped, false, std::string("5"));
    CHECK(fine.use_breakpoints);
    CHECK(fine.criu_env.empty());
}

TEST_CASE("the probe gives an answer on this machine", "[breakpoints]") {
    // Either answer is right (the host decides); the probe itself must run
    // and must not hang. The integration tests check that CRIU agrees.
    const auto outcome = probe();
#if defined(__x86_64__)
    CHECK(outcome != probe_outcome::probe_failed);
#endif
    WARN("this machine: " << to_string(outcome));
    CHECK(probe() == outcome); // and the same answer twice
}
