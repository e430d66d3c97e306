// lazy_process's recent installs: what a child forked after the resume
// starts with besides the parent's lazy pages (uffd_events.cpp's FORK).
#include "core/page.hpp"
#include "lazy_process.hpp"

#include <catch2/catch.hpp>

using namespace ferry;
using ferry::lazy::lazy_process;

namespace {

bool recent_has(const lazy_process& p, uint64_t addr) {
    return p.recent[0].find(addr) || p.recent[1].find(addr);
}

} // namespace

TEST_CASE("recent installs stay for a generation after the one they were made in",
          "[lazy_process]") {
    lazy_process p;
    const uint64_t base = 0x7f0000000000;
    p.lazy.insert(base, base + 16 * page_size, base);
    REQUIRE(p.take_installed(base + 2 * page_size, base + 4 * page_size) == 2 * page_size);
    REQUIRE_FALSE(p.lazy.find(base + 2 * page_size));
    REQUIRE(recent_has(p, base + 2 * page_size));
    REQUIRE(recent_has(p, base + 3 * page_size));
    REQUIRE_FALSE(recent_has(p, base + 4 * page_size));
    // Remembered with their image addresses.
    REQUIRE(p.recent[p.recent_current].find(base + 3 * page_size)->img_of(base + 3 * page_size) ==
            base + 3 * page_size);

    const uint64_t t0 = p.recent_rotated_ns + lazy_process::recent_generation_ns;
    p.end_recent_generation(t0, true); // a new generation: the old one still counts
    REQUIRE(recent_has(p, base + 2 * page_size));
    p.end_recent_generation(t0 + 1, true); // too soon for another
    REQUIRE(recent_has(p, base + 2 * page_size));
    p.end_recent_generation(t0 + lazy_process::recent_generation_ns, true);
    REQUIRE_FALSE(recent_has(p, base + 2 * page_size));

    // A page installed, then discarded, is not recent: the child must not
    // get the source's data where the parent had zeros at the fork.
    (void)p.take_installed(base + 5 * page_size, base + 6 * page_size);
    REQUIRE(recent_has(p, base + 5 * page_size));
    REQUIRE(p.take_dropped(base + 5 * page_size, base + 7 * page_size) == page_size);
    REQUIRE_FALSE(recent_has(p, base + 5 * page_size));
    REQUIRE_FALSE(p.lazy.find(base + 6 * page_size));
}
