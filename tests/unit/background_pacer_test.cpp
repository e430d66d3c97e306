// The background pull's policy (lazy-pages/background_pacer): how hard it
// pulls while the application faults, and once it stops. Times are real
// (the pacer reads the monotonic clock), and every check waits well past the
// window it depends on, so a slow machine only makes the test longer.
#include "background_pacer.hpp"
#include "core/clock.hpp"
#include "loop_config.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

using ferry::monotonic_ns;
using ferry::lazy::background_pacer;
using ferry::lazy::loop_config;

namespace {

// Sleeps past `windows` fault windows.
void wait_windows(const loop_config& cfg, int windows) {
    std::this_thread::sleep_for(cfg.fault_window * windows);
}

} // namespace

TEST_CASE("an application that is not faulting gets the whole background", "[pacer]") {
    loop_config cfg;
    background_pacer p(cfg);
    CHECK_FALSE(p.faulting());
    CHECK(p.streams() == cfg.background_streams);
    CHECK(p.depth() == cfg.background_depth);
    CHECK(p.chunk_pages() == cfg.background_chunk_pages);
}

TEST_CASE("while the application faults, one stream pulls the faulting budget", "[pacer]") {
    loop_config cfg;
    background_pacer p(cfg);
    for (uint32_t i = 0; i < cfg.faulting_threshold; i++)
        p.note_fault(monotonic_ns());
    CHECK(p.faulting());
    CHECK(p.streams() == 1);
    CHECK(p.depth() == cfg.faulting_depth);
    CHECK(p.chunk_pages() == cfg.faulting_chunk_pages);
    // The budget while faulting: 64 pages, two requests in flight (a Redis
    // container under a client: loaded / idle background 0.29 -> 0.42).
    CHECK(p.chunk_pages() * p.depth() == 128);

    // Two windows after the last one with enough faults, it pulls fully again.
    wait_windows(cfg, 3);
    CHECK_FALSE(p.faulting());
    CHECK(p.streams() == cfg.background_streams);
    CHECK(p.chunk_pages() == cfg.background_chunk_pages);
}

TEST_CASE("a stray fault keeps one stream for a window but not the small requests", "[pacer]") {
    loop_config cfg;
    background_pacer p(cfg);
    p.note_fault(monotonic_ns());
    CHECK_FALSE(p.faulting());
    CHECK(p.streams() == 1); // the workload's first faults are few and far between
    CHECK(p.depth() == cfg.background_depth);
    CHECK(p.chunk_pages() == cfg.background_chunk_pages);
    wait_windows(cfg, 2);
    CHECK(p.streams() == cfg.background_streams);
}

TEST_CASE("the faulting budget never exceeds the background's own", "[pacer]") {
    loop_config cfg;
    cfg.background_depth = 1;
    cfg.background_chunk_pages = 32;
    background_pacer p(cfg);
    for (uint32_t i = 0; i < cfg.faulting_threshold; i++)
        p.note_fault(monotonic_ns());
    REQUIRE(p.faulting());
    CHECK(p.depth() == 1);
    CHECK(p.chunk_pages() == 32);
}

TEST_CASE("a zero threshold turns the faulting policy off", "[pacer]") {
    loop_config cfg;
    cfg.faulting_threshold = 0;
    background_pacer p(cfg);
    for (int i = 0; i < 100; i++)
        p.note_fault(monotonic_ns());
    CHECK_FALSE(p.faulting());
    CHECK(p.chunk_pages() == cfg.background_chunk_pages);
}
