// Which pages of a running process were written since the last look: what a
// pre-copy needs to send again, on a kernel without soft-dirty (this one's:
// pagemap bit 55 stays 0 after clear_refs 4).
//
// A userfaultfd in asynchronous write-protect mode (UFFD_FEATURE_WP_ASYNC,
// Linux 6.7+) does it: a write to a protected page unprotects it in the
// kernel, with no message and no wait, and PAGEMAP_SCAN reports the pages
// written and protects them again in one call (~1 ms per GiB here). The
// uffd must be made inside the process (it watches its maker's memory):
// one injected userfaultfd() (remote_syscall), taken with pidfd_getfd, and
// the process's own copy closed, so that its fd table is as it was (CRIU
// would refuse to dump a uffd it finds there). Everything else, the
// registration and the scans, is done from here.
//
// Pages that come into being after the attach (first touched, or dropped
// and touched again) show as written.
// Tracked: the writable private anonymous areas present at attach
// (heap, stack, anonymous mmaps) that no other uffd watches and that are
// not MAP_NORESERVE reservations over 64 GiB. Areas mapped later are not: a caller
// treats their pages as written. A page dropped
// with MADV_DONTNEED is a hole afterwards, not "written": a caller that sent
// it must see it gone (proc::page_presence).
#pragma once

#include "core/unique_fd.hpp"
#include "sys/page_presence.hpp"

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <vector>

namespace ferry::proc {

class write_tracker {
  public:
    // Starts tracking `pid`: every page of its tracked areas counts as
    // unwritten from here on. Throws with the reason if it cannot (no
    // WP_ASYNC in this kernel, the process traced by another, stopped, or
    // not stopping within `bound`).
    write_tracker(pid_t pid, std::chrono::milliseconds bound);
    // Unregisters in slices, then closes the uffd: the process runs on as
    // before. (Closing alone unprotects every tracked page under the
    // process's mmap lock in one go: a Redis of 1.2 GiB stalled 22 ms.)
    ~write_tracker();
    write_tracker(const write_tracker&) = delete;
    write_tracker& operator=(const write_tracker&) = delete;

    [[nodiscard]] const std::vector<page_run>& tracked() const noexcept { return _tracked; }

    // Appends to `out` the runs of [start, end) written since the last call
    // (or the attach), and protects them again. The range must lie inside
    // tracked areas.
    void written(uint64_t start, uint64_t end, std::vector<page_run>& out);

  private:
    pid_t _pid;
    unique_fd _uffd;
    unique_fd _pagemap;
    std::vector<page_run> _tracked;
    std::vector<pagemap_abi::page_region> _regions; // the scan's output
};

} // namespace ferry::proc
