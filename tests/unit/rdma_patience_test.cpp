#include "transport/rdma/rdma_connection.hpp"

#include <catch2/catch.hpp>

using ferry::transport::rdma::patience;
using namespace std::chrono_literals;

TEST_CASE("an RDMA peer's silence is waited out for seconds, not a few hundred ms") {
    const patience p;
    // 7 sends 268 ms apart: a guest descheduled for a moment, or a loaded
    // source, does not fail a channel the restored workload depends on.
    CHECK(p.silence() == 1879ms);
    // Never 7: Soft-RoCE retries forever then, and a dead peer hangs its
    // READs (seen in the VM lane: no completion within 60 s).
    CHECK(p.retries == 6);
}

TEST_CASE("a deadline scale lengthens the RDMA silence by at least that much") {
    for (const double scale : {1.5, 2.0, 3.0, 4.0, 10.0, 16.0}) {
        CAPTURE(scale);
        const auto scaled = patience::scaled(scale).silence();
        CHECK(double(scaled.count()) >= scale * double(patience{}.silence().count()) - 1);
        // The ACK timeout doubles per step: never more than twice what was asked.
        CHECK(double(scaled.count()) < 2 * scale * double(patience{}.silence().count()));
    }
    CHECK(patience::scaled(4).ack_timeout_exponent == 18);
}

TEST_CASE("a deadline scale never makes a silent RDMA peer fail sooner, nor wait forever") {
    CHECK(patience::scaled(1).silence() == patience{}.silence());
    CHECK(patience::scaled(0.05).silence() == patience{}.silence());
    // 4.3 s per try at most: 30 s, however slow the hosts are said to be.
    CHECK(patience::scaled(1e9).ack_timeout_exponent == 20);
    CHECK(patience::scaled(1e9).silence() < 31s);
}
