// Ferry's own TLS 1.3 record layer (lib/tls/record_cipher, used by
// tls_stream after the handshake): its records are the ones GnuTLS reads and
// writes, any reader's buffer size gets the bytes intact, and a record
// changed in flight is refused, not delivered.
#include "byte_pattern.hpp"
#include "test_credentials.hpp"
#include "test_listener.hpp"
#include "tls/tls_stream.hpp"

#include <catch2/catch.hpp>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <future>
#include <thread>
#include <vector>

using namespace ferry;

namespace {

constexpr auto io_bound = std::chrono::seconds(10);

using listener = test::loopback_listener;

// A GnuTLS server with GnuTLS's own record layer, on a blocking socket.
struct gnutls_server {
    gnutls_session_t s = nullptr;
    unique_fd fd;
    explicit gnutls_server(unique_fd c) : fd(std::move(c)) {
        REQUIRE(gnutls_init(&s, GNUTLS_SERVER | GNUTLS_NO_TICKETS) == 0);
        REQUIRE(gnutls_priority_set_direct(s, "NORMAL:-VERS-ALL:+VERS-TLS1.3", nullptr) == 0);
        REQUIRE(gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE,
                                       test::loopback_credentials()->get()) == 0);
        gnutls_certificate_server_set_request(s, GNUTLS_CERT_REQUIRE);
        gnutls_transport_set_int(s, fd.get());
        gnutls_handshake_set_timeout(s, 10000);
        int rc;
        do
            rc = gnutls_handshake(s);
        while (rc < 0 && !gnutls_error_is_fatal(rc));
        REQUIRE(rc == 0);
    }
    ~gnutls_server() { gnutls_deinit(s); }
    void receive(std::span<std::byte> buf) {
        size_t got = 0;
        while (got < buf.size()) {
            const ssize_t n = gnutls_record_recv(s, buf.data() + got, buf.size() - got);
            if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED)
                continue;
            REQUIRE(n > 0);
            got += size_t(n);
        }
    }
    void send(std::span<const std::byte> buf) {
        size_t sent = 0;
        while (sent < buf.size()) {
            const ssize_t n = gnutls_record_send(s, buf.data() + sent, buf.size() - sent);
            if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED)
                continue;
            REQUIRE(n > 0);
            sent += size_t(n);
        }
    }
};

// Copies bytes between two sockets both ways; from byte `flip_at` of the
// client-to-server direction on, it changes one byte.
struct tampering_relay {
    listener front;
    std::atomic<uint64_t> flip_at{UINT64_MAX};
    std::atomic<uint64_t> forwarded{0};
    std::thread pump;
    int stop_pipe[2] = {-1, -1};

    explicit tampering_relay(const net::endpoint& server) {
        REQUIRE(::pipe2(stop_pipe, O_CLOEXEC) == 0);
        pump = std::thread([this, server] {
            unique_fd a = front.accept();
            unique_fd b = net::tcp_connect(server, std::chrono::seconds(5));
            std::vector<char> buf(1 << 16);
            for (;;) {
                pollfd p[3] = {
                    {a.get(), POLLIN, 0}, {b.get(), POLLIN, 0}, {stop_pipe[0], POLLIN, 0}};
                if (::poll(p, 3, 10000) <= 0 || p[2].revents)
                    return;
                for (int i = 0; i < 2; i++) {
                    if (!p[i].revents)
                        continue;
                    const int from = i == 0 ? a.get() : b.get(), to = i == 0 ? b.get() : a.get();
                    const ssize_t n = ::recv(from, buf.data(), buf.size(), 0);
                    if (n <= 0)
                        return;
                    if (i == 0) {
                        const uint64_t start = forwarded.fetch_add(uint64_t(n));
                        const uint64_t at = flip_at.load();
                        if (at >= start && at < start + uint64_t(n))
                            buf[at - start] ^= 0x20;
                    }
                    if (::send(to, buf.data(), size_t(n), MSG_NOSIGNAL) != n)
                        return;
                }
            }
        });
    }
    ~tampering_relay() {
        (void)!::write(stop_pipe[1], "x", 1);
        pump.join();
        ::close(stop_pipe[0]);
        ::close(stop_pipe[1]);
    }
};

} // namespace

TEST_CASE("Ferry's records are TLS 1.3 that GnuTLS reads and writes", "[tls_records]") {
    listener l;
    auto server =
        std::async(std::launch::async, [&] { return std::make_unique<gnutls_server>(l.accept()); });
    auto client = tls::connect(l.ep, test::loopback_credentials(), io_bound);
    auto srv = server.get();
    REQUIRE(client->records_by_ferry());

    // A page reply's shape (header, checksums, 64 pages), then odd sizes.
    const auto data = test::byte_pattern(3 << 20, 1);
    auto sent = std::async(std::launch::async, [&] {
        size_t off = 0;
        for (const size_t piece : {size_t(40), size_t(512), size_t(262144), size_t(1),
                                   size_t(16384), size_t(16385), size_t(4095), size_t(100000)}) {
            iovec iov[2] = {
                {const_cast<std::byte*>(data.data() + off), piece / 2},
                {const_cast<std::byte*>(data.data() + off + piece / 2), piece - piece / 2}};
            net::writev_full(*client, iov, 2, net::after(io_bound), "send");
            off += piece;
        }
        net::write_full(*client, std::span(data).subspan(off), net::after(io_bound), "send");
    });
    std::vector<std::byte> got(data.size());
    srv->receive(got);
    sent.get();
    CHECK(got == data);

    // GnuTLS's records (with its own sequence numbers) read by Ferry's layer.
    const auto back = test::byte_pattern(2 << 20, 2);
    auto sent_back = std::async(std::launch::async, [&] { srv->send(back); });
    std::vector<std::byte> in(back.size());
    REQUIRE(net::read_full(*client, in, net::after(io_bound), "receive"));
    sent_back.get();
    CHECK(in == back);

    // GnuTLS's close_notify is a clean end.
    REQUIRE(gnutls_bye(srv->s, GNUTLS_SHUT_WR) == 0);
    std::byte b;
    REQUIRE(net::wait_readable(client->fd(), net::after(io_bound)));
    ssize_t n;
    while ((n = client->read_some(&b, 1)) < 0)
        REQUIRE(net::wait_readable(client->fd(), net::after(io_bound)));
    CHECK(n == 0);
}

TEST_CASE("any reader's buffer sizes get the bytes intact", "[tls_records]") {
    listener l;
    auto server = std::async(std::launch::async, [&] {
        auto s = std::make_unique<tls::tls_stream>(l.accept(), test::loopback_credentials(),
                                                   tls::tls_stream::role::server);
        tls::authenticate_client(*s, {}, net::after(io_bound));
        return s;
    });
    auto client = tls::connect(l.ep, test::loopback_credentials(), io_bound);
    auto srv = server.get();
    REQUIRE(srv->records_by_ferry());

    const auto data = test::byte_pattern(4 << 20, 3);
    auto sent = std::async(std::launch::async,
                           [&] { net::write_full(*srv, data, net::after(io_bound), "send"); });
    std::vector<std::byte> in(data.size());
    size_t off = 0, k = 0;
    const size_t sizes[] = {1, 7, 4095, 16384, 16385, 16399, 3, 100000, 262144, 15};
    while (off < in.size()) {
        const size_t want = std::min(sizes[k++ % std::size(sizes)], in.size() - off);
        REQUIRE(net::read_full(*client, std::span(in).subspan(off, want), net::after(io_bound),
                               "receive"));
        off += want;
    }
    sent.get();
    CHECK(in == data);
    CHECK_FALSE(client->buffered());
}

TEST_CASE("a record changed in flight fails authentication and delivers nothing", "[tls_records]") {
    listener back;
    tampering_relay relay(back.ep);
    auto server = std::async(std::launch::async, [&] {
        auto s = std::make_unique<tls::tls_stream>(back.accept(), test::loopback_credentials(),
                                                   tls::tls_stream::role::server);
        tls::authenticate_client(*s, {}, net::after(io_bound));
        return s;
    });
    auto client = tls::connect(relay.front.ep, test::loopback_credentials(), io_bound);
    auto srv = server.get();

    const auto first = test::byte_pattern(1000, 4);
    net::write_full(*client, first, net::after(io_bound), "send");
    std::vector<std::byte> in(first.size());
    REQUIRE(net::read_full(*srv, in, net::after(io_bound), "receive"));
    CHECK(in == first);

    // One bit of the next record's ciphertext, past its 5-byte header: the
    // reader throws before it reports a single byte.
    relay.flip_at = relay.forwarded.load() + 100;
    const auto second = test::byte_pattern(1000, 5);
    net::write_full(*client, second, net::after(io_bound), "send");
    std::vector<std::byte> got(second.size());
    auto first_read = [&] {
        for (;;) {
            REQUIRE(net::wait_readable(srv->fd(), net::after(io_bound)));
            const ssize_t n = srv->read_some(got.data(), got.size());
            if (n >= 0)
                return n;
        }
    };
    CHECK_THROWS_WITH(first_read(), Catch::Matchers::Contains("failed authentication"));
}
