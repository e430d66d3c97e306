// Thin userfaultfd ioctl wrappers. Each returns an outcome value; the errno
// policy lives in one place, classify_uffd_error().
#pragma once

#include <linux/userfaultfd.h>

#include <cstddef>
#include <cstdint>

namespace ferry::uffd {

enum class outcome : uint8_t {
    done,        // the operation completed
    exists,      // EEXIST: some page was already present
    retry,       // EAGAIN: the address space is changing; handle events, then retry
    target_gone, // ESRCH/ENOSPC (or ENOMEM on unregister): the process has exited
    unmapped,    // ENOENT: no area registered with this uffd holds the page now
    fatal,       // anything else
};

[[nodiscard]] outcome classify_uffd_error(int err) noexcept;
[[nodiscard]] const char* to_string(outcome o) noexcept;

struct copy_result {
    outcome result;
    uint64_t bytes; // bytes installed before the outcome (all of them when done)
    int err;        // errno when not done
};

// UFFDIO_COPY with mode 0, which wakes the faulting threads. A range that
// crosses a VMA boundary the caller does not know of is copied page by page;
// `unmapped` then names a page with no registered area, `bytes` after the
// ones before it.
[[nodiscard]] copy_result copy(int fd, uint64_t dst, const void* src, uint64_t len) noexcept;
[[nodiscard]] copy_result zeropage(int fd, uint64_t dst, uint64_t len) noexcept;
[[nodiscard]] copy_result unregister_range(int fd, uint64_t start, uint64_t len) noexcept;
// Wakes threads blocked on faults in the range, so they retry the access.
[[nodiscard]] copy_result wake(int fd, uint64_t start, uint64_t len) noexcept;

// Reads up to n events. Returns the count, 0 when none are pending, or -1
// with errno set on error.
[[nodiscard]] long read_events(int fd, uffd_msg* msgs, size_t n) noexcept;

} // namespace ferry::uffd
