// PAGEMAP_SCAN on this process's own memory (sys/page_presence.hpp): which
// pages exist, and the holes between them.
#include "sys/page_presence.hpp"

#include <catch2/catch.hpp>
#include <sys/mman.h>
#include <unistd.h>

#include <optional>
#include <vector>

using namespace ferry;

TEST_CASE("holes_in subtracts runs from a range", "[page_presence]") {
    using proc::holes_in;
    using run = proc::page_run;
    CHECK(holes_in(0x1000, 0x9000, {}) == std::vector<run>{{0x1000, 0x9000}});
    CHECK(holes_in(0x1000, 0x9000, {{0x1000, 0x9000}}).empty());
    CHECK(holes_in(0x1000, 0x9000, {{0x2000, 0x3000}, {0x5000, 0x6000}}) ==
          std::vector<run>{{0x1000, 0x2000}, {0x3000, 0x5000}, {0x6000, 0x9000}});
    // Runs beyond the range count only where they overlap it.
    CHECK(holes_in(0x2000, 0x4000, {{0x1000, 0x2800}, {0x3800, 0x9000}}) ==
          std::vector<run>{{0x2800, 0x3800}});
}

namespace {

// Anonymous memory of `pages` small pages (no THP: runs are page-exact),
// unmapped at the end of the test whatever happens.
struct small_pages {
    explicit small_pages(size_t n) : pages(n), bytes(n * 4096) {
        mem = static_cast<char*>(
            ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        REQUIRE(mem != MAP_FAILED);
        REQUIRE(::madvise(mem, bytes, MADV_NOHUGEPAGE) == 0);
    }
    ~small_pages() { ::munmap(mem, bytes); }
    [[nodiscard]] uint64_t base() const { return reinterpret_cast<uint64_t>(mem); }
    // The runs of pages that exist; nothing (with a warning) on a kernel
    // without PAGEMAP_SCAN.
    [[nodiscard]] std::optional<std::vector<proc::page_run>> existing() const {
        proc::page_presence presence(::getpid());
        std::vector<proc::page_run> runs;
        if (!presence.existing(base(), base() + bytes, runs)) {
            WARN("this kernel has no PAGEMAP_SCAN");
            return std::nullopt;
        }
        return runs;
    }
    size_t pages, bytes;
    char* mem;
};

} // namespace

TEST_CASE("pages written exist; untouched and read-only-touched pages are holes",
          "[page_presence]") {
    small_pages area(4096); // 16 MiB: more runs than one ioctl returns
    const size_t pages = area.pages;
    // Every third page written: 1366 runs of one page.
    for (size_t p = 0; p < pages; p += 3)
        area.mem[p * 4096] = 1;
    // A read maps the shared zero page: still a hole.
    volatile char sink = area.mem[1 * 4096];
    (void)sink;
    const auto base = area.base();
    const auto runs = area.existing();
    if (!runs)
        return;
    REQUIRE(runs->size() == (pages + 2) / 3);
    for (size_t i = 0; i < runs->size(); i++) {
        CHECK((*runs)[i].start == base + i * 3 * 4096);
        CHECK((*runs)[i].end == (*runs)[i].start + 4096);
    }
    const auto holes = proc::holes_in(base, base + pages * 4096, *runs);
    size_t hole_pages = 0;
    for (const auto& h : holes)
        hole_pages += (h.end - h.start) / 4096;
    CHECK(hole_pages == pages - runs->size());
}

TEST_CASE("a run of pages across the scan's per-call bound comes back whole", "[page_presence]") {
    small_pages area(12288); // 48 MiB: three calls of 16 MiB
    // Pages 1000 to 11000 written: one run over both call boundaries.
    for (size_t p = 1000; p < 11000; p++)
        area.mem[p * 4096] = 1;
    const auto runs = area.existing();
    if (!runs)
        return;
    REQUIRE(runs->size() == 1);
    CHECK((*runs)[0].start == area.base() + 1000 * 4096);
    CHECK((*runs)[0].end == area.base() + 11000 * 4096);
}
