#include "sys/write_tracker.hpp"

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
#include <sstream>
#include <string>

namespace ferry::proc {

namespace {

// Kernel ABI absent from Debian 12's headers (6.7's uapi).
constexpr uint64_t uffd_user_mode_only = 1; // UFFD_USER_MODE_ONLY, 5.11
constexpr uint64_t uffd_feature_wp_unpopulated = 1u << 13;
constexpr uint64_t uffd_feature_wp_async = 1u << 15;
constexpr uint64_t pm_scan_wp_matching = 1u << 0;
constexpr uint64_t pm_scan_check_wpasync = 1u << 1;
constexpr uint64_t page_is_written = 1u << 1;
// _IOWR('f', 16, struct pm_scan_arg)
constexpr unsigned long pagemap_scan = (3ul << 30) | (96ul << 16) | ('f' << 8) | 16;
constexpr size_t regions_per_call = 1024;
// As page_presence: one call's walk has no preemption point on this
// PREEMPT_NONE kernel; 16 MiB is ~50 us.
constexpr uint64_t bytes_per_call = 16ull << 20;

// The writable private anonymous areas: where a process's own data is.
std::vector<page_run> private_anonymous_areas(pid_t pid) {
    std::ifstream maps(fmt::format("/proc/{}/maps", pid));
    if (!maps)
        throw error(fmt::format("no process {}", pid));
    std::vector<page_run> out;
    std::string line;
    while (std::getline(maps, line)) {
        std::istringstream in(line);
        uint64_t start = 0, end = 0;
        char dash = 0;
        std::string perms, offset, dev, inode, path;
        in >> std::hex >> start >> dash >> end >> perms >> offset >> dev >> inode;
        std::getline(in >> std::ws, path);
        if (perms != "rw-p" || inode != "0")
            continue;
        if (!path.empty() && path != "[heap]" && path != "[stack]")
            continue;
        out.push_back({start, end});
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
    : _pid(pid), _regions(regions_per_call) {
    _pagemap.reset(::open(fmt::format("/proc/{}/pagemap", pid).c_str(), O_RDONLY | O_CLOEXEC));
    if (!_pagemap)
        throw sys_error(fmt::format("open /proc/{}/pagemap", pid));
    _uffd = uffd_of(pid, bound);
    uffdio_api api{};
    api.api = UFFD_API;
    api.features = uffd_feature_wp_async | uffd_feature_wp_unpopulated;
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
    for (const page_run& area : _tracked)
        for (uint64_t at = area.start; at < area.end; at += bytes_per_call) {
            uffdio_range range{at, std::min(area.end, at + bytes_per_call) - at};
            if (::ioctl(_uffd.get(), UFFDIO_UNREGISTER, &range) != 0)
                break; // unmapped meanwhile, or the process is gone: closing does the rest
        }
}

void write_tracker::written(uint64_t start, uint64_t end, std::vector<page_run>& out) {
    using namespace pagemap_abi;
    while (start < end) {
        pm_scan_arg arg{};
        arg.size = sizeof arg;
        arg.flags = pm_scan_wp_matching | pm_scan_check_wpasync;
        arg.start = start;
        arg.end = std::min(end, start + bytes_per_call);
        arg.vec = reinterpret_cast<uint64_t>(_regions.data());
        arg.vec_len = _regions.size();
        arg.category_mask = page_is_written;
        arg.return_mask = page_is_written;
        const int n = ::ioctl(_pagemap.get(), pagemap_scan, &arg);
        if (n < 0)
            throw sys_error(fmt::format("PAGEMAP_SCAN of written pages, pid {} [{:#x}, {:#x})",
                                        _pid, start, arg.end));
        for (int i = 0; i < n; i++) {
            const auto& r = _regions[size_t(i)];
            if (!out.empty() && out.back().end == r.start)
                out.back().end = r.end;
            else
                out.push_back({r.start, r.end});
        }
        // A full vector stops the walk early: go on from where it stopped.
        start = arg.walk_end > start ? arg.walk_end : arg.end;
    }
}

} // namespace ferry::proc
