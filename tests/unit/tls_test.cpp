// Mutual TLS between Ferry's processes (lib/tls): who is let in, who is not,
// and that bytes cross intact, including the agreed fall back to plaintext.
#include "core/clock.hpp"
#include "test_credentials.hpp"
#include "test_listener.hpp"
#include "tls/tls_stream.hpp"
#include "tls/x509.hpp"
#include "wire/control.hpp"

#include <catch2/catch.hpp>
#include <sys/socket.h>
#include <sys/stat.h>

#include <future>
#include <numeric>
#include <thread>

using namespace ferry;

namespace {

constexpr auto handshake_bound = std::chrono::seconds(5);

using listener = test::loopback_listener;

// Runs the server side of one connection on a thread; its result is the
// authenticated stream or the error it ended with.
struct server_side {
    std::future<std::unique_ptr<tls::tls_stream>> result;
    server_side(const listener& l, const tls::credentials_ptr& creds,
                tls::peer_policy policy = {}) {
        result = std::async(std::launch::async, [&l, creds, policy] {
            auto s =
                std::make_unique<tls::tls_stream>(l.accept(), creds, tls::tls_stream::role::server);
            tls::authenticate_client(*s, policy, net::after(handshake_bound));
            return s;
        });
    }
};

std::string failure_of(std::future<std::unique_ptr<tls::tls_stream>>& f) {
    try {
        (void)f.get();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "";
}

} // namespace

TEST_CASE("two hosts of one cluster CA authenticate each other and exchange frames") {
    listener l;
    server_side server(l, test::loopback_credentials());
    auto client = tls::connect(l.ep, test::loopback_credentials(), handshake_bound);
    auto srv = server.result.get();
    CHECK(client->peer_identity() == "127.0.0.1");
    CHECK(srv->peer_identity() == "127.0.0.1");
    CHECK(client->encrypted());

    FerryControl__LazyStart go = FERRY_CONTROL__LAZY_START__INIT;
    control::send_message(*client, go, net::after(handshake_bound));
    auto got = control::receive(*srv, net::after(handshake_bound));
    REQUIRE(got);
    CHECK(got->body_case == FERRY_CONTROL__ENVELOPE__BODY_LAZY_START);

    // Several MiB each way through non-blocking sockets and whole records.
    std::vector<std::byte> out(5 << 20), in(out.size());
    std::iota(reinterpret_cast<uint8_t*>(out.data()),
              reinterpret_cast<uint8_t*>(out.data()) + out.size(), uint8_t(7));
    auto writer = std::async(std::launch::async, [&] {
        net::write_full(*srv, out, net::after(handshake_bound), "test send");
    });
    REQUIRE(net::read_full(*client, in, net::after(handshake_bound), "test receive"));
    writer.get();
    CHECK(in == out);
}

TEST_CASE("a stream that times its receipts says when the bytes arrived, not when they were read") {
    listener l;
    server_side server(l, test::loopback_credentials());
    auto client = tls::connect(l.ep, test::loopback_credentials(), handshake_bound);
    auto srv = server.result.get();
    CHECK(srv->last_receipt_ns() == 0);
    REQUIRE(srv->time_receipts());
    FerryControl__LazyStart go = FERRY_CONTROL__LAZY_START__INIT;
    // Where no socket had asked before, the kernel turns its receive stamps
    // on from a work item (net_enable_timestamp): segments that arrive
    // before it ran carry none. Frames until one is stamped (bounded).
    for (int i = 0; i < 200 && srv->last_receipt_ns() == 0; i++) {
        control::send_message(*client, go, net::after(handshake_bound));
        REQUIRE(control::receive(*srv, net::after(handshake_bound)));
        if (srv->last_receipt_ns() == 0)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    REQUIRE(srv->last_receipt_ns() != 0);
    const uint64_t before_send = monotonic_ns();
    control::send_message(*client, go, net::after(handshake_bound));
    const uint64_t after_send = monotonic_ns();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const uint64_t before_read = monotonic_ns();
    auto got = control::receive(*srv, net::after(handshake_bound));
    REQUIRE(got);
    CHECK(got->body_case == FERRY_CONTROL__ENVELOPE__BODY_LAZY_START);
    // Loopback stamps a segment inside its sender's send(); the read came
    // 50 ms later. (1 ms for turning the kernel's realtime stamp monotonic.)
    const uint64_t at = srv->last_receipt_ns();
    CHECK(at >= before_send);
    CHECK(at <= after_send + 1'000'000);
    CHECK(at < before_read);
    // The client never asked: it has no receipt times.
    control::send_message(*srv, go, net::after(handshake_bound));
    REQUIRE(control::receive(*client, net::after(handshake_bound)));
    CHECK(client->last_receipt_ns() == 0);
}

TEST_CASE("a peer with a certificate from another CA is refused, both ways") {
    SECTION("an outsider dials a daemon") {
        listener l;
        server_side server(l, test::loopback_credentials());
        CHECK_THROWS(tls::connect(l.ep, test::foreign_credentials(), handshake_bound));
        const auto why = failure_of(server.result);
        INFO(why);
        CHECK(why.find("TLS") != std::string::npos);
    }
    SECTION("a daemon of another CA answers") {
        listener l;
        server_side server(l, test::foreign_credentials());
        try {
            (void)tls::connect(l.ep, test::loopback_credentials(), handshake_bound);
            FAIL("connected to a server the cluster CA did not sign");
        } catch (const std::exception& e) {
            INFO(e.what());
            CHECK(std::string(e.what()).find("TLS authentication of 127.0.0.1") !=
                  std::string::npos);
        }
        CHECK_FALSE(failure_of(server.result).empty());
    }
}

TEST_CASE("a plaintext control frame gets no answer and is never parsed") {
    listener l;
    server_side server(l, test::loopback_credentials());
    unique_fd raw = net::tcp_connect(l.ep, handshake_bound);
    FerryControl__LazyStart go = FERRY_CONTROL__LAZY_START__INIT;
    control::send_message(raw.get(), go, net::after(handshake_bound));
    const auto why = failure_of(server.result);
    INFO(why);
    CHECK(why.find("TLS handshake") != std::string::npos);
    // The server closed without sending a control frame back.
    std::byte b[64];
    ssize_t n;
    do
        n = ::recv(raw.get(), b, sizeof b, 0);
    while (n > 0 && b[0] == std::byte{0x15}); // a TLS alert record at most
    CHECK(n <= 0);
}

TEST_CASE("a silent peer is dropped when the handshake deadline passes") {
    listener l;
    auto result = std::async(std::launch::async, [&] {
        tls::tls_stream s(l.accept(), test::loopback_credentials(), tls::tls_stream::role::server);
        tls::authenticate_client(s, {}, net::after(std::chrono::milliseconds(300)));
    });
    unique_fd raw = net::tcp_connect(l.ep, handshake_bound); // says nothing
    try {
        result.get();
        FAIL("a peer that never spoke was authenticated");
    } catch (const std::exception& e) {
        CHECK(std::string(e.what()).find("timed out") != std::string::npos);
    }
}

TEST_CASE("a daemon's peer policy admits only the names it lists") {
    listener l;
    server_side server(l, test::loopback_credentials(), tls::peer_policy{{"host-b"}});
    try {
        auto c = tls::connect(l.ep, test::loopback_credentials(), handshake_bound);
        std::byte b;
        (void)net::read_full(*c, {&b, 1}, net::after(handshake_bound), "wait for close");
    } catch (const std::exception&) {
        // refused: either end may notice first
    }
    const auto why = failure_of(server.result);
    CHECK(why.find("not allowed by this daemon's peer policy") != std::string::npos);
}

TEST_CASE("both ends leave TLS at an agreed point and go on in plaintext") {
    listener l;
    server_side server(l, test::loopback_credentials());
    auto client = tls::connect(l.ep, test::loopback_credentials(), handshake_bound);
    auto srv = server.result.get();
    auto srv_plain = std::async(std::launch::async, [&] {
        return net::socket_stream(srv->to_plaintext(net::after(handshake_bound)));
    });
    net::socket_stream cli_plain(client->to_plaintext(net::after(handshake_bound)));
    auto sp = srv_plain.get();
    const std::string msg = "pages in the clear";
    net::write_full(cli_plain, std::as_bytes(std::span(msg)), net::after(handshake_bound), "send");
    std::string back(msg.size(), '\0');
    REQUIRE(net::read_full(sp, std::as_writable_bytes(std::span(back)), net::after(handshake_bound),
                           "receive"));
    CHECK(back == msg);
}

TEST_CASE("credentials: a CA, host certificates with their addresses, clear errors") {
    test::temp_dir d("ferry-ca");
    CHECK_THROWS_WITH(tls::credentials::load(d.path / "none"),
                      Catch::Contains("migrator credentials init"));
    tls::init_authority(d.path);
    CHECK_THROWS_WITH(tls::init_authority(d.path), Catch::Contains("already holds a CA"));
    struct stat st {};
    REQUIRE(::stat((d.path / tls::ca_key_file).c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);

    tls::issue_host(d.path, {"node-7", {"10.1.2.3"}, {}}, d.path / "node-7");
    auto creds = tls::credentials::load(d.path / "node-7");
    CHECK(creds->identity() == "node-7");
    const auto names = tls::alt_names(tls::read_certificate(d.path / "node-7" / "cert.pem").get());
    CHECK(names == std::vector<std::string>{"10.1.2.3", "node-7"});
    CHECK_THROWS_WITH(tls::issue_host(d.path, {"bad/name", {}, {}}, d.path / "x"),
                      Catch::Contains("not a host name"));
    CHECK_THROWS_WITH(tls::issue_host(d.path, {"h", {"10.1.2"}, {}}, d.path / "x"),
                      Catch::Contains("not an IP address"));
}
