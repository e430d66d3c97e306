// pagesrv's precopy_source on a real child process and the PRECOPY
// channel's frames as the destination reads them: the first round sends
// every present page, a later round what the child wrote, and at the freeze
// the valid runs leave out pages written after the last round and pages
// the child dropped; the list sent before the last round holds only pages
// whose latest contents came already. The trackers are gone once the channel ends.
#include "core/checksum.hpp"
#include "core/error.hpp"
#include "core/page.hpp"
#include "precopy_source.hpp"
#include "sys/proc.hpp"
#include "sys/stream.hpp"
#include "wire/control.hpp"
#include "wire/page_wire.hpp"
#include "writer_child.hpp"

#include <signal.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>

#include <array>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

using namespace ferry;

namespace {

constexpr size_t area_pages = 512; // 2 MiB
using test::writer_child;

// The destination's side: every page's last copy (its first byte), and the
// valid runs once they came.
struct destination {
    std::mutex mu;
    std::condition_variable changed;
    std::map<uint64_t, std::byte> pages;
    std::vector<std::pair<uint64_t, uint64_t>> valid;              // the last list
    std::vector<std::vector<std::pair<uint64_t, uint64_t>>> lists; // every list, in order
    std::vector<std::map<uint64_t, std::byte>> first_valid_pages;  // pages as each list came
    bool ended = false;
    std::string failure;

    void read(net::stream& conn, uint32_t pid) {
        try {
            auto plan = control::receive(conn, net::after(std::chrono::seconds(10)));
            control::expect(plan.get(), FERRY_CONTROL__ENVELOPE__BODY_PRECOPY_PLAN, "source");
            std::vector<std::byte> data(size_t(wire::max_pages_per_request) * page_size);
            std::vector<uint64_t> sums(wire::max_pages_per_request);
            // The rounds, then (if the first list says more) the last round.
            for (bool more = true; more;) {
                for (;;) {
                    wire::header_bytes h;
                    if (!net::read_full(conn, h, net::after(std::chrono::seconds(10)), "frame"))
                        throw error("closed");
                    wire::page_reply r;
                    if (wire::decode(h, r) != wire::decode_error::none)
                        throw error("bad frame");
                    if (r.nr_pages == 0 && r.request_id == ~0ull)
                        break;
                    if (r.pid != pid)
                        throw error("a frame of another pid");
                    (void)net::read_full(conn,
                                         std::as_writable_bytes(std::span(sums).first(r.nr_pages)),
                                         net::after(std::chrono::seconds(10)), "sums");
                    (void)net::read_full(conn,
                                         std::span(data).first(size_t(r.nr_pages) * page_size),
                                         net::after(std::chrono::seconds(10)), "pages");
                    std::lock_guard lock(mu);
                    for (uint32_t i = 0; i < r.nr_pages; i++) {
                        if (page_checksum(data.data() + size_t(i) * page_size) != sums[i])
                            throw error("checksum");
                        const uint64_t addr = r.vaddr + i * page_size;
                        if (is_in(lists.empty() ? valid : lists.back(), addr))
                            throw error("a page sent again after it was said valid");
                        pages[addr] = data[size_t(i) * page_size];
                    }
                    changed.notify_all();
                }
                std::vector<std::pair<uint64_t, uint64_t>> list;
                for (;;) {
                    auto f = control::receive(conn, net::after(std::chrono::seconds(10)));
                    control::expect(f.get(), FERRY_CONTROL__ENVELOPE__BODY_PRECOPY_VALID, "source");
                    const auto& v = *f->precopy_valid;
                    for (size_t i = 0; i < v.n_pid; i++)
                        list.emplace_back(v.start[i], v.end[i]);
                    if (v.last) {
                        more = v.has_more && v.more;
                        break;
                    }
                }
                std::lock_guard lock(mu);
                // Each list is what the destination may use: every page in
                // it must hold its latest contents already.
                first_valid_pages.push_back(pages);
                lists.push_back(list);
                valid = list;
            }
        } catch (const std::exception& e) {
            std::lock_guard lock(mu);
            failure = e.what();
        }
        std::lock_guard lock(mu);
        ended = true;
        changed.notify_all();
    }
    // Until page `addr` was received with first byte `value`, for at most 10 s.
    bool wait_page(uint64_t addr, std::byte value) {
        std::unique_lock lock(mu);
        return changed.wait_for(lock, std::chrono::seconds(10), [&] {
            auto it = pages.find(addr);
            return ended || (it != pages.end() && it->second == value);
        }) && !ended;
    }
    static bool is_in(const std::vector<std::pair<uint64_t, uint64_t>>& runs, uint64_t addr) {
        for (const auto& [s, e] : runs)
            if (addr >= s && addr < e)
                return true;
        return false;
    }
    [[nodiscard]] bool is_valid(uint64_t addr) const { return is_in(valid, addr); }
};

// A pre-copy of `c` served on one end of a socket pair while `dest`
// reads the other, each on a thread of its own; both joined at the end.
struct served_precopy {
    explicit served_precopy(
        const writer_child& c,
        std::chrono::milliseconds round_interval = pagesrv::precopy_source::default_round_interval)
        : src(std::make_unique<pagesrv::precopy_source>("test", c.pid, "destination",
                                                        std::chrono::seconds(5), round_interval)) {
        reader = std::thread([this, pid = uint32_t(c.pid)] { dest.read(destination_end, pid); });
        server = std::thread([this] {
            try {
                src->serve(source_end);
            } catch (const std::exception&) {
            }
        });
    }
    // A test that failed half-way ends both threads too.
    ~served_precopy() {
        if (src)
            src->stop();
        destination_end.shutdown();
        join();
    }
    void join() {
        if (server.joinable())
            server.join();
        if (reader.joinable())
            reader.join();
    }
    static std::array<unique_fd, 2> socket_pair() {
        int sv[2];
        REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        return {unique_fd(sv[0]), unique_fd(sv[1])};
    }

    std::unique_ptr<pagesrv::precopy_source> src;
    std::array<unique_fd, 2> fds = socket_pair();
    net::socket_stream source_end{std::move(fds[0])}, destination_end{std::move(fds[1])};
    destination dest;
    std::thread reader, server;
};

} // namespace

TEST_CASE("a pre-copy sends every page, then what was written, and at the freeze what was "
          "written since the last round; the valid runs leave out pages dropped",
          "[precopy][write_tracker]") {
    writer_child c(area_pages);
    served_precopy pre(c);
    pagesrv::precopy_source& src = *pre.src;
    destination& dest = pre.dest;
    REQUIRE(src.summary().error.empty());
    REQUIRE(c.write_tracked());

    const auto first = src.wait_converged(std::chrono::seconds(10));
    REQUIRE(first.converged);
    REQUIRE(first.connected);
    REQUIRE(first.tracked_pages >= area_pages);
    REQUIRE(dest.wait_page(c.area + 7 * page_size, std::byte{1}));

    // Written while the rounds run: sent again.
    c.write_page(10);
    REQUIRE(dest.wait_page(c.area + 10 * page_size, std::byte{2}));
    // Near the freeze: written (sent in a round at the idle policy, or at
    // the freeze), and dropped.
    src.freeze_near();
    c.write_page(20);
    c.drop_page(30);
    src.freeze();
    pre.join();

    INFO(dest.failure);
    REQUIRE(dest.failure.empty());
    REQUIRE(dest.is_valid(c.area + 10 * page_size));
    REQUIRE(dest.pages[c.area + 10 * page_size] == std::byte{2});
    REQUIRE(dest.is_valid(c.area + 20 * page_size));
    REQUIRE(dest.pages[c.area + 20 * page_size] == std::byte{2});
    REQUIRE_FALSE(dest.is_valid(c.area + 30 * page_size));
    // The list before the last round, if there was one, is usable at once:
    // each page in it already held its latest contents when it came.
    REQUIRE(!dest.lists.empty());
    for (size_t l = 0; l < dest.lists.size(); l++)
        for (size_t p = 0; p < area_pages; p++) {
            const uint64_t addr = c.area + p * page_size;
            if (!destination::is_in(dest.lists[l], addr))
                continue;
            INFO("list " << l << " page " << p);
            REQUIRE(dest.first_valid_pages[l].count(addr) == 1);
            CHECK(dest.first_valid_pages[l].at(addr) ==
                  (p == 10 || p == 20 ? std::byte{2} : std::byte{1}));
        }
    size_t valid_in_area = 0;
    for (size_t p = 0; p < area_pages; p++)
        if (dest.is_valid(c.area + p * page_size)) {
            valid_in_area++;
            REQUIRE(dest.pages[c.area + p * page_size] ==
                    (p == 10 || p == 20 ? std::byte{2} : std::byte{1}));
        }
    REQUIRE(valid_in_area == area_pages - 1);
    // The trackers stay while the migration lasts (unregistering would take
    // the frozen tasks' mmap locks from the page server), and go with it.
    REQUIRE(c.write_tracked());
    pre.src.reset();
    REQUIRE_FALSE(c.write_tracked());
    c.write_page(40);
}

TEST_CASE("a stopped pre-copy detaches its trackers as its channel ends",
          "[precopy][write_tracker]") {
    writer_child c(area_pages);
    served_precopy pre(c);
    REQUIRE(pre.src->wait_converged(std::chrono::seconds(10)).converged);
    REQUIRE(c.write_tracked());
    pre.src->stop(); // an abort: the source runs on
    pre.server.join();
    REQUIRE_FALSE(c.write_tracked());
    pre.destination_end.shutdown();
    pre.reader.join();
    c.write_page(41);
}

TEST_CASE("the last round at the freeze sends what no round did, at most its bound; the pages "
          "over it are not valid",
          "[precopy][write_tracker]") {
    const size_t pages = pagesrv::precopy_final_round_pages + 300;
    writer_child c(pages);
    // One round only, the first: what is written after it goes at the freeze.
    served_precopy pre(c, std::chrono::hours(1));
    REQUIRE(pre.dest.wait_page(c.area + (pages - 1) * page_size, std::byte{1}));
    c.write_all();
    pre.src->freeze();
    pre.join();

    INFO(pre.dest.failure);
    REQUIRE(pre.dest.failure.empty());
    size_t valid_written = 0, valid_stale = 0;
    for (size_t p = 0; p < pages; p++)
        if (pre.dest.is_valid(c.area + p * page_size))
            (pre.dest.pages[c.area + p * page_size] == std::byte{2} ? valid_written
                                                                    : valid_stale)++;
    CHECK(valid_stale == 0); // a page with its old contents is never valid
    CHECK(valid_written == pagesrv::precopy_final_round_pages);
    // Two lists: first the pages valid before the last round (none here:
    // every page was written after the only round), then all of them.
    REQUIRE(pre.dest.lists.size() == 2);
    size_t first_valid = 0;
    for (size_t p = 0; p < pages; p++)
        if (destination::is_in(pre.dest.lists[0], c.area + p * page_size))
            first_valid++;
    CHECK(first_valid == 0);
    CHECK(pre.src->summary().final_round_pages == pagesrv::precopy_final_round_pages);
    CHECK(pre.src->summary().rounds == 0);
}

TEST_CASE("near the freeze the rounds end once the tree is seen freezing; what it wrote goes at "
          "the freeze",
          "[precopy][write_tracker]") {
    writer_child c(area_pages);
    served_precopy pre(c);
    REQUIRE(pre.src->wait_converged(std::chrono::seconds(10)).converged);
    pre.src->freeze_near();
    c.write_page(5);
    REQUIRE(::kill(c.pid, SIGSTOP) == 0); // as a stop: the root's state is 'T'
    const auto stopped_by = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (ferry::proc::state(c.pid) != 'T' && std::chrono::steady_clock::now() < stopped_by)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    REQUIRE(ferry::proc::state(c.pid) == 'T');
    // A round in progress ends at its next frame; then none comes.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const uint32_t rounds = pre.src->summary().rounds;
    std::this_thread::sleep_for(std::chrono::milliseconds(300)); // ~15 round intervals
    CHECK(pre.src->summary().rounds == rounds);
    REQUIRE(::kill(c.pid, SIGCONT) == 0);
    c.write_page(6);
    pre.src->freeze();
    pre.join();

    INFO(pre.dest.failure);
    REQUIRE(pre.dest.failure.empty());
    for (const uint64_t page : {5, 6}) {
        REQUIRE(pre.dest.is_valid(c.area + page * page_size));
        CHECK(pre.dest.pages[c.area + page * page_size] == std::byte{2});
    }
    CHECK(pre.src->summary().final_round_pages >= 1); // page 6 at least
    // Page 6 came in the last round: not in the list before it.
    REQUIRE(pre.dest.lists.size() == 2);
    CHECK_FALSE(destination::is_in(pre.dest.lists[0], c.area + 6 * page_size));
    CHECK(destination::is_in(pre.dest.lists[1], c.area + 6 * page_size));
}

TEST_CASE("a batch read that stops early sends what came and reads on after the failing page",
          "[precopy]") {
    using pagesrv::count_pieces_read;
    const std::array<pagesrv::frame_piece, 3> pieces{{{0x1000, 1}, {0x8000, 3}, {0x20000, 2}}};
    const auto check = [&](uint64_t read, size_t frames, size_t done) {
        INFO("read " << read);
        const auto r = count_pieces_read(pieces, read);
        CHECK(r.frames == frames);
        CHECK(r.done == done);
    };
    check(6, 3, 3); // all of it
    check(0, 0, 1); // the first page failed: the next read starts at the second piece
    check(1, 1, 2); // the second piece's first page failed: skipped, the third read next
    check(2, 2, 2); // the second piece in part: its start goes, its rest is skipped
    check(4, 2, 3); // the third piece's first page failed
    check(5, 3, 3); // the third in part
    CHECK(count_pieces_read({}, 0).done == 0);
}
