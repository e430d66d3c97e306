// The one-sided fabrics' stager: it serves the destination's requests from
// the start, and stages every page only once the migration commits.
#include "core/checksum.hpp"
#include "core/clock.hpp"
#include "core/page.hpp"
#include "patterned_source.hpp"
#include "transport/staging/stager.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

using namespace ferry;
using namespace ferry::transport;

namespace {

constexpr uint64_t pages = 256;
constexpr uint64_t base = 0x7f0000000000;

std::filesystem::path temp_dir() {
    char name[] = "/tmp/ferry-stager-test.XXXXXX";
    REQUIRE(::mkdtemp(name) != nullptr);
    return name;
}

// Waits (bounded) until `done` holds.
template <typename F>
bool wait_until(F done) {
    const uint64_t until = monotonic_ns() + 10'000'000'000ull;
    while (!done()) {
        if (monotonic_ns() > until)
            return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
}

} // namespace

TEST_CASE("the stager stages requested pages at once and every page only after the commit",
          "[staging]") {
    const auto dir = temp_dir();
    test::patterned_source src(base, pages);
    {
        staging::stager st(src, staging::region_file::create(dir, src.id(), 0));
        const auto region = st.region();
        auto* states = region.states();

        // A fault's request, before the commit.
        REQUIRE(region.ring().try_push(staging::stage_request{100, 4, 0}));
        region.header().stager_bell.ring();
        REQUIRE(wait_until([&] { return region.staged_prefix(100, 4) == 4; }));
        // Time for an eager pass to show, had it started: none may.
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        CHECK(region.header().staged_pages.load() == 4);
        CHECK(states[0].load() == staging::page_absent);
        CHECK(states[99].load() == staging::page_absent);
        CHECK(states[104].load() == staging::page_absent);

        st.stage_everything();
        REQUIRE(wait_until([&] { return region.header().staged_pages.load() == pages; }));
        CHECK(src.sent.load() == pages); // the requested pages were not staged twice
        for (uint64_t i = 0; i < pages; i++) {
            REQUIRE(states[i].load() == staging::page_staged);
            uint64_t first_word;
            std::memcpy(&first_word, region.page(i), sizeof first_word);
            REQUIRE(first_word == base + i * page_size);
            REQUIRE(region.checksums()[i] == page_checksum(region.page(i)));
        }
    }
    CHECK(std::filesystem::is_empty(dir)); // the region file went with the stager
    std::filesystem::remove_all(dir);
}

TEST_CASE("a region that grows keeps its pages and maps the new ones", "[staging]") {
    const auto dir = temp_dir();
    {
        auto file = staging::region_file::create(dir, "grow", 2 * page_size);
        REQUIRE(file.size() == 2 * page_size);
        std::memset(file.map(), 0x5a, 2 * page_size);
        file.ensure_size(6 * page_size);
        REQUIRE(file.size() == 6 * page_size);
        CHECK(std::filesystem::file_size(file.path()) == 6 * page_size);
        const auto* p = reinterpret_cast<const unsigned char*>(file.map());
        CHECK(p[0] == 0x5a);
        CHECK(p[2 * page_size - 1] == 0x5a);
        CHECK(p[2 * page_size] == 0); // new pages read as zeros
        std::memset(file.map() + 2 * page_size, 0x33, 4 * page_size);
        CHECK(p[6 * page_size - 1] == 0x33);
        file.ensure_size(page_size); // never shrinks
        CHECK(file.size() == 6 * page_size);
    }
    std::filesystem::remove_all(dir);
}
