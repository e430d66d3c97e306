// fetch_page_holes: a wait for a silent source ends once its connection is
// shut down from another thread (lazy-pages' exit must not wait on it).
#include "test_credentials.hpp"
#include "test_listener.hpp"
#include "tls/tls_stream.hpp"
#include "transport/page_holes.hpp"
#include "wire/control.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <mutex>

using namespace ferry;
using namespace std::chrono_literals;

TEST_CASE("a holes wait on a silent source ends when its connection is shut down", "[page_holes]") {
    test::loopback_listener l;
    // The source: authenticates, takes the channel's opening frame, then
    // says nothing more (a source host that went away after the images).
    auto source = std::async(std::launch::async, [&] {
        tls::tls_stream s(l.accept(), test::loopback_credentials(), tls::tls_stream::role::server);
        tls::authenticate_client(s, {}, net::after(10s));
        auto open = control::receive(s, net::after(10s));
        REQUIRE(open);
        CHECK(open->body_case == FERRY_CONTROL__ENVELOPE__BODY_PAGE_CHANNEL_OPEN);
        std::byte b;
        try {
            (void)net::read_full(s, {&b, 1}, net::after(30s), "wait for the close");
        } catch (const std::exception&) {
            // closed or reset: either way the client is gone
        }
    });
    std::mutex m;
    net::stream* conn = nullptr;
    bool handed_back = false;
    auto fetch = std::async(std::launch::async, [&] {
        return fetch_page_holes(
            l.ep, test::loopback_credentials(), "0123456789abcdef0123456789abcdef", 10s, 10min,
            [] { return true; }, [](std::vector<page_hole>) {},
            [&](net::stream* c) {
                std::lock_guard lock(m);
                if (c)
                    conn = c;
                else
                    handed_back = true;
            });
    });
    // Waiting for the first part now.
    for (int i = 0; i < 200; i++) {
        {
            std::lock_guard lock(m);
            if (conn)
                break;
        }
        std::this_thread::sleep_for(10ms);
    }
    CHECK(fetch.wait_for(300ms) == std::future_status::timeout); // it waits, as it should
    {
        std::lock_guard lock(m);
        REQUIRE(conn);
        conn->shutdown();
    }
    REQUIRE(fetch.wait_for(10s) == std::future_status::ready); // not the 10 min
    CHECK_THROWS(fetch.get());
    std::lock_guard lock(m);
    CHECK(handed_back);
    source.get();
}
