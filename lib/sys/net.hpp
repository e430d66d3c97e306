// Sockets: TCP endpoints, connect with a deadline, and whole-buffer I/O.
#pragma once

#include "core/unique_fd.hpp"
#include "sys/stream.hpp"

#include <netinet/in.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace ferry::net {

struct endpoint {
    sockaddr_in addr{};
    [[nodiscard]] std::string to_string() const;
};

// Parses "A.B.C.D:PORT"; throws ferry::error on malformed input.
endpoint parse_endpoint(const std::string& text);

unique_fd tcp_listen(const endpoint& ep, int backlog = 64);
// Connects within `timeout`; the error names the peer and the cause.
unique_fd tcp_connect(const endpoint& ep, std::chrono::milliseconds timeout);
endpoint local_endpoint(int fd);
endpoint peer_endpoint(int fd);
// A TCP port on 127.0.0.1 that was free a moment ago.
uint16_t pick_free_loopback_port();
void set_nodelay(int fd);
// A peer whose host stops answering (down, or the network to it) fails the
// connection after about `silence` (ETIMEDOUT), whether this end is idle
// (keepalive probes) or has data unacknowledged (TCP_USER_TIMEOUT). A peer
// that is alive but slow keeps it: its kernel answers the probes. False if
// the socket refused an option (it is then left as it was, or partly set).
[[nodiscard]] bool fail_when_peer_silent(int fd, std::chrono::milliseconds silence) noexcept;
void set_nonblocking(int fd, bool on);

// Whole-buffer I/O on a blocking or non-blocking fd (stream.hpp's, on a view).
bool read_full(int fd, std::span<std::byte> buf, deadline until, const char* what);
void write_full(int fd, std::span<const std::byte> buf, deadline until, const char* what);
void writev_full(int fd, struct iovec* iov, int iovcnt, deadline until, const char* what);

// Waits until fd is readable; false when the deadline passed.
bool wait_readable(int fd, deadline until);

// SCM_RIGHTS helpers for unix sockets.
void send_fd(int sock, int fd_to_send);
unique_fd recv_fd(int sock);

} // namespace ferry::net
