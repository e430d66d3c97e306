#include "uffd_ops.hpp"

#include "core/page.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace ferry::uffd {

outcome classify_uffd_error(int err) noexcept {
    switch (err) {
    case EEXIST:
        return outcome::exists;
    case EAGAIN:
        return outcome::retry;
    case ESRCH:  // the mm is gone
    case ENOSPC: // the process is exiting (kernels >= 4.19 say ENOSPC)
        return outcome::target_gone;
    case ENOENT: // no VMA there, or one not registered with this uffd
        return outcome::unmapped;
    default:
        return outcome::fatal;
    }
}

const char* to_string(outcome o) noexcept {
    switch (o) {
    case outcome::done:
        return "done";
    case outcome::exists:
        return "exists";
    case outcome::retry:
        return "retry";
    case outcome::target_gone:
        return "target gone";
    case outcome::unmapped:
        return "unmapped";
    case outcome::fatal:
        return "fatal";
    }
    return "?";
}

namespace {

copy_result copy_once(int fd, uint64_t dst, const void* src, uint64_t len) noexcept {
    uffdio_copy c{};
    c.dst = dst;
    c.src = reinterpret_cast<uint64_t>(src);
    c.len = len;
    c.mode = 0;
    if (::ioctl(fd, UFFDIO_COPY, &c) == 0)
        return {outcome::done, len, 0};
    const int err = errno;
    // c.copy holds the bytes copied before the failure, or a negative errno.
    return {classify_uffd_error(err), c.copy > 0 ? uint64_t(c.copy) : 0, err};
}

} // namespace

copy_result copy(int fd, uint64_t dst, const void* src, uint64_t len) noexcept {
    auto res = copy_once(fd, dst, src, len);
    if (res.result != outcome::unmapped || len - res.bytes <= page_size)
        return res;
    // ENOENT for a range: it may cross a VMA boundary the lazy map does not
    // know of. The application split the area after the restore (mprotect,
    // madvise), which sends no uffd event, and a copy may not span two
    // VMAs. One page at a time, each inside one (the workload's migration
    // was killed for it: migrate.sh with --precopy, 3 runs in 4).
    const auto* from = static_cast<const std::byte*>(src);
    for (uint64_t at = res.bytes; at < len; at += page_size) {
        const auto one = copy_once(fd, dst + at, from + at, page_size);
        if (one.result != outcome::done)
            return {one.result, at, one.err};
    }
    return {outcome::done, len, 0};
}

copy_result zeropage(int fd, uint64_t dst, uint64_t len) noexcept {
    uffdio_zeropage z{};
    z.range.start = dst;
    z.range.len = len;
    z.mode = 0;
    if (::ioctl(fd, UFFDIO_ZEROPAGE, &z) == 0)
        return {outcome::done, len, 0};
    const int err = errno;
    return {classify_uffd_error(err), z.zeropage > 0 ? uint64_t(z.zeropage) : 0, err};
}

copy_result unregister_range(int fd, uint64_t start, uint64_t len) noexcept {
    uffdio_range r{start, len};
    if (::ioctl(fd, UFFDIO_UNREGISTER, &r) == 0)
        return {outcome::done, len, 0};
    const int err = errno;
    // The kernel answers ENOMEM when the process has already gone.
    return {err == ENOMEM ? outcome::target_gone : classify_uffd_error(err), 0, err};
}

copy_result wake(int fd, uint64_t start, uint64_t len) noexcept {
    uffdio_range r{start, len};
    if (::ioctl(fd, UFFDIO_WAKE, &r) == 0)
        return {outcome::done, len, 0};
    const int err = errno;
    return {classify_uffd_error(err), 0, err};
}

long read_events(int fd, uffd_msg* msgs, size_t n) noexcept {
    for (;;) {
        ssize_t r = ::read(fd, msgs, n * sizeof(uffd_msg));
        if (r >= 0)
            return long(size_t(r) / sizeof(uffd_msg));
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN)
            return 0;
        return -1;
    }
}

} // namespace ferry::uffd
