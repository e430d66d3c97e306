// UFFDIO_COPY through uffd::copy against a real userfaultfd in this process.
#include "core/page.hpp"
#include "registered_area.hpp"
#include "uffd_ops.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstring>
#include <vector>

using ferry::page_size;
using ferry::test::registered_area;

TEST_CASE("a copy across a VMA boundary made after registration lands page by page", "[uffd]") {
    constexpr size_t pages = 8;
    registered_area area(pages);
    auto* mem = area.mem;
    // As an application may after the restore: one area becomes two VMAs,
    // both still registered, with no uffd event.
    REQUIRE(::mprotect(mem + 5 * page_size, 3 * page_size, PROT_READ) == 0);

    std::vector<unsigned char> data(pages * page_size);
    for (size_t p = 0; p < pages; p++)
        std::memset(data.data() + p * page_size, int(p + 1), page_size);
    const auto res = ferry::uffd::copy(area.uffd.get(), area.addr, data.data(), pages * page_size);
    REQUIRE(res.result == ferry::uffd::outcome::done);
    REQUIRE(res.bytes == pages * page_size);
    for (size_t p = 0; p < pages; p++)
        CHECK(mem[p * page_size + 17] == p + 1);

    // A page already present stops it as before: EEXIST, with what landed.
    const auto again = ferry::uffd::copy(area.uffd.get(), area.addr, data.data(), 2 * page_size);
    CHECK(again.result == ferry::uffd::outcome::exists);
    CHECK(again.bytes == 0);
}

TEST_CASE("a copy that meets a page with no registered area says unmapped, after the pages before",
          "[uffd]") {
    constexpr size_t pages = 6;
    registered_area area(pages);
    auto* mem = area.mem;
    // Page 2 goes, and page 4 is mapped again unregistered, with no event
    // (this uffd asked for none).
    REQUIRE(::munmap(mem + 2 * page_size, page_size) == 0);
    REQUIRE(::mmap(mem + 4 * page_size, page_size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == mem + 4 * page_size);

    std::vector<unsigned char> data(pages * page_size, 7);
    const auto res = ferry::uffd::copy(area.uffd.get(), area.addr, data.data(), pages * page_size);
    CHECK(res.result == ferry::uffd::outcome::unmapped);
    CHECK(res.bytes == 2 * page_size);
    CHECK(mem[page_size + 5] == 7);
    const auto one =
        ferry::uffd::copy(area.uffd.get(), area.addr + 4 * page_size, data.data(), page_size);
    CHECK(one.result == ferry::uffd::outcome::unmapped);
    CHECK(one.bytes == 0);
    CHECK(mem[4 * page_size + 5] == 0); // the new area's own zero page, untouched by the copy
}
