#include "sys/stream.hpp"

#include "core/error.hpp"

#include <fmt/format.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>

namespace ferry::net {

namespace {

int poll_timeout_ms(deadline until) {
    if (until == no_deadline)
        return -1;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    return left.count() < 0 ? 0 : int(std::min<int64_t>(left.count() + 1, 1 << 30));
}

const std::string no_identity;

// A system call's result as a stream reports it: bytes, or -1 when it would
// block; interrupted calls are repeated, anything else throws.
template <typename Call>
ssize_t io_result(Call call, const char* what) {
    for (;;) {
        const ssize_t n = call();
        if (n >= 0)
            return n;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN)
            return -1;
        throw sys_error(what);
    }
}

} // namespace

const std::string& stream::peer_identity() const noexcept {
    return no_identity;
}

bool wait_fd(int fd, short events, deadline until) {
    for (;;) {
        pollfd p{fd, events, 0};
        int r = ::poll(&p, 1, poll_timeout_ms(until));
        if (r > 0)
            return true;
        if (r == 0)
            return false;
        if (errno != EINTR)
            throw sys_error("poll");
    }
}

ssize_t socket_stream::read_some(std::byte* dst, size_t len) {
    return io_result([&] { return ::read(_fd, dst, len); }, "read");
}

ssize_t socket_stream::write_some(const iovec* iov, int iovcnt) {
    return io_result(
        [&] {
            msghdr msg{};
            msg.msg_iov = const_cast<iovec*>(iov);
            msg.msg_iovlen = size_t(iovcnt);
            const ssize_t n = ::sendmsg(_fd, &msg, MSG_NOSIGNAL);
            return n < 0 && errno == ENOTSOCK ? ::writev(_fd, iov, iovcnt) : n; // a pipe
        },
        "write");
}

bool read_full(stream& s, std::span<std::byte> buf, deadline until, const char* what) {
    size_t done = 0;
    while (done < buf.size()) {
        // With a deadline, never block in read(): the fd may be blocking.
        if (until != no_deadline && !s.never_blocks() && !s.buffered() &&
            !wait_fd(s.fd(), POLLIN, until))
            throw sys_error(what, ETIMEDOUT);
        ssize_t n;
        try {
            n = s.read_some(buf.data() + done, buf.size() - done);
        } catch (const std::system_error& e) {
            throw sys_error(what, e.code().value());
        } catch (const std::exception& e) {
            throw error(fmt::format("{}: {}", what, e.what()));
        }
        if (n > 0) {
            done += size_t(n);
            continue;
        }
        if (n == 0) {
            if (done == 0)
                return false;
            throw error(fmt::format("{}: connection closed mid-message", what));
        }
        if (!wait_fd(s.fd(), POLLIN, until))
            throw sys_error(what, ETIMEDOUT);
    }
    return true;
}

void write_full(stream& s, std::span<const std::byte> buf, deadline until, const char* what) {
    iovec iov{const_cast<std::byte*>(buf.data()), buf.size()};
    writev_full(s, &iov, 1, until, what);
}

void writev_full(stream& s, iovec* iov, int iovcnt, deadline until, const char* what) {
    while (iovcnt > 0 && iov->iov_len == 0) {
        iov++;
        iovcnt--;
    }
    while (iovcnt > 0) {
        ssize_t n;
        try {
            n = s.write_some(iov, iovcnt);
        } catch (const std::system_error& e) {
            throw sys_error(what, e.code().value());
        } catch (const std::exception& e) {
            throw error(fmt::format("{}: {}", what, e.what()));
        }
        if (n < 0) {
            if (!wait_fd(s.fd(), POLLOUT, until))
                throw sys_error(what, ETIMEDOUT);
            continue;
        }
        size_t left = size_t(n);
        while (iovcnt > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            iovcnt--;
        }
        if (iovcnt > 0) {
            iov->iov_base = static_cast<char*>(iov->iov_base) + left;
            iov->iov_len -= left;
        }
    }
}

} // namespace ferry::net
