#include "criu/criu_deadlines.hpp"

#include <catch2/catch.hpp>

using ferry::criu::deadlines;
using std::chrono::milliseconds;

TEST_CASE("CRIU's deadlines grow with the workload's memory", "[deadlines]") {
    const auto small = deadlines::for_memory(64ull << 20);
    const auto big = deadlines::for_memory(8ull << 30);
    CHECK(big.dump > small.dump);
    CHECK(big.page_server > small.page_server);
    CHECK(big.close > small.close);
    CHECK(big.abort > small.abort);
    CHECK(big.restore > small.restore);
    // A notification is one exchange, whatever the size.
    CHECK(big.notify == small.notify);
    // Far above what was measured (a lazy dump of 1 GiB froze in ~100 ms).
    CHECK(deadlines::for_memory(1ull << 30).dump >= milliseconds(30'000));
}

TEST_CASE("the scale multiplies every deadline, with a floor", "[deadlines]") {
    const auto one = deadlines::for_memory(1ull << 30);
    const auto tenth = deadlines::for_memory(1ull << 30, 0.1);
    CHECK(tenth.dump.count() == one.dump.count() / 10);
    CHECK(tenth.close.count() == one.close.count() / 10);
    const auto tiny = deadlines::for_memory(0, 0.0001);
    CHECK(tiny.notify == milliseconds(200));
    CHECK(tiny.release == milliseconds(200));
}
