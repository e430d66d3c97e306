#include "criu/vma_flags.hpp"

#include "core/error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <fstream>
#include <sstream>
#include <utility>

namespace ferry::criu {

namespace {

struct vmflag_rule {
    std::string_view token;
    uint32_t map_flag;
    int madvise; // -1: none
};

// proc_parse.c's table, in its order. MADV_ values from <asm-generic/mman-common.h>.
constexpr std::array<vmflag_rule, 10> rules{{
    {"gd", 0x0100, -1}, // MAP_GROWSDOWN
    {"lo", 0x2000, -1}, // MAP_LOCKED
    {"nr", 0x4000, -1}, // MAP_NORESERVE
    {"sr", 0, 2},       // MADV_SEQUENTIAL
    {"rr", 0, 1},       // MADV_RANDOM
    {"dc", 0, 10},      // MADV_DONTFORK
    {"dd", 0, 16},      // MADV_DONTDUMP
    {"mg", 0, 12},      // MADV_MERGEABLE
    {"hg", 0, 14},      // MADV_HUGEPAGE
    {"nh", 0, 15},      // MADV_NOHUGEPAGE
}};

bool parse_hex(std::string_view s, uint64_t& out) {
    const auto r = std::from_chars(s.data(), s.data() + s.size(), out, 16);
    return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// "start-end perms ..." -> start, end; false if the line is not a VMA header.
bool parse_header(std::string_view line, uint64_t& start, uint64_t& end) {
    const auto space = line.find(' ');
    const auto dash = line.find('-');
    if (space == std::string_view::npos || dash == std::string_view::npos || dash > space)
        return false;
    return parse_hex(line.substr(0, dash), start) &&
           parse_hex(line.substr(dash + 1, space - dash - 1), end);
}

} // namespace

vma_flags parse_vmflags(std::string_view line) {
    vma_flags f;
    size_t pos = 0;
    while (pos < line.size()) {
        while (pos < line.size() && line[pos] == ' ')
            pos++;
        const size_t end = std::min(line.find(' ', pos), line.size());
        const auto token = line.substr(pos, end - pos);
        for (const auto& r : rules) {
            if (token != r.token)
                continue;
            f.map_flags |= r.map_flag;
            if (r.madvise >= 0)
                f.madv |= uint64_t(1) << r.madvise;
        }
        pos = end;
    }
    return f;
}

std::vector<smaps_vma> parse_smaps(std::string_view text) {
    std::vector<smaps_vma> out;
    size_t pos = 0;
    while (pos < text.size()) {
        const size_t nl = std::min(text.find('\n', pos), text.size());
        const auto line = text.substr(pos, nl - pos);
        pos = nl + 1;
        uint64_t start = 0, end = 0;
        if (parse_header(line, start, end)) {
            if (start >= end || (!out.empty() && start < out.back().end))
                throw error(fmt::format("smaps: VMA '{}' is malformed or out of order", line));
            out.push_back({start, end, {}});
        } else if (line.starts_with("VmFlags:")) {
            if (out.empty())
                throw error("smaps: VmFlags before any VMA");
            out.back().flags = parse_vmflags(line.substr(8));
        }
    }
    return out;
}

std::vector<smaps_vma> read_smaps(pid_t pid) {
    const auto path = fmt::format("/proc/{}/smaps", pid);
    std::ifstream in(path);
    std::ostringstream text;
    text << in.rdbuf();
    if (!in && !in.eof())
        throw error(fmt::format("cannot read {}", path));
    return parse_smaps(text.str());
}

std::string compare_vma_flags(const std::vector<vma>& dumped, const std::vector<smaps_vma>& now) {
    std::string diff;
    for (const auto& d : dumped) {
        // VVAR areas are merged by CRIU, vsyscall is the kernel's: neither
        // carries flags CRIU restores.
        if (d.status & (vma_area_vvar | vma_area_vsyscall))
            continue;
        const auto it = std::lower_bound(now.begin(), now.end(), d.end,
                                         [](const smaps_vma& v, uint64_t e) { return v.end < e; });
        const vma_flags dumped_flags{d.flags & vmflags_map_bits, d.madv};
        std::string what;
        if (it == now.end() || it->end != d.end)
            what = "no longer a VMA of the frozen task";
        else if (const vma_flags frozen{it->flags.map_flags, it->flags.madv};
                 frozen != dumped_flags)
            what = fmt::format(
                "dumped with mmap flags {:#x} madvise {:#x}, frozen with {:#x} {:#x}",
                dumped_flags.map_flags, dumped_flags.madv, frozen.map_flags, frozen.madv);
        else
            continue;
        diff += fmt::format("{}[{:#x}, {:#x}) {}", diff.empty() ? "" : "; ", d.start, d.end, what);
    }
    return diff;
}

} // namespace ferry::criu
