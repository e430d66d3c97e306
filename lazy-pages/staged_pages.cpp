#include "staged_pages.hpp"

#include "core/page.hpp"

#include <algorithm>
#include <cstring>

namespace ferry::lazy {

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
        if (_used + len > _memory.size()) {
            _overflow_pages += pages_in(len);
            data += len;
            addr = upto;
            continue;
        }
        std::memcpy(_memory.data() + _used, data, size_t(len));
        _extents.emplace(std::pair{pid, addr}, extent{upto, _used});
        _used += len;
        data += len;
        addr = upto;
    }
}

void staged_pages::publish(std::vector<std::pair<uint32_t, std::pair<uint64_t, uint64_t>>> valid) {
    std::sort(valid.begin(), valid.end());
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
                    if (!_runs.empty() && _runs.back().pid == pid && _runs.back().end == at &&
                        _runs.back().data + (at - _runs.back().start) == data)
                        _runs.back().end = upto;
                    else if (_runs.empty() || _runs.back().pid < pid ||
                             (_runs.back().pid == pid && _runs.back().end <= at))
                        _runs.push_back({pid, at, upto, data});
                    _valid_pages += pages_in(upto - at);
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
    _ready.store(true, std::memory_order_release);
}

std::vector<staged_pages::run>::const_iterator
staged_pages::at_or_after(uint32_t pid, uint64_t img) const noexcept {
    // The first run that ends after img, ordered by (pid, end).
    return std::partition_point(_runs.begin(), _runs.end(), [&](const run& r) {
        return r.pid < pid || (r.pid == pid && r.end <= img);
    });
}

const std::byte* staged_pages::find(uint32_t pid, uint64_t img, uint64_t& bytes) const noexcept {
    if (!ready())
        return nullptr;
    const auto it = at_or_after(pid, img);
    if (it == _runs.end() || it->pid != pid || it->start > img)
        return nullptr;
    bytes = it->end - img;
    return it->data + (img - it->start);
}

uint64_t staged_pages::next(uint32_t pid, uint64_t img, uint64_t limit) const noexcept {
    if (!ready())
        return limit;
    const auto it = at_or_after(pid, img);
    if (it == _runs.end() || it->pid != pid)
        return limit;
    return std::min(limit, std::max(img, it->start));
}

} // namespace ferry::lazy
