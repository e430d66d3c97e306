#include "pool/pool_client.hpp"

#include <catch2/catch.hpp>

using namespace ferry::pool;
using namespace std::chrono_literals;

TEST_CASE("a deadline scale above 1 lengthens the pool's failure detector, all four times") {
    const pool_client::options base{.name = "t"};
    const auto o = base.with_deadline_scale(4.0);
    CHECK(o.min_deadline == base.min_deadline * 4);
    CHECK(o.max_deadline == base.max_deadline * 4);
    CHECK(o.dead_silence == base.dead_silence * 4);
    CHECK(o.last_node_silence == base.last_node_silence * 4);
    // ... and the RDMA connections to the nodes wait out a silence 4x as long.
    CHECK(o.rdma_wait.ack_timeout_exponent == base.rdma_wait.ack_timeout_exponent + 2);
    // What the scale is not about stays as it was.
    CHECK(o.strikes_to_dead == base.strikes_to_dead);
    CHECK(o.connect_timeout == base.connect_timeout);
    CHECK(o.name == "t");
}

TEST_CASE("a deadline scale below 1 never makes a pool node look dead sooner") {
    const pool_client::options base{.max_deadline = 300ms, .dead_silence = 900ms};
    const auto o = base.with_deadline_scale(0.05);
    CHECK(o.min_deadline == base.min_deadline);
    CHECK(o.max_deadline == 300ms);
    CHECK(o.dead_silence == 900ms);
    CHECK(o.rdma_wait.silence() == base.rdma_wait.silence());
}

TEST_CASE("a node whose loss the pool cannot survive is waited for longer than any other") {
    const pool_client::options o{};
    CHECK(o.last_node_silence >= o.dead_silence * 10);
}
