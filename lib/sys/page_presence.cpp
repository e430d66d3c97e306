#include "sys/page_presence.hpp"

#include "core/error.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/ioctl.h>

#include <algorithm>

namespace ferry::proc {

namespace {

// The kernel walks a call's range without a preemption point (this VM's
// kernel is PREEMPT_NONE), ~3 ms per GiB: a 4 GiB range in one call kept a
// CPU from the destination's resume on the same machine. 16 MiB is ~50 us.
constexpr uint64_t bytes_per_call = 16ull << 20;

} // namespace

page_presence::page_presence(pid_t pid)
    : _pid(pid), _fd(::open(fmt::format("/proc/{}/pagemap", pid).c_str(), O_RDONLY | O_CLOEXEC)),
      _regions(pagemap_abi::regions_per_call) {
    if (!_fd)
        throw sys_error(fmt::format("open /proc/{}/pagemap", pid));
}

std::optional<bool> page_presence::existing(uint64_t start, uint64_t end,
                                            std::vector<page_run>& out) {
    using namespace pagemap_abi;
    while (start < end) {
        pm_scan_arg arg{};
        arg.size = sizeof arg;
        arg.start = start;
        arg.end = std::min(end, start + bytes_per_call);
        arg.vec = reinterpret_cast<uint64_t>(_regions.data());
        arg.vec_len = _regions.size();
        // Present or swapped, and not the zero page: a page with data.
        arg.category_inverted = page_is_pfnzero;
        arg.category_mask = page_is_pfnzero;
        arg.category_anyof_mask = page_is_present | page_is_swapped;
        arg.return_mask = page_is_present | page_is_swapped;
        const int n = ::ioctl(_fd.get(), pagemap_scan, &arg);
        if (n < 0) {
            if (errno == ENOTTY || errno == EINVAL)
                return std::nullopt;
            throw sys_error(fmt::format("PAGEMAP_SCAN pid {} [{:#x}, {:#x})", _pid, start, end));
        }
        // Adjacent regions differ only in present/swapped: one run.
        append_runs(std::span(_regions).first(size_t(n)), out);
        // walk_end says how far the kernel got: the end, or where the
        // output filled up.
        if (arg.walk_end <= start)
            throw error(fmt::format("PAGEMAP_SCAN pid {} made no progress at {:#x}", _pid, start));
        start = arg.walk_end;
    }
    return true;
}

void append_runs(std::span<const pagemap_abi::page_region> regions, std::vector<page_run>& out) {
    for (const auto& r : regions) {
        if (!out.empty() && out.back().end == r.start)
            out.back().end = r.end;
        else
            out.push_back({r.start, r.end});
    }
}

std::vector<page_run> holes_in(uint64_t start, uint64_t end, const std::vector<page_run>& present) {
    std::vector<page_run> holes;
    uint64_t at = start;
    for (const auto& r : present) {
        if (r.end <= at || r.start >= end)
            continue;
        if (r.start > at)
            holes.push_back({at, r.start});
        at = std::max(at, r.end);
    }
    if (at < end)
        holes.push_back({at, end});
    return holes;
}

} // namespace ferry::proc
