#include "wire/control.hpp"

#include <catch2/catch.hpp>

#include <sys/socket.h>

#include <cstring>
#include <thread>

using namespace ferry;

namespace {

std::vector<std::byte> register_frame() {
    FerryControl__OutgoingRegister r = FERRY_CONTROL__OUTGOING_REGISTER__INIT;
    r.migration_id = const_cast<char*>("0123456789abcdef0123456789abcdef");
    r.images_dir = const_cast<char*>("/tmp/x");
    r.root_pid = 42;
    r.criu_page_server_port = 12345;
    return control::encode_frame(control::wrap(r));
}

struct socket_pair {
    unique_fd a, b;
    socket_pair() {
        int sv[2];
        REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
        a.reset(sv[0]);
        b.reset(sv[1]);
    }
};

} // namespace

TEST_CASE("control frames round-trip over a socket", "[control]") {
    socket_pair s;
    auto frame = register_frame();
    net::write_full(s.a.get(), frame, net::no_deadline, "test");
    auto e = control::receive(s.b.get(), net::after(std::chrono::seconds(5)));
    REQUIRE(e);
    REQUIRE(e->body_case == FERRY_CONTROL__ENVELOPE__BODY_OUTGOING_REGISTER);
    REQUIRE(std::string(e->outgoing_register->images_dir) == "/tmp/x");
    REQUIRE(e->outgoing_register->root_pid == 42);
    REQUIRE(e->outgoing_register->criu_page_server_port == 12345);
    s.a.reset();
    REQUIRE(control::receive(s.b.get(), net::after(std::chrono::seconds(5))) ==
            nullptr); // clean EOF
}

TEST_CASE("control frame headers are checked", "[control]") {
    auto frame = register_frame();
    uint32_t len = 0;
    std::span<const std::byte, control::frame_header_size> h(frame.data(),
                                                             control::frame_header_size);
    REQUIRE(control::decode_frame_header(h, len) == control::frame_error::none);
    REQUIRE(len == frame.size() - control::frame_header_size);

    auto bad = frame;
    bad[0] = std::byte{0};
    REQUIRE(control::decode_frame_header(std::span<const std::byte, 12>(bad.data(), 12), len) ==
            control::frame_error::bad_magic);
    bad = frame;
    bad[4] = std::byte{7};
    REQUIRE(control::decode_frame_header(std::span<const std::byte, 12>(bad.data(), 12), len) ==
            control::frame_error::bad_version);
    bad = frame;
    bad[6] = std::byte{1};
    REQUIRE(control::decode_frame_header(std::span<const std::byte, 12>(bad.data(), 12), len) ==
            control::frame_error::bad_reserved);
    bad = frame;
    bad[11] = std::byte{0x7f}; // 2 GiB payload
    REQUIRE(control::decode_frame_header(std::span<const std::byte, 12>(bad.data(), 12), len) ==
            control::frame_error::too_large);
}

TEST_CASE("malformed control frames raise clear errors", "[control]") {
    SECTION("garbage payload") {
        socket_pair s;
        auto frame = register_frame();
        for (size_t i = control::frame_header_size; i < frame.size(); i++)
            frame[i] = std::byte{0xff};
        net::write_full(s.a.get(), frame, net::no_deadline, "test");
        REQUIRE_THROWS_WITH(control::receive(s.b.get(), net::after(std::chrono::seconds(5))),
                            Catch::Contains("not a valid message"));
    }
    SECTION("truncated payload") {
        socket_pair s;
        auto frame = register_frame();
        frame.resize(frame.size() - 5);
        net::write_full(s.a.get(), frame, net::no_deadline, "test");
        s.a.reset();
        REQUIRE_THROWS_WITH(control::receive(s.b.get(), net::after(std::chrono::seconds(5))),
                            Catch::Contains("closed mid-message"));
    }
    SECTION("bad magic") {
        socket_pair s;
        auto frame = register_frame();
        frame[1] = std::byte{0};
        net::write_full(s.a.get(), frame, net::no_deadline, "test");
        REQUIRE_THROWS_WITH(control::receive(s.b.get(), net::after(std::chrono::seconds(5))),
                            Catch::Contains("bad frame magic"));
    }
    SECTION("an envelope without a body") {
        control::envelope empty = FERRY_CONTROL__ENVELOPE__INIT;
        socket_pair s;
        net::write_full(s.a.get(), control::encode_frame(empty), net::no_deadline, "test");
        REQUIRE_THROWS(control::receive(s.b.get(), net::after(std::chrono::seconds(5))));
    }
    SECTION("a silent peer hits the deadline") {
        socket_pair s;
        REQUIRE_THROWS(control::receive(s.b.get(), net::after(std::chrono::milliseconds(50))));
    }
}

TEST_CASE("expect names what arrived", "[control]") {
    FerryControl__ErrorReply err = FERRY_CONTROL__ERROR_REPLY__INIT;
    err.message = const_cast<char*>("no space left");
    auto e = control::wrap(err);
    REQUIRE_THROWS_WITH(control::expect(&e, FERRY_CONTROL__ENVELOPE__BODY_PREPARE_OK, "peer"),
                        "peer: no space left");
    FerryControl__LazyReady ready = FERRY_CONTROL__LAZY_READY__INIT;
    auto r = control::wrap(ready);
    REQUIRE_THROWS_WITH(control::expect(&r, FERRY_CONTROL__ENVELOPE__BODY_PREPARE_OK, "peer"),
                        Catch::Contains("lazy_ready") && Catch::Contains("prepare_ok"));
    REQUIRE_THROWS_WITH(control::expect(nullptr, FERRY_CONTROL__ENVELOPE__BODY_PREPARE_OK, "peer"),
                        Catch::Contains("closed"));
}

// The heartbeat is negotiated: a migrator that promises nothing (an older
// one) leaves the field unset, and the daemon then bounds nothing.
TEST_CASE("the migrator's heartbeat promise and its beats cross the wire", "[control]") {
    socket_pair s;
    FerryControl__OutgoingPrepare old_prep = FERRY_CONTROL__OUTGOING_PREPARE__INIT;
    old_prep.migration_id = const_cast<char*>("0123456789abcdef0123456789abcdef");
    old_prep.root_pid = 42;
    old_prep.fabric = const_cast<char*>("tcp");
    FerryControl__OutgoingPrepare prep = old_prep;
    prep.has_heartbeat_silence_ms = true;
    prep.heartbeat_silence_ms = 60000;
    prep.has_deadline_scale = true;
    prep.deadline_scale = 2.5;
    FerryControl__MigratorAlive alive = FERRY_CONTROL__MIGRATOR_ALIVE__INIT;
    alive.step = const_cast<char*>("CRIU's dump");
    const auto deadline = net::after(std::chrono::seconds(5));
    control::send_message(s.a.get(), old_prep, deadline);
    control::send_message(s.a.get(), prep, deadline);
    control::send_message(s.a.get(), alive, deadline);

    auto e = control::receive(s.b.get(), deadline);
    control::expect(e.get(), FERRY_CONTROL__ENVELOPE__BODY_OUTGOING_PREPARE, "migrator");
    REQUIRE_FALSE(e->outgoing_prepare->has_heartbeat_silence_ms);
    e = control::receive(s.b.get(), deadline);
    control::expect(e.get(), FERRY_CONTROL__ENVELOPE__BODY_OUTGOING_PREPARE, "migrator");
    REQUIRE(e->outgoing_prepare->has_heartbeat_silence_ms);
    REQUIRE(e->outgoing_prepare->heartbeat_silence_ms == 60000);
    REQUIRE(e->outgoing_prepare->deadline_scale == 2.5);
    e = control::receive(s.b.get(), deadline);
    REQUIRE(e);
    REQUIRE(std::string(control::body_name(*e)) == "migrator_alive");
    REQUIRE(std::string(e->migrator_alive->step) == "CRIU's dump");
}
