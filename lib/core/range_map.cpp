#include "core/range_map.hpp"

#include <algorithm>

namespace ferry {

range_map::range_map(bool merge_adjacent) : _merge_adjacent(merge_adjacent) {}

range_map::range_map(const range_map& other)
    : _bytes(other._bytes), _merge_adjacent(other._merge_adjacent) {
    for (const auto& [start, t] : other._ranges)
        _ranges.emplace_hint(_ranges.end(), start, t);
}

void range_map::clear() {
    _ranges.clear();
    _bytes = 0;
}

void range_map::insert(uint64_t start, uint64_t end, uint64_t img_start) {
    if (start >= end)
        return;
    erase(start, end);
    auto it = _ranges.emplace(start, tail{end, img_start}).first;
    _bytes += end - start;
    if (_merge_adjacent)
        merge_around(it);
}

// Joins `it` with neighbours that touch it in both address spaces.
void range_map::merge_around(map_type::iterator it) {
    if (it != _ranges.begin()) {
        auto prev = std::prev(it);
        uint64_t prev_len = prev->second.end - prev->first;
        if (prev->second.end == it->first &&
            prev->second.img_start + prev_len == it->second.img_start) {
            prev->second.end = it->second.end;
            _ranges.erase(it);
            it = prev;
        }
    }
    auto next = std::next(it);
    if (next != _ranges.end()) {
        uint64_t len = it->second.end - it->first;
        if (it->second.end == next->first && it->second.img_start + len == next->second.img_start) {
            it->second.end = next->second.end;
            _ranges.erase(next);
        }
    }
}

uint64_t range_map::erase(uint64_t start, uint64_t end) {
    if (start >= end || _ranges.empty())
        return 0;
    uint64_t removed = 0;
    auto it = _ranges.upper_bound(start);
    if (it != _ranges.begin() && std::prev(it)->second.end > start)
        --it;
    while (it != _ranges.end() && it->first < end) {
        const uint64_t r_start = it->first;
        const tail t = it->second;
        const uint64_t cut_start = std::max(r_start, start);
        const uint64_t cut_end = std::min(t.end, end);
        removed += cut_end - cut_start;
        it = _ranges.erase(it);
        if (r_start < cut_start)
            _ranges.emplace_hint(it, r_start, tail{cut_start, t.img_start});
        if (cut_end < t.end)
            it = _ranges.emplace_hint(it, cut_end, tail{t.end, t.img_start + (cut_end - r_start)});
    }
    _bytes -= removed;
    return removed;
}

void range_map::remap(uint64_t from, uint64_t to, uint64_t len) {
    if (len == 0 || from == to)
        return;
    std::vector<address_range> moved;
    const uint64_t end = from + len;
    auto it = _ranges.upper_bound(from);
    if (it != _ranges.begin() && std::prev(it)->second.end > from)
        --it;
    for (; it != _ranges.end() && it->first < end; ++it) {
        const uint64_t s = std::max(it->first, from);
        const uint64_t e = std::min(it->second.end, end);
        moved.push_back({s, e, it->second.img_start + (s - it->first)});
    }
    erase(from, end);
    for (const auto& r : moved)
        insert(r.start - from + to, r.end - from + to, r.img_start);
}

std::optional<address_range> range_map::find(uint64_t addr) const {
    auto it = _ranges.upper_bound(addr);
    if (it == _ranges.begin())
        return std::nullopt;
    --it;
    if (addr >= it->second.end)
        return std::nullopt;
    return address_range{it->first, it->second.end, it->second.img_start};
}

std::optional<address_range> range_map::first_ending_after(uint64_t addr) const {
    auto it = _ranges.upper_bound(addr);
    if (it != _ranges.begin() && std::prev(it)->second.end > addr)
        --it;
    if (it == _ranges.end())
        return std::nullopt;
    return address_range{it->first, it->second.end, it->second.img_start};
}

uint64_t range_map::covered_from(uint64_t addr) const {
    auto r = find(addr);
    return r ? r->end - addr : 0;
}

std::vector<address_range> range_map::to_vector() const {
    std::vector<address_range> out;
    out.reserve(_ranges.size());
    for (const auto& [start, t] : _ranges)
        out.push_back({start, t.end, t.img_start});
    return out;
}

} // namespace ferry
