#include "sys/net.hpp"

#include "core/error.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <charconv>
#include <cstring>

namespace ferry::net {

std::string endpoint::to_string() const {
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof ip);
    return fmt::format("{}:{}", ip, ntohs(addr.sin_port));
}

endpoint parse_endpoint(const std::string& text) {
    auto colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
        throw error(fmt::format("'{}' is not an IP:PORT address", text));
    endpoint ep;
    ep.addr.sin_family = AF_INET;
    const std::string host = text.substr(0, colon);
    if (inet_pton(AF_INET, host.c_str(), &ep.addr.sin_addr) != 1)
        throw error(fmt::format("'{}' is not an IPv4 address", host));
    unsigned port = 0;
    const char* first = text.data() + colon + 1;
    const char* last = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(first, last, port);
    if (ec != std::errc() || ptr != last || port == 0 || port > 65535)
        throw error(fmt::format("'{}' is not a valid port", text.substr(colon + 1)));
    ep.addr.sin_port = htons(uint16_t(port));
    return ep;
}

unique_fd tcp_listen(const endpoint& ep, int backlog) {
    unique_fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd)
        throw sys_error("socket");
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&ep.addr), sizeof ep.addr))
        throw sys_error("bind " + ep.to_string());
    if (::listen(fd.get(), backlog))
        throw sys_error("listen " + ep.to_string());
    return fd;
}

unique_fd tcp_connect(const endpoint& ep, std::chrono::milliseconds timeout) {
    unique_fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd)
        throw sys_error("socket");
    const std::string what = "connect to " + ep.to_string();
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&ep.addr), sizeof ep.addr) != 0) {
        if (errno != EINPROGRESS)
            throw sys_error(what);
        if (!wait_fd(fd.get(), POLLOUT, after(timeout)))
            throw sys_error(what, ETIMEDOUT);
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        if (err)
            throw sys_error(what, err);
    }
    set_nonblocking(fd.get(), false);
    set_nodelay(fd.get());
    return fd;
}

namespace {
endpoint socket_name(int fd, int (*name)(int, sockaddr*, socklen_t*), const char* what) {
    endpoint ep;
    socklen_t len = sizeof ep.addr;
    if (name(fd, reinterpret_cast<sockaddr*>(&ep.addr), &len))
        throw sys_error(what);
    return ep;
}
} // namespace

endpoint local_endpoint(int fd) {
    return socket_name(fd, ::getsockname, "getsockname");
}

endpoint peer_endpoint(int fd) {
    return socket_name(fd, ::getpeername, "getpeername");
}

uint16_t pick_free_loopback_port() {
    endpoint ep = parse_endpoint("127.0.0.1:1");
    ep.addr.sin_port = 0;
    unique_fd fd = tcp_listen(ep, 1);
    return ntohs(local_endpoint(fd.get()).addr.sin_port);
}

void set_nodelay(int fd) {
    int one = 1;
    if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one))
        throw sys_error("setsockopt TCP_NODELAY");
}

bool fail_when_peer_silent(int fd, std::chrono::milliseconds silence) noexcept {
    // Probes start after a third of it, then go every second until it is up.
    const int total_s = int(std::max<int64_t>(3, (silence.count() + 999) / 1000));
    const int idle_s = std::max(1, total_s / 3);
    const int probes = std::max(1, total_s - idle_s);
    const int one = 1, interval_s = 1;
    const unsigned user_timeout_ms = unsigned(int64_t(total_s) * 1000);
    return ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one) == 0 &&
           ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s) == 0 &&
           ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof interval_s) == 0 &&
           ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes) == 0 &&
           ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms,
                        sizeof user_timeout_ms) == 0;
}

void set_nonblocking(int fd, bool on) {
    int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, on ? flags | O_NONBLOCK : flags & ~O_NONBLOCK) < 0)
        throw sys_error("fcntl O_NONBLOCK");
}

bool wait_readable(int fd, deadline until) {
    return wait_fd(fd, POLLIN, until);
}

bool read_full(int fd, std::span<std::byte> buf, deadline until, const char* what) {
    auto s = socket_stream::view(fd);
    return read_full(s, buf, until, what);
}

void write_full(int fd, std::span<const std::byte> buf, deadline until, const char* what) {
    auto s = socket_stream::view(fd);
    write_full(s, buf, until, what);
}

void writev_full(int fd, iovec* iov, int iovcnt, deadline until, const char* what) {
    auto s = socket_stream::view(fd);
    writev_full(s, iov, iovcnt, until, what);
}

namespace {

// One byte of payload and room for one descriptor: what SCM_RIGHTS travels in.
struct fd_message {
    char byte = 0;
    iovec iov{&byte, 1};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    fd_message() {
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control;
        msg.msg_controllen = sizeof control;
    }
    fd_message(const fd_message&) = delete;
    fd_message& operator=(const fd_message&) = delete;
};

} // namespace

void send_fd(int sock, int fd_to_send) {
    fd_message m;
    msghdr& msg = m.msg;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd_to_send, sizeof(int));
    if (::sendmsg(sock, &msg, MSG_NOSIGNAL) != 1)
        throw sys_error("sendmsg SCM_RIGHTS");
}

unique_fd recv_fd(int sock) {
    fd_message m;
    msghdr& msg = m.msg;
    ssize_t n;
    do
        n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        throw sys_error("recvmsg SCM_RIGHTS");
    if (n == 0)
        throw error("recvmsg SCM_RIGHTS: peer closed the socket");
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
        c->cmsg_len != CMSG_LEN(sizeof(int)))
        throw error("recvmsg SCM_RIGHTS: no file descriptor in the message");
    int fd;
    std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return unique_fd(fd);
}

} // namespace ferry::net
