// A TCP listener on a free loopback port, for unit tests that connect to
// themselves.
#pragma once

#include "core/unique_fd.hpp"
#include "sys/net.hpp"
#include "sys/stream.hpp"

#include <catch2/catch.hpp>
#include <sys/socket.h>

#include <chrono>

namespace ferry::test {

struct loopback_listener {
    unique_fd fd;
    net::endpoint ep;
    loopback_listener() {
        auto any = net::parse_endpoint("127.0.0.1:1");
        any.addr.sin_port = 0;
        fd = net::tcp_listen(any, 4);
        ep = net::local_endpoint(fd.get());
    }
    // The next connection, within `timeout`.
    unique_fd accept(std::chrono::milliseconds timeout = std::chrono::seconds(10)) const {
        REQUIRE(net::wait_readable(fd.get(), net::after(timeout)));
        unique_fd c(::accept4(fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
        REQUIRE(c);
        return c;
    }
};

} // namespace ferry::test
