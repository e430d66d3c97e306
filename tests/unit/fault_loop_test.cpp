// The fault loop against a real userfaultfd in this process and a fake page
// source on loopback.
#include "core/checksum.hpp"
#include "fake_source.hpp"
#include "fault_loop.hpp"
#include "staged_pages.hpp"

#include <catch2/catch.hpp>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <thread>
#include <tuple>

using namespace ferry;
using ferry::lazy::fault_loop;
using ferry::lazy::loop_config;

namespace {

uint64_t word_of(uint64_t page, uint64_t word) {
    return (page * 0x9e3779b97f4a7c15ull) ^ (word + 1);
}

// A registered region, the source copy of its contents, and the lazy ranges.
struct lazy_region {
    size_t pages;
    uint64_t* mem = nullptr;
    std::vector<uint64_t> source;
    unique_fd uffd;
    std::vector<criu::lazy_range> lazy;

    explicit lazy_region(size_t n, std::vector<std::pair<size_t, size_t>> holes = {},
                         uint64_t events = UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_UNMAP |
                                           UFFD_FEATURE_EVENT_REMAP)
        : pages(n), source(n * 512) {
        void* m = ::mmap(nullptr, n * page_size, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        REQUIRE(m != MAP_FAILED);
        mem = static_cast<uint64_t*>(m);
        for (size_t p = 0; p < n; p++)
            for (size_t w = 0; w < 512; w++)
                source[p * 512 + w] = word_of(p, w);
        uffd.reset(int(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK)));
        REQUIRE(uffd);
        uffdio_api api{UFFD_API, events, 0};
        REQUIRE(::ioctl(uffd.get(), UFFDIO_API, &api) == 0);
        uffdio_register reg{{addr(0), n * page_size}, UFFDIO_REGISTER_MODE_MISSING, 0};
        REQUIRE(::ioctl(uffd.get(), UFFDIO_REGISTER, &reg) == 0);
        // Lazy everywhere except the holes [first, last).
        size_t at = 0;
        std::sort(holes.begin(), holes.end());
        for (auto [first, last] : holes) {
            if (first > at)
                lazy.push_back({addr(at), addr(first)});
            at = last;
        }
        if (at < n)
            lazy.push_back({addr(at), addr(n)});
    }
    ~lazy_region() {
        if (mem)
            ::munmap(mem, pages * page_size);
    }
    [[nodiscard]] uint64_t addr(size_t page) const {
        return reinterpret_cast<uint64_t>(mem) + page * page_size;
    }
    [[nodiscard]] const std::byte* source_bytes() const {
        return reinterpret_cast<const std::byte*>(source.data());
    }
    // A fake source serving this region's pages at their addresses.
    [[nodiscard]] test::fake_source serve() const {
        return test::fake_source(source_bytes(), addr(0), pages * page_size);
    }
    [[nodiscard]] bool page_ok(size_t p) const {
        return std::equal(mem + p * 512, mem + p * 512 + 512, source.begin() + long(p * 512));
    }
    [[nodiscard]] bool page_zero(size_t p) const {
        return std::all_of(mem + p * 512, mem + p * 512 + 512, [](uint64_t w) { return w == 0; });
    }
    [[nodiscard]] std::vector<bool> resident() const {
        std::vector<unsigned char> v(pages);
        REQUIRE(::mincore(mem, pages * page_size, v.data()) == 0);
        std::vector<bool> r(pages);
        for (size_t i = 0; i < pages; i++)
            r[i] = v[i] & 1;
        return r;
    }
};

// Page indices [0, n) in a random order of `seed`.
std::vector<size_t> shuffled_pages(size_t n, unsigned seed) {
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    std::shuffle(order.begin(), order.end(), std::minstd_rand(seed));
    return order;
}

// cfg.background_streams background channels, as lazy-pages opens over tcp.
fault_loop make_loop(const test::fake_source& src, loop_config cfg = {}) {
    auto ep = src.endpoint();
    const auto tcp = fabric_spec::parse("tcp");
    auto fault_ch = open_page_channel(tcp, ep, test::loopback_credentials(), "test",
                                      FERRY_CONTROL__CHANNEL_KIND__FAULT, 64,
                                      std::chrono::seconds(5), std::chrono::seconds(5));
    std::vector<std::unique_ptr<page_channel>> bg_chs;
    for (uint32_t k = 0; k < cfg.background_streams; k++)
        bg_chs.push_back(open_page_channel(tcp, ep, test::loopback_credentials(), "test",
                                           FERRY_CONTROL__CHANNEL_KIND__BACKGROUND, 1024,
                                           std::chrono::seconds(5), std::chrono::seconds(5)));
    return fault_loop(cfg, std::move(fault_ch), std::move(bg_chs));
}

// Both ends of a unix stream socket pair.
std::pair<unique_fd, unique_fd> stream_pair() {
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    return {unique_fd(sv[0]), unique_fd(sv[1])};
}

// "restore finished" over a socket pair, as CRIU sends it.
struct fake_restore {
    unique_fd criu_end, daemon_end;
    fake_restore() { std::tie(criu_end, daemon_end) = stream_pair(); }
    void finished() {
        const uint32_t magic = 0x52535446;
        REQUIRE(::write(criu_end.get(), &magic, 4) == 4);
    }
};

// A loop restoring `region` as CRIU alone would drive it (no daemon).
struct criu_driven : fake_restore {
    criu_driven(fault_loop& loop, lazy_region& region) {
        loop.watch_restore(std::move(daemon_end));
        loop.add_process(1, std::move(region.uffd), region.lazy);
    }
};

// The daemon's side of lazy-pages' report socket: "lazy areas ready", as
// the daemon says it when CRIU reaches post-restore.
struct fake_daemon {
    unique_fd daemon_end, lazy_end;
    fake_daemon() { std::tie(daemon_end, lazy_end) = stream_pair(); }
    void areas_ready() {
        FerryControl__LazyAreasReady ready = FERRY_CONTROL__LAZY_AREAS_READY__INIT;
        control::send_message(daemon_end.get(), ready, net::after(std::chrono::seconds(1)));
    }
    // ... and "tasks run", as it says once CRIU's post-resume came.
    void tasks_run() {
        FerryControl__LazyTasksRun run = FERRY_CONTROL__LAZY_TASKS_RUN__INIT;
        control::send_message(daemon_end.get(), run, net::after(std::chrono::seconds(1)));
    }
};

// A loop restoring `region` as CRIU and the daemon would drive it, with
// the count of background pages it has installed so far.
struct daemon_driven {
    fake_restore restore;
    fake_daemon daemon;
    std::atomic<uint64_t> background{0};
    daemon_driven(fault_loop& loop, lazy_region& region) {
        loop.watch_restore(std::move(restore.daemon_end));
        loop.watch_daemon(daemon.lazy_end.get());
        loop.add_process(1, std::move(region.uffd), region.lazy);
        loop.on_progress([this](const lazy::loop_stats& s) { background = s.pages_background; });
    }
    // Until `pages` are in, for at most 10 s.
    void wait_for_background(uint64_t pages) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (background < pages && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
};

} // namespace

TEST_CASE("faults are served, holes zero-filled, the rest pulled in the background",
          "[fault_loop][uffd]") {
    lazy_region region(2048, {{100, 110}, {2000, 2048}});
    test::fake_source src = region.serve();
    auto loop = make_loop(src);
    criu_driven restore(loop, region);
    REQUIRE(loop.stats().pages_total == 2048 - 10 - 48);

    std::thread runner([&] { loop.run(); });
    // Touch pages in random order before "restore finished": only faults
    // can serve them, as during a real restore.
    const std::vector<size_t> order = shuffled_pages(region.pages, 1);
    size_t bad = 0;
    for (size_t i = 0; i < 300; i++) {
        const size_t p = order[i];
        const bool hole = (p >= 100 && p < 110) || p >= 2000;
        bad += hole ? !region.page_zero(p) : !region.page_ok(p);
    }
    restore.finished();
    runner.join();

    REQUIRE(bad == 0);
    for (size_t p = 0; p < region.pages; p++) {
        const bool hole = (p >= 100 && p < 110) || p >= 2000;
        if (!hole)
            REQUIRE(region.page_ok(p));
    }
    const auto& s = loop.stats();
    REQUIRE(s.pages_faulted > 0);
    REQUIRE(s.pages_background > 0);
    REQUIRE(s.pages_faulted + s.pages_prefetched + s.pages_background + s.pages_dropped ==
            s.pages_total);
    REQUIRE(s.pages_dropped == 0);
    REQUIRE(src.done_received == false); // announce_done was not called
    loop.announce_done();
    REQUIRE(loop.fault_latency().count() == s.pages_faulted);
}

TEST_CASE("four threads faulting at once: every thread woken, every fault's service recorded",
          "[fault_loop][uffd]") {
    // A handler per CPU (0), or one for every CPU (lazy-pages --handlers 1).
    const uint32_t handlers = GENERATE(0u, 1u);
    CAPTURE(handlers);
    lazy_region region(4096);
    test::fake_source src = region.serve();
    loop_config cfg;
    cfg.handlers = handlers;
    auto loop = make_loop(src, cfg);
    criu_driven restore(loop, region);
    std::thread runner([&] { loop.run(); });

    // Before "restore finished" only the fault path installs, so a thread
    // whose wake went missing would stay blocked here.
    const std::vector<size_t> order = shuffled_pages(region.pages, 4);
    constexpr size_t threads = 4, pages = 1600;
    std::atomic<size_t> bad{0}, touched{0};
    std::vector<std::thread> touchers;
    for (size_t t = 0; t < threads; t++)
        touchers.emplace_back([&, t] {
            for (size_t i = t; i < pages; i += threads) {
                bad += !region.page_ok(order[i]);
                touched++;
            }
        });
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (touched < pages && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const size_t touched_before_finish = touched;
    restore.finished(); // lets a blocked thread end, should one be
    for (auto& t : touchers)
        t.join();
    runner.join();

    REQUIRE(touched_before_finish == pages);
    REQUIRE(bad == 0);
    REQUIRE(loop.fault_latency().count() == loop.stats().pages_faulted);
}

// The hole makes [0, 300) a small area, pulled first: the main pass that
// follows starts at the bottom while its last request may still be in
// flight, and must not ask for those pages again.
TEST_CASE("one or two background streams: each carries pages, every page arrives once",
          "[fault_loop][uffd][background]") {
    const uint32_t streams = GENERATE(1u, 2u);
    lazy_region region(8192, {{300, 310}});
    test::fake_source src = region.serve();
    loop_config cfg;
    cfg.background_streams = streams;
    auto loop = make_loop(src, cfg);
    loop.set_restore_finished();
    loop.add_process(1, std::move(region.uffd), region.lazy);
    std::thread runner([&] { loop.run(); });
    runner.join();

    for (size_t p = 0; p < region.pages; p++)
        if (p < 300 || p >= 310)
            REQUIRE(region.page_ok(p));
    const auto& s = loop.stats();
    REQUIRE(s.pages_background == 8192 - 10);
    REQUIRE(s.pages_duplicate == 0);
    // Connection 0 is the fault channel; then the streams, which split the
    // pull between them.
    CHECK(src.pages_by_connection[0] == 0);
    uint64_t pulled = 0;
    for (uint32_t k = 1; k <= streams; k++) {
        CHECK(src.pages_by_connection[k] > 0);
        pulled += src.pages_by_connection[k];
    }
    CHECK(pulled == 8192 - 10);
    loop.announce_done();
}

TEST_CASE("a corrupt page is refetched once and never installed", "[fault_loop][uffd][checksum]") {
    lazy_region region(512);
    test::fake_source src = region.serve();
    src.corrupt_replies = 1; // the refetch arrives intact
    auto loop = make_loop(src);
    loop.set_restore_finished();
    loop.add_process(1, std::move(region.uffd), region.lazy);
    loop.run();
    for (size_t p = 0; p < region.pages; p++)
        REQUIRE(region.page_ok(p));
    REQUIRE(loop.stats().pages_refetched > 0);
    REQUIRE(loop.stats().pages_background == 512);
}

TEST_CASE("the source's holes are never fetched: faults there get the zero page",
          "[fault_loop][uffd][holes]") {
    lazy_region region(2048);
    // The source reads zeros where its pages do not exist.
    std::fill(region.source.begin() + 500 * 512, region.source.begin() + 900 * 512, 0);
    std::fill(region.source.begin() + 1500 * 512, region.source.begin() + 1501 * 512, 0);
    test::fake_source src = region.serve();
    loop_config cfg;
    cfg.background_depth = 0; // only faults fetch: the test decides what is touched
    cfg.progress_interval = std::chrono::milliseconds(0);
    auto loop = make_loop(src, cfg);
    loop.set_restore_finished();
    loop.add_process(1, std::move(region.uffd), region.lazy);
    // A hole of another process is ignored.
    loop.post_holes({{1, region.addr(500), region.addr(900)},
                     {1, region.addr(1500), region.addr(1501)},
                     {2, region.addr(0), region.addr(100)}});
    std::atomic<uint64_t> absent{0};
    loop.on_progress([&](const lazy::loop_stats& s) { absent = s.pages_absent; });

    std::thread runner([&] { loop.run(); });
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (absent < 401 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    REQUIRE(absent == 401);
    const uint64_t requests_before = src.requests;
    bool holes_zero = true;
    for (size_t p = 500; p < 900; p++)
        holes_zero &= region.page_zero(p);
    holes_zero &= region.page_zero(1500);
    // Every hole was zero-filled without a request to the source.
    CHECK(src.requests == requests_before);
    size_t bad = 0;
    for (size_t p = 0; p < region.pages; p++)
        if ((p < 500 || p >= 900) && p != 1500)
            bad += !region.page_ok(p);
    runner.join();
    CHECK(holes_zero);
    CHECK(bad == 0);
    const auto& s = loop.stats();
    CHECK(s.pages_absent == 401);
    CHECK(s.pages_faulted + s.pages_prefetched == 2048 - 401);
    CHECK(s.pages_zero == 401);
    CHECK(s.pages_done() == s.pages_total);
}

TEST_CASE("a page corrupt twice stops the loop and is not installed",
          "[fault_loop][uffd][checksum]") {
    std::vector<bool> resident;
    lazy_region region(256);
    {
        test::fake_source src = region.serve();
        src.corrupt_always = true;
        auto loop = make_loop(src);
        loop.set_restore_finished();
        loop.add_process(1, std::move(region.uffd), region.lazy);
        REQUIRE_THROWS_WITH(loop.run(), Catch::Contains("checksum mismatch again"));
        resident = region.resident(); // while the uffd is still registered
    }
    // Every page that landed is correct; the corrupt ones never landed.
    size_t landed = 0;
    for (size_t p = 0; p < region.pages; p++)
        if (resident[p]) {
            landed++;
            REQUIRE(region.page_ok(p));
        }
    REQUIRE(landed < region.pages);
}

TEST_CASE("a silent source trips the fetch deadline", "[fault_loop][uffd]") {
    lazy_region region(64);
    test::fake_source src = region.serve();
    src.silent = true;
    loop_config cfg;
    cfg.fetch_deadline = std::chrono::milliseconds(200);
    auto loop = make_loop(src, cfg);
    loop.set_restore_finished();
    loop.add_process(1, std::move(region.uffd), region.lazy);
    REQUIRE_THROWS_WITH(loop.run(), Catch::Contains("did not answer"));
}

TEST_CASE("a restore that hangs up before finishing stops the loop", "[fault_loop][uffd]") {
    lazy_region region(16);
    test::fake_source src = region.serve();
    auto loop = make_loop(src);
    criu_driven restore(loop, region);
    restore.criu_end.reset();
    REQUIRE_THROWS_WITH(loop.run(), Catch::Contains("restore failed"));
}

TEST_CASE("unmapped and removed ranges are dropped; remapped ranges follow the move",
          "[fault_loop][uffd]") {
    lazy_region region(1024);
    test::fake_source src = region.serve();
    auto loop = make_loop(src);
    criu_driven restore(loop, region);
    std::thread runner([&] { loop.run(); });

    // Before "restore finished" nothing is pulled in the background, so these
    // ranges are still lazy when the events arrive.
    REQUIRE(::madvise(region.mem + 100 * 512, 50 * page_size, MADV_DONTNEED) == 0); // REMOVE
    REQUIRE(region.page_zero(120)); // no longer lazy: the kernel's own zero page
    REQUIRE(::munmap(region.mem + 900 * 512, 124 * page_size) == 0); // UNMAP
    // mremap pages [500, 600) elsewhere: REMAP; the moved pages keep their contents.
    void* moved = ::mremap(region.mem + 500 * 512, 100 * page_size, 100 * page_size,
                           MREMAP_MAYMOVE | MREMAP_FIXED, region.mem + 900 * 512);
    REQUIRE(moved == region.mem + 900 * 512);
    REQUIRE(region.page_ok(0));
    size_t bad = 0;
    for (size_t i = 0; i < 100; i++)
        bad += !std::equal(region.mem + (900 + i) * 512, region.mem + (901 + i) * 512,
                           region.source.begin() + long((500 + i) * 512));
    REQUIRE(bad == 0);
    restore.finished();
    runner.join();

    const auto& s = loop.stats();
    REQUIRE(s.pages_dropped == 50 + 124);
    REQUIRE(s.pages_faulted + s.pages_prefetched + s.pages_background + s.pages_dropped ==
            s.pages_total);
    for (size_t p = 0; p < 1024; p++) {
        if (p >= 100 && p < 150)
            REQUIRE(region.page_zero(p));
        else if (p < 500 || (p >= 600 && p < 900))
            REQUIRE(region.page_ok(p));
    }
    ::munmap(region.mem + 500 * 512, 100 * page_size);
}

// An area can leave without an event the loop sees (a race with its own
// copies, an UNMAP the kernel did not send): UFFDIO_COPY then answers
// ENOENT for its pages. Nobody can fault on them through this uffd again,
// so they are dropped; until 2026-12-07 a single page's ENOENT stopped the
// loop, and with it the restored workload.
TEST_CASE("pages whose area went without an event are dropped, not fatal", "[fault_loop][uffd]") {
    // No UNMAP events: the munmap below leaves the lazy map as it was.
    lazy_region region(256, {}, UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP);
    REQUIRE(::munmap(region.mem + 100 * 512, 20 * page_size) == 0);
    test::fake_source src = region.serve();
    auto loop = make_loop(src);
    loop.set_restore_finished();
    loop.add_process(1, std::move(region.uffd), region.lazy);
    std::thread toucher([&] {
        // A fault next to the hole: its window reaches into it.
        REQUIRE(region.mem[98 * 512 + 3] == word_of(98, 3));
    });
    REQUIRE_NOTHROW(loop.run());
    toucher.join();

    const auto& s = loop.stats();
    CHECK(s.pages_dropped == 20);
    CHECK(s.pages_faulted + s.pages_prefetched + s.pages_background + s.pages_dropped ==
          s.pages_total);
    for (size_t p = 0; p < region.pages; p++)
        if (p < 100 || p >= 120)
            REQUIRE(region.page_ok(p));
}

// The background copies without the state lock (unlocked_copies.hpp). A
// discard read from the uffd lets the kernel zap the range at once, so a
// copy running across that read would leave source data where the
// application expects zeros (or, once the range is unregistered, fail).
// Discards aimed just past the background's progress, where its copies are.
TEST_CASE("discards during the background's unlocked copies leave zeros, never stale data",
          "[fault_loop][uffd][background]") {
    const size_t pages = 16384;
    lazy_region region(pages);
    test::fake_source src = region.serve();
    // One stream of small requests: a background slow enough for the
    // discards below to find its copies (with two streams of 1 MiB and
    // the faster AES-GCM and checksums of 2026-12-07, an ASan build's
    // background ended after ~100 discards).
    loop_config cfg;
    cfg.background_streams = 1;
    cfg.background_chunk_pages = 64;
    auto loop = make_loop(src, cfg);
    loop.set_restore_finished();
    loop.add_process(1, std::move(region.uffd), region.lazy);
    std::exception_ptr failure;
    std::atomic<bool> ended{false};
    std::thread runner([&] {
        try {
            loop.run();
        } catch (...) {
            failure = std::current_exception();
        }
        ended = true;
    });

    std::vector<bool> discarded(pages);
    std::minstd_rand rng(7);
    size_t discards = 0, ahead_of_background = 0;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!ended && discards < 20000 && std::chrono::steady_clock::now() < give_up) {
        const auto in = region.resident();
        const size_t frontier = size_t(std::find(in.begin(), in.end(), false) - in.begin());
        if (frontier >= pages)
            break;
        const size_t first = std::min(pages - 1, frontier + rng() % 48);
        const size_t count = std::min(pages - first, size_t(1 + rng() % 8));
        ahead_of_background += !in[first];
        REQUIRE(::madvise(region.mem + first * 512, count * page_size, MADV_DONTNEED) == 0);
        for (size_t k = first; k < first + count; k++)
            discarded[k] = true;
        discards++;
    }
    runner.join();
    if (failure)
        std::rethrow_exception(failure);

    INFO(discards << " discards, " << ahead_of_background << " ahead of the background");
    CHECK(ahead_of_background > 100);
    size_t stale = 0, wrong = 0;
    for (size_t p = 0; p < pages; p++) {
        if (discarded[p])
            stale += !region.page_zero(p);
        else
            wrong += !region.page_ok(p);
    }
    REQUIRE(stale == 0);
    REQUIRE(wrong == 0);
    const auto& s = loop.stats();
    REQUIRE(s.pages_background + s.pages_dropped + s.pages_faulted + s.pages_prefetched ==
            s.pages_total);
}

TEST_CASE("\"lazy areas ready\" from the daemon starts the background before restore finishes",
          "[fault_loop][uffd]") {
    lazy_region region(512);
    test::fake_source src = region.serve();
    loop_config cfg;
    cfg.progress_interval = std::chrono::milliseconds(0);
    auto loop = make_loop(src, cfg);
    daemon_driven d(loop, region);
    auto& [restore, daemon, background] = d;
    std::atomic<bool> ended{false};
    std::thread runner([&] {
        loop.run();
        ended = true;
    });

    // Without the word, nothing is pulled.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK(background == 0);
    CHECK(src.requests == 0);

    daemon.areas_ready();
    d.wait_for_background(512);
    CHECK(background == 512);
    // Every page is in, but the transfer is not over before CRIU's restore is.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK_FALSE(ended);
    restore.finished();
    runner.join();
    size_t bad = 0;
    for (size_t p = 0; p < region.pages; p++)
        bad += !region.page_ok(p);
    CHECK(bad == 0);
    CHECK(loop.stats().pages_faulted == 0);
}

// Until the tasks run, "lazy areas ready" lets the background pull the
// small areas only: the bulk would take the CPU from CRIU's last steps,
// inside the downtime. CRIU's "restore finished" comes before those steps,
// the daemon's "tasks run" after them. --main-pass-before-resume pulls the
// bulk from "lazy areas ready" on.
TEST_CASE("until the tasks run, the background pulls only the small areas",
          "[fault_loop][uffd][background]") {
    for (const bool main_pass_before_resume : {false, true}) {
        DYNAMIC_SECTION("main pass before resume: " << main_pass_before_resume) {
            // A small area (pages 450-512) and a large one (0-400).
            lazy_region region(512, {{400, 450}});
            test::fake_source src = region.serve();
            loop_config cfg;
            cfg.progress_interval = std::chrono::milliseconds(0);
            cfg.early_area_pages = 100;
            cfg.main_pass_before_resume = main_pass_before_resume;
            cfg.tasks_run_wait = std::chrono::seconds(60); // only the daemon's word
            auto loop = make_loop(src, cfg);
            daemon_driven d(loop, region);
            auto& [restore, daemon, background] = d;
            std::thread runner([&] { loop.run(); });

            daemon.areas_ready();
            const uint64_t ahead = main_pass_before_resume ? 462 : 62;
            d.wait_for_background(ahead);
            // Given time to pull more, it pulls no more before the resume.
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            CHECK(background == ahead);
            restore.finished();
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            CHECK(background == ahead);
            daemon.tasks_run();
            runner.join();
            CHECK(loop.stats().pages_background == 462);
            size_t bad = 0;
            for (size_t p = 0; p < region.pages; p++)
                if (p < 400 || p >= 450)
                    bad += !region.page_ok(p);
            CHECK(bad == 0);
        }
    }
}

// A daemon that never says "tasks run" (gone, or an engine whose CRIU has
// no Ferry plugin) delays the main pass by tasks_run_wait, no more.
TEST_CASE("without the daemon's word, the main pass starts a while after \"restore finished\"",
          "[fault_loop][uffd][background]") {
    lazy_region region(512, {{400, 450}});
    test::fake_source src = region.serve();
    loop_config cfg;
    cfg.progress_interval = std::chrono::milliseconds(0);
    cfg.early_area_pages = 100;
    cfg.tasks_run_wait = std::chrono::seconds(2);
    auto loop = make_loop(src, cfg);
    daemon_driven d(loop, region);
    auto& [restore, daemon, background] = d;
    std::atomic<bool> told{true};
    loop.on_main_pass([&](uint64_t, bool daemon_said) { told = daemon_said; });
    std::thread runner([&] { loop.run(); });

    daemon.areas_ready();
    d.wait_for_background(62);
    const auto finished_at = std::chrono::steady_clock::now();
    restore.finished();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK(background == 62);
    runner.join();
    CHECK(std::chrono::steady_clock::now() - finished_at >= std::chrono::seconds(2));
    CHECK(loop.stats().pages_background == 462);
    CHECK_FALSE(told);
}

TEST_CASE("the background pulls small areas first, smallest first", "[fault_loop][background]") {
    range_map lazy(false);
    constexpr uint64_t base = 0x10000000;
    lazy.insert(base, base + 1000 * page_size, base);                                       // 1000
    lazy.insert(base + 2000 * page_size, base + 2010 * page_size, base + 2000 * page_size); // 10
    lazy.insert(base + 3000 * page_size, base + 8000 * page_size, base + 3000 * page_size); // 5000
    lazy.insert(base + 9000 * page_size, base + 9200 * page_size, base + 9000 * page_size); // 200
    loop_config cfg;
    cfg.early_area_pages = 4096;
    cfg.early_total_pages = 1500;
    auto early = lazy::early_areas(lazy, cfg);
    REQUIRE(early.size() == 3);
    CHECK(early[0].start == base + 2000 * page_size);
    CHECK(early[1].start == base + 9000 * page_size);
    CHECK(early[2].start == base);
    CHECK(early[2].end == base + 1000 * page_size);
    cfg.early_total_pages = 1000; // the 1000-page area no longer fits after the others
    CHECK(lazy::early_areas(lazy, cfg).size() == 2);
    cfg.early_total_pages = 0;
    CHECK(lazy::early_areas(lazy, cfg).empty());

    // In the loop: the small area at the top is asked for before the large
    // one at the bottom.
    lazy_region region(2048, {{1900, 1950}});
    test::fake_source src = region.serve();
    loop_config small;
    small.early_area_pages = 512; // the 98 pages at the top, not the 1900 below
    // One stream: the order asked is the order read. With two, the second
    // stream's first request (the large area, asked next) can reach the
    // source's other connection first.
    small.background_streams = 1;
    auto loop = make_loop(src, small);
    loop.set_restore_finished();
    loop.add_process(1, std::move(region.uffd), region.lazy);
    loop.run();
    CHECK(src.first_read_vaddr == region.addr(1950));
    size_t bad = 0;
    for (size_t p = 0; p < region.pages; p++)
        if (p < 1900 || p >= 1950)
            bad += !region.page_ok(p);
    CHECK(bad == 0);
}

TEST_CASE("a pre-copy's valid staged pages are installed without a fetch, the others fetched",
          "[fault_loop][uffd][precopy]") {
    lazy_region region(2048);
    test::fake_source src = region.serve();
    auto loop = make_loop(src);
    // Staged: pages [0, 1024). Pages [500, 510) were written after they were
    // sent: stale here, and not in the source's valid runs, so they must be
    // fetched. Pages [1024, 2048) were never staged.
    lazy::staged_pages staged;
    staged.reserve(1024 * page_size);
    staged.store(1, region.addr(0), 1024, region.source_bytes());
    std::vector<std::byte> stale(10 * page_size, std::byte{0x5a});
    staged.store(1, region.addr(500), 10, stale.data());
    staged.publish(
        {{1, {region.addr(0), region.addr(500)}}, {1, {region.addr(510), region.addr(1024)}}});
    REQUIRE(staged.pages_staged() == 1024);
    REQUIRE(staged.pages_valid() == 1014);
    loop.use_staged(staged);
    criu_driven restore(loop, region);

    std::thread runner([&] { loop.run(); });
    // Faults before "restore finished", as during a real restore: staged
    // pages are installed at once, the others fetched.
    const std::vector<size_t> order = shuffled_pages(region.pages, 3);
    size_t bad = 0;
    for (size_t i = 0; i < 200; i++)
        bad += !region.page_ok(order[i]);
    for (size_t p = 500; p < 510; p++)
        bad += !region.page_ok(p);
    restore.finished();
    runner.join();

    REQUIRE(bad == 0);
    for (size_t p = 0; p < region.pages; p++)
        REQUIRE(region.page_ok(p));
    const auto& s = loop.stats();
    REQUIRE(s.pages_precopy_faulted > 0);
    REQUIRE(s.pages_precopied + s.pages_precopy_faulted == 1014);
    REQUIRE(s.pages_faulted + s.pages_prefetched + s.pages_background + s.pages_precopied +
                s.pages_precopy_faulted ==
            s.pages_total);
    // The source served only the pages that were not valid here (a fault's
    // window may reach a few past them).
    uint64_t served = 0;
    for (const auto& n : src.pages_by_connection)
        served += n;
    REQUIRE(served >= 1024 + 10);
    REQUIRE(served < 1024 + 10 + 200);
}

TEST_CASE("staged pages: the last copy of a page counts, only valid runs are found", "[precopy]") {
    lazy::staged_pages staged;
    staged.reserve(64 * page_size);
    std::vector<std::byte> a(4 * page_size, std::byte{0xa}), b(page_size, std::byte{0xb}),
        c(2 * page_size, std::byte{0xc});
    const uint64_t base = 0x7f0000000000;
    staged.store(1, base, 4, a.data());
    staged.store(1, base + page_size, 1, b.data()); // sent again: replaces
    staged.store(2, base, 2, c.data());             // the same address in another process
    staged.store(1, base + 8 * page_size, 1, b.data());
    uint64_t bytes = 0;
    REQUIRE_FALSE(staged.ready());
    REQUIRE(staged.find(1, base, bytes) == nullptr); // nothing is found before publish
    REQUIRE(staged.next(1, base, base + page_size) == base + page_size);
    // Page 3 of pid 1 was written after it was sent; page 6 was never staged.
    staged.publish({{1, {base, base + 3 * page_size}},
                    {2, {base, base + 2 * page_size}},
                    {1, {base + 6 * page_size, base + 9 * page_size}}});
    REQUIRE(staged.ready());
    REQUIRE(staged.pages_staged() == 7);
    REQUIRE(staged.pages_valid() == 6);

    const std::byte* p = staged.find(1, base, bytes);
    REQUIRE(p != nullptr);
    REQUIRE(bytes == 3 * page_size);
    REQUIRE(p[0] == std::byte{0xa});
    REQUIRE(p[page_size] == std::byte{0xb});
    REQUIRE(staged.find(1, base + page_size, bytes)[0] == std::byte{0xb});
    REQUIRE(bytes == 2 * page_size);
    REQUIRE(staged.find(1, base + 3 * page_size, bytes) == nullptr);
    REQUIRE(staged.find(1, base + 6 * page_size, bytes) == nullptr);
    REQUIRE(staged.find(1, base + 8 * page_size, bytes)[0] == std::byte{0xb});
    REQUIRE(bytes == page_size);
    REQUIRE(staged.find(2, base + page_size, bytes)[0] == std::byte{0xc});
    REQUIRE(staged.find(3, base, bytes) == nullptr);

    REQUIRE(staged.next(1, base + 3 * page_size, base + 16 * page_size) == base + 8 * page_size);
    REQUIRE(staged.next(1, base + 3 * page_size, base + 5 * page_size) == base + 5 * page_size);
    REQUIRE(staged.next(1, base + page_size, base + 16 * page_size) == base + page_size);
    REQUIRE(staged.next(2, base + 2 * page_size, base + 16 * page_size) == base + 16 * page_size);
}

TEST_CASE("staged pages: a second list adds the last round's pages; pages sent again are the "
          "rewritten ones",
          "[precopy]") {
    lazy::staged_pages staged;
    staged.reserve(64 * page_size);
    std::vector<std::byte> old_copy(8 * page_size, std::byte{1}),
        new_copy(2 * page_size, std::byte{2});
    const uint64_t base = 0x7f0000000000;
    staged.store(1, base, 8, old_copy.data());
    staged.store(1, base + 2 * page_size, 1, new_copy.data()); // a later round
    // Before the last round: pages 4 and 5 were written since they were sent.
    staged.publish(
        {{1, {base, base + 4 * page_size}}, {1, {base + 6 * page_size, base + 8 * page_size}}});
    REQUIRE(staged.publications() == 1);
    REQUIRE(staged.pages_valid() == 6);
    uint64_t bytes = 0;
    REQUIRE(staged.find(1, base + 4 * page_size, bytes) == nullptr);
    REQUIRE(staged.any_valid(1, base + 3 * page_size, base + 5 * page_size));
    REQUIRE_FALSE(staged.any_valid(1, base + 4 * page_size, base + 6 * page_size));
    const std::byte* before = staged.find(1, base, bytes);
    REQUIRE(before != nullptr);
    REQUIRE(bytes == 4 * page_size);
    // The rewritten pages: page 2, sent twice.
    auto hot = staged.rewritten(1);
    REQUIRE(hot.size() == 1);
    CHECK(hot[0].start == base + 2 * page_size);
    CHECK(hot[0].end == base + 3 * page_size);
    CHECK(staged.pages_rewritten() == 1);

    // The last round: pages 4 and 5 again, then the complete list.
    staged.store(1, base + 4 * page_size, 2, new_copy.data());
    REQUIRE(staged.find(1, base + 4 * page_size, bytes) == nullptr); // not before the list
    staged.publish({{1, {base, base + 8 * page_size}}});
    REQUIRE(staged.publications() == 2);
    REQUIRE(staged.pages_valid() == 8);
    const std::byte* p = staged.find(1, base + 4 * page_size, bytes);
    REQUIRE(p != nullptr);
    CHECK(p[0] == std::byte{2});
    CHECK(p[page_size] == std::byte{2});
    CHECK(staged.find(1, base + 6 * page_size, bytes)[0] == std::byte{1});
    // What a reader found in the first list is still there, unchanged.
    CHECK(before[0] == std::byte{1});
    CHECK(before[2 * page_size] == std::byte{2});
    // The last round's pages were sent again too.
    hot = staged.rewritten(1);
    REQUIRE(hot.size() == 2);
    CHECK(hot[0].start == base + 2 * page_size);
    CHECK(hot[1].start == base + 4 * page_size);
    CHECK(hot[1].end == base + 6 * page_size);
    CHECK(staged.pages_rewritten() == 3);
}

TEST_CASE("a second list adds the last round's staged pages; a stale copy is never installed",
          "[fault_loop][uffd][precopy]") {
    lazy_region region(2048);
    test::fake_source src = region.serve();
    loop_config cfg;
    cfg.early_area_pages = 0; // no early areas: nothing is pulled before the tasks run
    auto loop = make_loop(src, cfg);
    // Staged: pages [0, 1024); [100, 110) came twice (rewritten during the
    // pre-copy); [500, 510) were written after their last round: stale
    // until the last round brings them. [1024, 2048) were never staged.
    lazy::staged_pages staged;
    staged.reserve(1024 * page_size);
    staged.store(1, region.addr(0), 500, region.source_bytes());
    std::vector<std::byte> stale(10 * page_size, std::byte{0x5a});
    staged.store(1, region.addr(500), 10, stale.data());
    staged.store(1, region.addr(510), 514, region.source_bytes() + 510 * page_size);
    staged.store(1, region.addr(100), 10, region.source_bytes() + 100 * page_size);
    staged.publish(
        {{1, {region.addr(0), region.addr(500)}}, {1, {region.addr(510), region.addr(1024)}}});
    loop.use_staged(staged);
    daemon_driven d(loop, region);
    std::thread runner([&] { loop.run(); });
    d.daemon.areas_ready();
    // Faults before the tasks run: a staged page from its copy, a stale one
    // from the source.
    bool bad = !region.page_ok(700) || !region.page_ok(505);
    // The last round, and the complete list; then the tasks run.
    staged.store(1, region.addr(500), 10, region.source_bytes() + 500 * page_size);
    staged.publish({{1, {region.addr(0), region.addr(1024)}}});
    d.restore.finished();
    d.daemon.tasks_run();
    runner.join();

    CHECK_FALSE(bad);
    for (size_t p = 0; p < region.pages; p++) {
        INFO("page " << p);
        REQUIRE(region.page_ok(p));
    }
    const auto& s = loop.stats();
    CHECK(s.pages_precopied + s.pages_precopy_faulted >= 1014);
    CHECK(s.pages_faulted + s.pages_prefetched + s.pages_background + s.pages_precopied +
              s.pages_precopy_faulted ==
          s.pages_total);
}
