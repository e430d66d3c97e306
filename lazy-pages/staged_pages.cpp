#include "staged_pages.hpp"

#include "core/page.hpp"

#include <algorithm>
#include <cstring>

namespace ferry::lazy {

namespace {

// Keeps a page run that arrived again, merged with the last one where they
// touch (a round sends its runs in address order).
void note_rewritten(std::vector<staged_pages::page_run>& runs, uint32_t pid, uint64_t start,
                    uint64_t end) {
    if (!runs.empty() && runs.back().pid == pid && runs.back().end == start) {
        runs.back().end = end;
        return;
    }
    if (runs.size() < staged_pages::max_rewritten_runs)
        runs.push_back({pid, start, end});
}

// Sorts runs and merges those that overlap or touch.
void sort_and_merge(std::vector<staged_pages::page_run>& runs) {
    std::sort(runs.begin(), runs.end());
    size_t kept = 0;
    for (const auto& r : runs) {
        if (kept > 0 && runs[kept - 1].pid == r.pid && runs[kept - 1].end >= r.start)
            runs[kept - 1].end = std::max(runs[kept - 1].end, r.end);
        else
            runs[kept++] = r;
    }
    runs.resize(kept);
}

} // namespace

void staged_pages::reserve(uint64_t bytes) {
    // Reserved, not committed: pages are allocated as they arrive.
    const uint64_t room = round_up(bytes + bytes / 4 + (64ull << 20), page_size);
    _memory = mapping::anonymous(size_t(room), "pre-copy staging", MAP_NORESERVE);
}

void staged_pages::store(uint32_t pid, uint64_t addr, uint32_t nr, const std::byte* data) {
    const uint64_t end = addr + uint64_t(nr) * page_size;
    while (addr < end) {
        // The extent holding addr, if any: the last one starting at or before it.
        auto it = _extents.upper_bound({pid, addr});
        if (it != _extents.begin()) {
            auto prev = std::prev(it);
            if (prev->first.first == pid && prev->second.end > addr) {
                const uint64_t upto = std::min(end, prev->second.end);
                note_rewritten(_rewritten, pid, addr, upto);
                std::memcpy(_memory.data() + prev->second.offset + (addr - prev->first.second),
                            data, size_t(upto - addr));
                data += upto - addr;
                addr = upto;
                continue;
            }
        }
        // New pages, up to the next extent of this pid.
        uint64_t upto = end;
        if (it != _extents.end() && it->first.first == pid)
            upto = std::min(upto, it->first.second);
        const uint64_t len = upto - addr;
        const uint64_t used = _used.load(std::memory_order_relaxed); // only this thread writes it
        if (used + len > _memory.size()) {
            _overflow_pages.fetch_add(pages_in(len), std::memory_order_relaxed);
            data += len;
            addr = upto;
            continue;
        }
        std::memcpy(_memory.data() + used, data, size_t(len));
        _extents.emplace(std::pair{pid, addr}, extent{upto, used});
        _used.store(used + len, std::memory_order_relaxed);
        data += len;
        addr = upto;
    }
}

void staged_pages::publish(std::vector<std::pair<uint32_t, std::pair<uint64_t, uint64_t>>> valid) {
    auto next = std::make_unique<index>();
    next->number = uint32_t(_published.size()) + 1;
    next->rewritten = _rewritten;
    sort_and_merge(next->rewritten);
    for (const auto& r : next->rewritten)
        next->rewritten_pages += pages_in(r.end - r.start);
    std::sort(valid.begin(), valid.end());
    auto& runs = next->runs;
    for (const auto& [pid, range] : valid) {
        uint64_t at = range.first;
        while (at < range.second) {
            auto it = _extents.upper_bound({pid, at});
            if (it != _extents.begin()) {
                auto prev = std::prev(it);
                if (prev->first.first == pid && prev->second.end > at) {
                    const uint64_t upto = std::min(range.second, prev->second.end);
                    const std::byte* data =
                        _memory.data() + prev->second.offset + (at - prev->first.second);
                    if (!runs.empty() && runs.back().pid == pid && runs.back().end == at &&
                        runs.back().data + (at - runs.back().start) == data)
                        runs.back().end = upto;
                    else if (runs.empty() || runs.back().pid < pid ||
                             (runs.back().pid == pid && runs.back().end <= at))
                        runs.push_back({pid, at, upto, data});
                    next->valid_pages += pages_in(upto - at);
                    at = upto;
                    continue;
                }
            }
            // Valid but never staged here (dropped for room): skip to the next extent.
            at = it != _extents.end() && it->first.first == pid
                     ? std::min(range.second, std::max(at + page_size, it->first.second))
                     : range.second;
        }
    }
    _index.store(next.get(), std::memory_order_release);
    _published.push_back(std::move(next));
}

std::span<const staged_pages::page_run> staged_pages::rewritten(uint32_t pid) const noexcept {
    const index* ix = current();
    if (!ix)
        return {};
    const auto [first, last] =
        std::equal_range(ix->rewritten.begin(), ix->rewritten.end(), page_run{pid, 0, 0},
                         [](const page_run& a, const page_run& b) { return a.pid < b.pid; });
    return {first, last};
}

uint64_t staged_pages::pages_valid() const noexcept {
    const index* ix = current();
    return ix ? ix->valid_pages : 0;
}

uint64_t staged_pages::pages_rewritten() const noexcept {
    const index* ix = current();
    return ix ? ix->rewritten_pages : 0;
}

std::vector<staged_pages::run>::const_iterator
staged_pages::index::at_or_after(uint32_t pid, uint64_t img) const noexcept {
    // The first run that ends after img, ordered by (pid, end).
    return std::partition_point(runs.begin(), runs.end(), [&](const run& r) {
        return r.pid < pid || (r.pid == pid && r.end <= img);
    });
}

const std::byte* staged_pages::find(uint32_t pid, uint64_t img, uint64_t& bytes) const noexcept {
    const index* ix = current();
    if (!ix)
        return nullptr;
    const auto it = ix->at_or_after(pid, img);
    if (it == ix->runs.end() || it->pid != pid || it->start > img)
        return nullptr;
    bytes = it->end - img;
    return it->data + (img - it->start);
}

uint64_t staged_pages::next(uint32_t pid, uint64_t img, uint64_t limit) const noexcept {
    const index* ix = current();
    if (!ix)
        return limit;
    const auto it = ix->at_or_after(pid, img);
    if (it == ix->runs.end() || it->pid != pid)
        return limit;
    return std::min(limit, std::max(img, it->start));
}

bool staged_pages::any_valid(uint32_t pid, uint64_t start, uint64_t end) const noexcept {
    return next(pid, start, end) < end;
}

} // namespace ferry::lazy
