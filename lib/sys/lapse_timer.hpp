// Ends a host-wide hold on its own once its limit passes: calls `on_lapse`
// once, on a thread of its own, unless the timer is destroyed first. The
// destructor stops the thread and joins it, so `on_lapse` never runs after
// it (a hold destroys its timer before it lets go of what it holds).
// Used by idle_poll::hold and expedited_rcu::hold.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace ferry {

class lapse_timer {
  public:
    // Throws std::system_error if no thread can be made.
    lapse_timer(std::chrono::milliseconds limit, std::function<void()> on_lapse);
    lapse_timer(const lapse_timer&) = delete;
    lapse_timer& operator=(const lapse_timer&) = delete;
    ~lapse_timer();

    // Whether `on_lapse` ran (it has returned by the time this says so).
    [[nodiscard]] bool lapsed() const;

  private:
    mutable std::mutex _mu;
    std::condition_variable _stop_cv;
    bool _stop = false;
    bool _lapsed = false;
    std::thread _thread; // last: it uses everything above
};

} // namespace ferry
