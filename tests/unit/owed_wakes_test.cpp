// The wakes the fault path owes threads whose pages it installed under the
// state lock (lazy-pages/owed_wakes.hpp): a thread stays blocked until its
// wake is paid, wakes merge, and a closing uffd is never woken late.
#include "core/page.hpp"
#include "core/unique_fd.hpp"
#include "owed_wakes.hpp"
#include "uffd_ops.hpp"

#include <catch2/catch.hpp>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

using ferry::page_size;
using ferry::unique_fd;
using ferry::lazy::owed_wakes;

namespace {

// One registered page, and a thread that reads it.
struct blocked_reader {
    void* mem = nullptr;
    unique_fd uffd;
    std::atomic<bool> read_done{false};
    uint64_t value = 0;
    std::thread reader;

    blocked_reader() {
        mem =
            ::mmap(nullptr, page_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        REQUIRE(mem != MAP_FAILED);
        uffd.reset(int(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK)));
        REQUIRE(uffd);
        uffdio_api api{UFFD_API, 0, 0};
        REQUIRE(::ioctl(uffd.get(), UFFDIO_API, &api) == 0);
        uffdio_register reg{{addr(), page_size}, UFFDIO_REGISTER_MODE_MISSING, 0};
        REQUIRE(::ioctl(uffd.get(), UFFDIO_REGISTER, &reg) == 0);
        reader = std::thread([this] {
            value = *static_cast<volatile uint64_t*>(mem);
            read_done = true;
        });
        // Its fault, read off the uffd, as a handler reads it.
        pollfd p{uffd.get(), POLLIN, 0};
        REQUIRE(::poll(&p, 1, 5000) == 1);
        uffd_msg msg{};
        REQUIRE(::read(uffd.get(), &msg, sizeof msg) == sizeof msg);
        REQUIRE(msg.event == UFFD_EVENT_PAGEFAULT);
    }
    ~blocked_reader() {
        if (reader.joinable()) {
            (void)ferry::uffd::wake(uffd.get(), addr(), page_size);
            reader.join();
        }
        ::munmap(mem, page_size);
    }
    [[nodiscard]] uint64_t addr() const { return reinterpret_cast<uint64_t>(mem); }
    // Whether the reader finishes within `ms`.
    [[nodiscard]] bool done_within(int ms) const {
        for (int i = 0; i < ms && !read_done; i++)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return read_done;
    }
};

} // namespace

TEST_CASE("a page copied without a wake leaves its thread blocked until the wake is paid",
          "[owed_wakes]") {
    blocked_reader r;
    std::array<uint64_t, page_size / 8> page{};
    page[0] = 0x5eed;
    const auto res = ferry::uffd::copy_without_wake(r.uffd.get(), r.addr(), page.data(), page_size);
    REQUIRE(res.result == ferry::uffd::outcome::done);
    owed_wakes wakes;
    wakes.owe(r.uffd.get(), r.addr(), res.bytes);
    CHECK_FALSE(r.done_within(200)); // installed, but not woken

    owed_wakes::batch taken;
    const size_t n = wakes.take(taken);
    CHECK(n == 1);
    CHECK(wakes.owed() == 0);
    wakes.wake_taken(std::span(taken).first(n));
    REQUIRE(r.done_within(5000));
    r.reader.join();
    CHECK(r.value == 0x5eed);
}

TEST_CASE("owed wakes merge when contiguous, and a full list wakes at once", "[owed_wakes]") {
    owed_wakes wakes;
    wakes.owe(7, 0x10000, 2 * page_size);
    wakes.owe(7, 0x10000 + 2 * page_size, page_size);
    CHECK(wakes.owed() == 1);
    wakes.owe(8, 0x10000 + 3 * page_size, page_size); // another uffd
    wakes.owe(7, 0x40000, page_size);                 // not contiguous
    wakes.owe(7, 0x50000, 0);                         // nothing installed
    CHECK(wakes.owed() == 3);
    owed_wakes::batch taken;
    REQUIRE(wakes.take(taken) == 3);
    CHECK(taken[0].uffd == 7);
    CHECK(taken[0].addr == 0x10000);
    CHECK(taken[0].len == 3 * page_size);
    CHECK(taken[1].uffd == 8);
    CHECK(taken[2].addr == 0x40000);
    wakes.wake_taken(std::span(taken).first(3)); // bad descriptors: errors, ignored

    CHECK(taken[0].woken_ns > 0); // stamped as each was woken
    CHECK_FALSE(taken[0].serves_fault());

    // A range serving a fault of its own keeps its entry, and its time.
    wakes.owe(7, 0x10000, page_size);
    wakes.owe(7, 0x10000 + page_size, page_size, 0x10000 + page_size, 123);
    wakes.owe(7, 0x10000 + 2 * page_size, page_size); // a prefetch joins it
    REQUIRE(wakes.owed() == 2);
    REQUIRE(wakes.take(taken) == 2);
    CHECK(taken[1].serves_fault());
    CHECK(taken[1].fault_addr == 0x10000 + page_size);
    CHECK(taken[1].fault_ns == 123);
    CHECK(taken[1].len == 2 * page_size);
    wakes.wake_taken(std::span(taken).first(2));

    // Scattered pages past the capacity: the list is woken and starts over.
    for (uint64_t i = 0; i <= owed_wakes::capacity; i++)
        wakes.owe(-1, 0x100000 + 2 * i * page_size, page_size);
    CHECK(wakes.owed() == 1);
}

TEST_CASE("a real wake past the capacity still reaches a blocked thread", "[owed_wakes]") {
    blocked_reader r;
    std::array<uint64_t, page_size / 8> page{};
    REQUIRE(ferry::uffd::copy_without_wake(r.uffd.get(), r.addr(), page.data(), page_size).result ==
            ferry::uffd::outcome::done);
    owed_wakes wakes;
    wakes.owe(r.uffd.get(), r.addr(), page_size);
    for (uint64_t i = 1; i < owed_wakes::capacity; i++)
        wakes.owe(-1, 0x100000 + 2 * i * page_size, page_size);
    CHECK_FALSE(r.done_within(100));
    wakes.owe(-1, 0x900000, page_size); // the 65th: all 64 are woken now
    REQUIRE(r.done_within(5000));
    r.reader.join();
}

TEST_CASE("a closing uffd's wakes are dropped, and wakes taken out of the lock are waited for",
          "[owed_wakes]") {
    owed_wakes wakes;
    wakes.owe(5, 0x1000, page_size);
    wakes.owe(6, 0x1000, page_size);
    wakes.forget(5);
    CHECK(wakes.owed() == 1);

    owed_wakes::batch taken;
    const size_t n = wakes.take(taken);
    REQUIRE(n == 1);
    std::atomic<bool> woke{false};
    std::thread waker([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        woke = true;
        wakes.wake_taken(std::span(taken).first(n));
    });
    wakes.forget(6); // waits for the wake in progress
    CHECK(woke);
    waker.join();
}

TEST_CASE("a wake taken out of the lock that never ends fails forget after 2 s", "[owed_wakes]") {
    owed_wakes wakes;
    wakes.owe(5, 0x1000, page_size);
    owed_wakes::batch taken;
    REQUIRE(wakes.take(taken) == 1); // and never woken
    const auto start = std::chrono::steady_clock::now();
    REQUIRE_THROWS_WITH(wakes.forget(5),
                        Catch::Contains("a wake of faulting threads did not end within 2 s"));
    CHECK(std::chrono::steady_clock::now() - start >= std::chrono::seconds(2));
}
