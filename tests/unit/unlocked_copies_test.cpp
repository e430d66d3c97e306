// The guard between the background's copies without the state lock and a
// handler that reads uffd events (lazy-pages/unlocked_copies.hpp). The
// race it prevents is tested against a real uffd in fault_loop_test.cpp;
// these are its waits and its bound.
#include "unlocked_copies.hpp"

#include "core/page.hpp"
#include "registered_area.hpp"

#include <catch2/catch.hpp>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

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
        // As copy_without_lock(copy_policy::idle) between two copies:
        // registered, marked, then idle.
        p.idle_copiers[1].tid = pid_t(::gettid());
        p.idle_copiers[1].at_idle = true;
        sched_param none{};
        REQUIRE(::sched_setscheduler(0, SCHED_IDLE, &none) == 0);
        idle = true;
        // Its copy ends only once it runs at the normal policy again.
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (::sched_getscheduler(0) == SCHED_IDLE && std::chrono::steady_clock::now() < give_up)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        raised = ::sched_getscheduler(0) == SCHED_OTHER;
        p.idle_copiers[1].at_idle = false;
        p.idle_copiers[1].tid = 0;
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
        CHECK(slot.tid == 0);
}

TEST_CASE("an idle copier runs each copy at the normal policy", "[unlocked_copies]") {
    // The copy's source is itself missing, behind a second uffd: UFFDIO_COPY
    // then waits inside the kernel, VMA lock and all, until this thread
    // serves that fault, and the copier's policy can be read meanwhile.
    constexpr size_t pages = 2;
    ferry::test::registered_area target(pages), source(pages);
    lazy_process p;
    p.uffd.reset(::dup(target.uffd.get()));
    std::array<unlocked_run, 1> runs{};
    runs[0].addr = target.addr;
    runs[0].data = reinterpret_cast<const std::byte*>(source.mem);
    runs[0].pages = pages;
    std::atomic<pid_t> copier_tid{0};
    std::thread copier([&] {
        copier_tid = pid_t(::gettid());
        ferry::lazy::begin_unlocked_copies(p);
        ferry::lazy::copy_without_lock(p, runs, 1, ferry::lazy::copy_policy::idle);
    });
    std::vector<std::byte> page(ferry::page_size);
    for (size_t i = 0; i < pages; i++) {
        pollfd pfd{source.uffd.get(), POLLIN, 0};
        REQUIRE(::poll(&pfd, 1, 5000) == 1);
        uffd_msg msg{};
        REQUIRE(::read(source.uffd.get(), &msg, sizeof msg) == ssize_t(sizeof msg));
        REQUIRE(msg.event == UFFD_EVENT_PAGEFAULT);
        const uint64_t at = msg.arg.pagefault.address & ~uint64_t(ferry::page_size - 1);
        CHECK(at == source.addr + i * ferry::page_size);
        // Inside the copy of page i.
        CHECK(::sched_getscheduler(copier_tid) == SCHED_OTHER);
        CHECK(p.idle_copiers[0].tid == copier_tid);
        CHECK_FALSE(p.idle_copiers[0].at_idle);
        std::fill(page.begin(), page.end(), std::byte(0x51 + i));
        uffdio_copy serve{at, uint64_t(uintptr_t(page.data())), ferry::page_size, 0, 0};
        REQUIRE(::ioctl(source.uffd.get(), UFFDIO_COPY, &serve) == 0);
    }
    copier.join();
    CHECK(runs[0].whole());
    CHECK(target.mem[0] == 0x51);
    CHECK(target.mem[ferry::page_size + 7] == 0x52);
    CHECK(p.unlocked_copies == 0);
    CHECK(p.idle_copiers[0].tid == 0);
}
