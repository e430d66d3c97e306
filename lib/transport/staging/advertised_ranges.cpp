#include "transport/staging/advertised_ranges.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <tuple>

namespace ferry::transport::staging {

advertised_ranges::advertised_ranges(const criu::lazy_page_index& index,
                                     FerryControl__PageChannelAccepted& ok) {
    const auto& ranges = index.ranges();
    _ranges.resize(ranges.size());
    for (size_t i = 0; i < ranges.size(); i++) {
        auto& r = _ranges[i];
        r = FERRY_CONTROL__SHM_RANGE__INIT;
        r.pid = ranges[i].pid;
        r.start = ranges[i].start;
        r.end = ranges[i].end;
        r.first_page = ranges[i].first_page;
        _pointers.push_back(&r);
    }
    ok.n_shm_ranges = _pointers.size();
    ok.shm_ranges = _pointers.data();
}

criu::lazy_page_index advertised_index(const FerryControl__PageChannelAccepted& accepted,
                                       uint64_t page_count) {
    // Built in the same order as the source built its own, every range must
    // get the same first page.
    std::vector<const FerryControl__ShmRange*> ranges(accepted.shm_ranges,
                                                      accepted.shm_ranges + accepted.n_shm_ranges);
    std::sort(ranges.begin(), ranges.end(), [](const auto* a, const auto* b) {
        return std::tie(a->pid, a->start) < std::tie(b->pid, b->start);
    });
    criu::lazy_page_index index;
    for (const auto* r : ranges) {
        index.add(r->pid, r->start, r->end);
        if (index.ranges().back().first_page != r->first_page)
            throw error("the source's staging region numbers its pages differently");
    }
    if (index.total_pages() > page_count)
        throw error("the advertised ranges lie outside the staging region");
    return index;
}

} // namespace ferry::transport::staging
