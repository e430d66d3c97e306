// The prefetch heuristic: one small, pure object per process that watches
// where faults land and says how much to fetch around the next one.
//   sequential  each fault lands just past the last window: double the
//               window (up to max), and let the background read ahead
//   strided     the same distance between faults, farther than a window:
//               fetch the next few pages at that stride
//   random      anything else: fetch little, since neighbours are unlikely
//               to be next and every extra page delays the faulting thread
#pragma once

#include <cstdint>

namespace ferry::lazy {

class access_pattern {
  public:
    enum class kind : uint8_t { random, sequential, strided };
    struct plan {
        kind pattern;
        uint32_t window;      // pages from the faulting one on, in one request
        int64_t stride_pages; // for strided: the distance to prefetch at
        uint32_t strided;     // for strided: how many further pages
    };

    access_pattern(uint32_t min_window, uint32_t max_window) noexcept
        : _min(min_window ? min_window : 1), _max(max_window < _min ? _min : max_window),
          _window(_min) {}

    // Called with the page number (address / 4096) of every fault.
    plan on_fault(uint64_t page) noexcept {
        const int64_t delta = int64_t(page - _last);
        const bool first = _faults++ == 0;
        _last = page;
        plan p{kind::random, _min, 0, 0};
        if (!first && delta > 0 && uint64_t(delta) <= uint64_t(_window) + 1) {
            // The access continued just past what the last fault fetched.
            _window = _window * 2 > _max ? _max : _window * 2;
            p = {kind::sequential, _window, 0, 0};
        } else if (!first && delta == _last_delta &&
                   (delta > int64_t(_window) || delta < -int64_t(_window))) {
            _window = _min;
            p = {kind::strided, _min, delta, strided_prefetch};
        } else {
            _window = _min;
        }
        _last_delta = delta;
        return p;
    }

    static constexpr uint32_t strided_prefetch = 4;

  private:
    uint32_t _min;
    uint32_t _max;
    uint32_t _window;
    uint64_t _last = 0;
    int64_t _last_delta = 0;
    uint64_t _faults = 0;
};

} // namespace ferry::lazy
