// How the staging region numbers its pages, as the source advertises it in
// a page channel's acceptance (repeated shm_range) and the destination
// rebuilds it: both index the lazy ranges in the same order, so a page's
// number on one side is its number on the other.
#pragma once

#include "criu/lazy_page_index.hpp"
#include "wire/control.pb-c.h"

#include <cstdint>
#include <vector>

namespace ferry::transport::staging {

// Source: points `ok` at the ranges of `index`; keep this alive until `ok`
// is sent.
class advertised_ranges {
  public:
    advertised_ranges(const criu::lazy_page_index& index, FerryControl__PageChannelAccepted& ok);

  private:
    std::vector<FerryControl__ShmRange> _ranges;
    std::vector<FerryControl__ShmRange*> _pointers;
};

// Destination: the index the source advertised. Throws ferry::error if it
// numbers its pages differently from this side or needs more than
// `page_count` pages.
criu::lazy_page_index advertised_index(const FerryControl__PageChannelAccepted& accepted,
                                       uint64_t page_count);

} // namespace ferry::transport::staging
