#include "criu/lazy_page_index.hpp"

#include "core/error.hpp"
#include "core/page.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

namespace ferry::criu {

void lazy_page_index::add(uint32_t pid, uint64_t start, uint64_t end) {
    if (end <= start || (start | end) % page_size)
        throw error(fmt::format("bad lazy range [{:#x}, {:#x})", start, end));
    if (!_ranges.empty() && std::tie(pid, start) < std::tie(_ranges.back().pid, _ranges.back().end))
        throw error("lazy ranges must be added in (pid, address) order");
    _ranges.push_back({pid, start, end, _total});
    _total += (end - start) / page_size;
}

std::optional<uint64_t> lazy_page_index::find(uint32_t pid, uint64_t vaddr,
                                              uint32_t nr_pages) const noexcept {
    auto it =
        std::upper_bound(_ranges.begin(), _ranges.end(), std::make_pair(pid, vaddr),
                         [](const std::pair<uint32_t, uint64_t>& key, const range& r) {
                             return std::tie(key.first, key.second) < std::tie(r.pid, r.start);
                         });
    if (it == _ranges.begin())
        return std::nullopt;
    --it;
    if (it->pid != pid || vaddr < it->start || vaddr + uint64_t(nr_pages) * page_size > it->end)
        return std::nullopt;
    return it->first_page + (vaddr - it->start) / page_size;
}

const lazy_page_index::range& lazy_page_index::range_of(uint64_t index) const noexcept {
    auto it = std::upper_bound(_ranges.begin(), _ranges.end(), index,
                               [](uint64_t p, const range& r) { return p < r.first_page; });
    return *std::prev(it);
}

} // namespace ferry::criu
