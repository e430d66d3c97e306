#include "sys/receipt_time.hpp"

#include "core/clock.hpp"

#include <linux/errqueue.h>
#include <linux/net_tstamp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#include <cerrno>
#include <cstring>

namespace ferry::net {

namespace {

uint64_t ns_of(const timespec& t) noexcept {
    return uint64_t(t.tv_sec) * 1'000'000'000ull + uint64_t(t.tv_nsec);
}

// The kernel stamps with CLOCK_REALTIME; the offset to CLOCK_MONOTONIC is
// read now, as close together as two clock reads get.
uint64_t realtime_to_monotonic(uint64_t realtime_ns) noexcept {
    timespec real;
    ::clock_gettime(CLOCK_REALTIME, &real);
    const uint64_t mono = monotonic_ns();
    const uint64_t real_now = ns_of(real);
    if (real_now < realtime_ns || real_now - realtime_ns > mono)
        return 0; // a clock step in between: no answer rather than a wrong one
    return mono - (real_now - realtime_ns);
}

} // namespace

bool time_receipts(int fd) noexcept {
    const int flags = SOF_TIMESTAMPING_RX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE;
    return ::setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPING, &flags, sizeof flags) == 0;
}

ssize_t recv_timed(int fd, void* buf, size_t len, uint64_t& receipt_ns) noexcept {
    iovec iov{buf, len};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(scm_timestamping))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n;
    do
        n = ::recvmsg(fd, &msg, 0);
    while (n < 0 && errno == EINTR);
    if (n <= 0)
        return n;
    // Bytes with no stamp say nothing of when they came: no older stamp may
    // stand for them (it would make their moment too early).
    receipt_ns = 0;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_TIMESTAMPING)
            continue;
        scm_timestamping stamps;
        std::memcpy(&stamps, CMSG_DATA(c), sizeof stamps);
        if (const uint64_t at = ns_of(stamps.ts[0]); at != 0)
            if (const uint64_t mono = realtime_to_monotonic(at); mono != 0)
                receipt_ns = mono;
    }
    return n;
}

} // namespace ferry::net
