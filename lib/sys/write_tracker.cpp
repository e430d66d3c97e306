#include "sys/write_tracker.hpp"

#include "core/clock.hpp"
#include "core/error.hpp"
#include "sys/remote_syscall.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace ferry::proc {

namespace {

// Kernel ABI absent from Debian 12's headers (6.7's uapi).
constexpr uint64_t uffd_user_mode_only = 1; // UFFD_USER_MODE_ONLY, 5.11
constexpr uint64_t uffd_feature_wp_async = 1u << 15;
// One call's page-table walk has no preemption point on this PREEMPT_NONE
// kernel, and holds the process's mmap lock: ~3 ms per populated GiB. A
// slice starts at 16 MiB (~50 us populated) and doubles while calls stay
// short, so that a sparse area (a runtime's reserved heap; ASan's shadow,
// terabytes) is crossed in few calls, and halves when one takes long.
constexpr uint64_t first_slice = 16ull << 20;
constexpr uint64_t largest_slice = 1ull << 40;
constexpr uint64_t short_call_ns = 100'000;

class slicer {
  public:
    // The end of the next slice from `at`, at most `end`.
    [[nodiscard]] uint64_t next(uint64_t at, uint64_t end) const {
        return end - at > _bytes ? at + _bytes : end;
    }
    // After a call that took `ns`.
    void took(uint64_t ns) {
        if (ns < short_call_ns)
            _bytes = std::min(largest_slice, _bytes * 2);
        else if (ns > 4 * short_call_ns)
            _bytes = std::max(first_slice, _bytes / 2);
    }

  private:
    uint64_t _bytes = first_slice;
};

// The writable private anonymous areas: where a process's own data is.
// Not a MAP_NORESERVE area (VmFlags "nr") larger than 64 GiB: address space
// reserved rather than memory, as ASan's 20 TiB shadow, whose protection
// took minutes of kernel time and 24 GB of page tables (the OOM killer
// ended the process). Below the bound, page tables cost at most 128 MiB.
// (jemalloc maps Redis's heap MAP_NORESERVE too, in extents far below it.)
// A caller treats their pages as written.
std::vector<page_run> private_anonymous_areas(pid_t pid) {
    std::ifstream smaps(fmt::format("/proc/{}/smaps", pid));
    if (!smaps)
        throw error(fmt::format("no process {}", pid));
    std::vector<page_run> out;
    std::optional<page_run> candidate;
    std::string line;
    while (std::getline(smaps, line)) {
        if (line.rfind("VmFlags:", 0) == 0) {
            const bool reservation = (line + " ").find(" nr ") != std::string::npos && candidate &&
                                     candidate->end - candidate->start > (64ull << 30);
            if (candidate && !reservation)
                out.push_back(*candidate);
            candidate.reset();
            continue;
        }
        // An area's first line: "start-end perms offset dev inode [path]";
        // the others are "Key: value".
        const auto colon = line.find(':');
        const auto dash = line.find('-');
        if (dash == std::string::npos || (colon != std::string::npos && colon < dash))
            continue;
        std::istringstream in(line);
        uint64_t start = 0, end = 0;
        char sep = 0;
        std::string perms, offset, dev, inode, path;
        in >> std::hex >> start >> sep >> end >> perms >> offset >> dev >> inode;
        std::getline(in >> std::ws, path);
        candidate.reset();
        if (perms != "rw-p" || inode != "0")
            continue;
        if (!path.empty() && path != "[heap]" && path != "[stack]")
            continue;
        candidate = page_run{start, end};
    }
    return out;
}

// A uffd watching `pid`'s memory: made by `pid` itself, the copy it holds
// closed again.
unique_fd uffd_of(pid_t pid, std::chrono::milliseconds bound) {
    // User-mode faults only: what a process without CAP_SYS_PTRACE may
    // ask for (vm.unprivileged_userfaultfd is 0), as a container's is.
    // Asynchronous write-protect faults never reach the uffd anyway: the
    // kernel resolves them, a kernel-mode write (read() into the page)
    // included, and the page shows as written.
    const long made =
        remote_syscall(pid, SYS_userfaultfd, {O_CLOEXEC | O_NONBLOCK | uffd_user_mode_only}, bound);
    if (made < 0)
        throw sys_error(fmt::format("userfaultfd() in process {}", pid), int(-made));
    const unique_fd pidfd(int(::syscall(SYS_pidfd_open, pid, 0)));
    const int err = pidfd ? 0 : errno;
    unique_fd ours(pidfd ? int(::syscall(SYS_pidfd_getfd, pidfd.get(), int(made), 0)) : -1);
    const int getfd_err = ours ? 0 : errno;
    const long closed = remote_syscall(pid, SYS_close, {uint64_t(made)}, bound);
    if (!pidfd)
        throw sys_error(fmt::format("pidfd_open {}", pid), err);
    if (!ours)
        throw sys_error(fmt::format("pidfd_getfd {} fd {}", pid, made), getfd_err);
    if (closed < 0)
        throw sys_error(fmt::format("close() of fd {} in process {}", made, pid), int(-closed));
    return ours;
}

} // namespace

write_tracker::write_tracker(pid_t pid, std::chrono::milliseconds bound)
    : _pid(pid), _regions(pagemap_abi::regions_per_call) {
    _pagemap.reset(::open(fmt::format("/proc/{}/pagemap", pid).c_str(), O_RDONLY | O_CLOEXEC));
    if (!_pagemap)
        throw sys_error(fmt::format("open /proc/{}/pagemap", pid));
    _uffd = uffd_of(pid, bound);
    uffdio_api api{};
    api.api = UFFD_API;
    // Not WP_UNPOPULATED: it would mark every absent page, page tables and
    // all. Without it a page that comes into being later has no mark and
    // shows as written, which is what a pre-copy needs anyway.
    api.features = uffd_feature_wp_async;
    if (::ioctl(_uffd.get(), UFFDIO_API, &api) != 0)
        throw sys_error("UFFDIO_API with WP_ASYNC (Linux 6.7+)");
    for (const page_run& area : private_anonymous_areas(pid)) {
        uffdio_register reg{};
        reg.range.start = area.start;
        reg.range.len = area.end - area.start;
        reg.mode = UFFDIO_REGISTER_MODE_WP;
        if (::ioctl(_uffd.get(), UFFDIO_REGISTER, &reg) == 0) {
            _tracked.push_back(area);
            continue;
        }
        // EBUSY: the process's own uffd watches it; EINVAL: unmapped or
        // changed since maps was read. Either way: not tracked.
        if (errno != EBUSY && errno != EINVAL && errno != ENOMEM)
            throw sys_error(
                fmt::format("UFFDIO_REGISTER pid {} [{:#x}, {:#x})", pid, area.start, area.end));
    }
    // Protect every page: from here on only new writes show.
    std::vector<page_run> ignored;
    for (const page_run& area : _tracked)
        written(area.start, area.end, ignored);
}

write_tracker::~write_tracker() {
    slicer slices;
    for (const page_run& area : _tracked)
        for (uint64_t at = area.start; at < area.end;) {
            const uint64_t to = slices.next(at, area.end);
            uffdio_range range{at, to - at};
            const uint64_t t0 = monotonic_ns();
            if (::ioctl(_uffd.get(), UFFDIO_UNREGISTER, &range) != 0)
                break; // unmapped meanwhile, or the process is gone: closing does the rest
            slices.took(monotonic_ns() - t0);
            at = to;
        }
}

void write_tracker::written(uint64_t start, uint64_t end, std::vector<page_run>& out) {
    using namespace pagemap_abi;
    slicer slices;
    while (start < end) {
        pm_scan_arg arg{};
        arg.size = sizeof arg;
        arg.flags = pm_scan_wp_matching | pm_scan_check_wpasync;
        arg.start = start;
        arg.end = slices.next(start, end);
        arg.vec = reinterpret_cast<uint64_t>(_regions.data());
        arg.vec_len = _regions.size();
        arg.category_mask = page_is_written;
        // Only pages that exist. Without this the kernel's fast path for
        // exactly {WRITTEN, WRITTEN} reports every none PTE of a populated
        // page table as written and puts a uffd-wp marker there, which
        // PAGEMAP_SCAN then counts as swapped: page_presence took never
        // touched pages for pages, and the source's hole scan found 320
        // holes instead of ~22,000 in migrate.sh's sparse region.
        arg.category_anyof_mask = page_is_present | page_is_swapped;
        arg.return_mask = page_is_written;
        const uint64_t t0 = monotonic_ns();
        const int n = ::ioctl(_pagemap.get(), pagemap_scan, &arg);
        if (n < 0)
            throw sys_error(fmt::format("PAGEMAP_SCAN of written pages, pid {} [{:#x}, {:#x})",
                                        _pid, start, arg.end));
        slices.took(monotonic_ns() - t0);
        append_runs(std::span(_regions).first(size_t(n)), out);
        // A full vector stops the walk early: go on from where it stopped.
        start = arg.walk_end > start ? arg.walk_end : arg.end;
    }
}

} // namespace ferry::proc
