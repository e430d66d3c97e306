// The guard between the background's copies without the state lock and a
// handler that reads uffd events (lazy-pages/unlocked_copies.hpp). The
// race it prevents is tested against a real uffd in fault_loop_test.cpp;
// these are its waits and its bound.
#include "unlocked_copies.hpp"

#include "core/page.hpp"

#include <catch2/catch.hpp>
#include <sched.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <thread>

using ferry::lazy::lazy_process;
using ferry::lazy::quiet_copies;
using ferry::lazy::unlocked_run;

TEST_CASE("copies asked for quiet stop before their first copy", "[unlocked_copies]") {
    lazy_process p; // no uffd: a copy would fail, so none may be tried
    std::array<unlocked_run, 2> runs{};
    runs[0].pages = 8;
    runs[1].pages = 4;
    ferry::lazy::begin_unlocked_copies(p);
    p.quiet_wanted = 1;
    ferry::lazy::copy_without_lock(p, runs);
    CHECK(runs[0].copied == 0);
    CHECK(runs[0].result == ferry::uffd::outcome::done);
    CHECK_FALSE(runs[0].whole());
    CHECK(p.unlocked_copies == 0); // ended, so a guard's wait ends
}

TEST_CASE("the guard waits for the copy in progress, and blocks none after it",
          "[unlocked_copies]") {
    lazy_process p;
    ferry::lazy::begin_unlocked_copies(p);
    std::atomic<bool> copy_ended{false};
    std::thread copier([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        copy_ended = true;
        p.unlocked_copies.fetch_sub(1); // what copy_without_lock does at its end
    });
    {
        const quiet_copies quiet(p, std::chrono::seconds(2));
        CHECK(copy_ended);
        CHECK(p.quiet_wanted == 1);
    }
    CHECK(p.quiet_wanted == 0);
    copier.join();
}

TEST_CASE("a copy that never ends fails the guard after its wait", "[unlocked_copies]") {
    lazy_process p;
    p.image_pid = 42;
    ferry::lazy::begin_unlocked_copies(p); // and never ended
    const auto start = std::chrono::steady_clock::now();
    REQUIRE_THROWS_WITH(quiet_copies(p, std::chrono::milliseconds(500)),
                        Catch::Contains("a background copy into pid 42 did not end within 500 ms"));
    CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(500));
    CHECK(p.quiet_wanted == 0); // a copy that ends later is not held back
}

TEST_CASE("a guard raises a copier at the idle policy, which might never run again otherwise",
          "[unlocked_copies]") {
    lazy_process p;
    ferry::lazy::begin_unlocked_copies(p);
    std::atomic<bool> idle{false}, raised{false};
    std::thread copier([&] {
        // As copy_without_lock(copy_policy::idle) starts: registered, then idle.
        p.idle_copiers[1] = pid_t(::gettid());
        sched_param none{};
        REQUIRE(::sched_setscheduler(0, SCHED_IDLE, &none) == 0);
        idle = true;
        // Its copy ends only once it runs at the normal policy again.
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (::sched_getscheduler(0) == SCHED_IDLE && std::chrono::steady_clock::now() < give_up)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        raised = ::sched_getscheduler(0) == SCHED_OTHER;
        p.idle_copiers[1] = 0;
        p.unlocked_copies.fetch_sub(1);
    });
    while (!idle)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    {
        const quiet_copies quiet(p, std::chrono::seconds(2));
        CHECK(p.unlocked_copies == 0);
    }
    copier.join();
    CHECK(raised);
}

TEST_CASE("an idle copy leaves the idle policy and its slot when it ends", "[unlocked_copies]") {
    lazy_process p; // no uffd: the first copy fails and ends the copies
    std::array<unlocked_run, 1> runs{};
    runs[0].pages = 4;
    std::array<std::byte, 4 * ferry::page_size> data{};
    runs[0].data = data.data();
    int policy_after = -1;
    std::thread copier([&] {
        ferry::lazy::begin_unlocked_copies(p);
        ferry::lazy::copy_without_lock(p, runs, 4, ferry::lazy::copy_policy::idle);
        policy_after = ::sched_getscheduler(0);
    });
    copier.join();
    CHECK(policy_after == SCHED_OTHER);
    CHECK_FALSE(runs[0].whole());
    CHECK(p.unlocked_copies == 0);
    for (const auto& slot : p.idle_copiers)
        CHECK(slot == 0);
}
