#include "sys/lapse_timer.hpp"

namespace ferry {

lapse_timer::lapse_timer(std::chrono::milliseconds limit, std::function<void()> on_lapse)
    : _thread([this, limit, on_lapse = std::move(on_lapse)] {
          std::unique_lock lock(_mu);
          if (_stop_cv.wait_for(lock, limit, [this] { return _stop; }))
              return;
          on_lapse();
          _lapsed = true;
      }) {}

lapse_timer::~lapse_timer() {
    {
        std::lock_guard lock(_mu);
        _stop = true;
    }
    _stop_cv.notify_all();
    _thread.join();
}

bool lapse_timer::lapsed() const {
    std::lock_guard lock(_mu);
    return _lapsed;
}

} // namespace ferry
