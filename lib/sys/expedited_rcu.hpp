// Makes this host's RCU grace periods expedited for a bounded while:
// /sys/kernel/rcu_expedited = 1.
//
// Some kernel steps on a migration's path wait for a whole RCU grace period
// (synchronize_rcu): changing a macvlan link's MAC, as a moving network's
// copy does to take the source's, rehashes the link and waits one out,
// 4-20 ms on a 2-vCPU guest. Expedited, a grace period takes tens of µs,
// paid with an IPI to each CPU.
//
// The knob is host-wide and outlives the process that set it, so:
//  - holds are counted per process: the first saves the value it found
//    (and, if that was 0, sets 1), the last puts it back;
//  - the saved value goes to a file first (`knob::saved`), so that a
//    daemon that died holding puts it back when it starts again
//    (`recover`);
//  - each hold lapses on its own after its limit.
// A host that already expedites (1) or never does (rcu_normal 1) is left
// as it is.
#pragma once

#include "sys/lapse_timer.hpp"

#include <chrono>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>

namespace ferry::expedited_rcu {

struct knob {
    std::filesystem::path value = "/sys/kernel/rcu_expedited";
    std::filesystem::path normal = "/sys/kernel/rcu_normal";
    std::filesystem::path saved; // where the value found goes while held
};

// One hold. Never throws for the machine's reasons (no file, no
// permission): `state()` then says why it has no effect.
class hold {
  public:
    hold(knob k, std::chrono::milliseconds limit);
    hold(const hold&) = delete;
    hold& operator=(const hold&) = delete;
    ~hold();

    // For logs: "held", "lapsed after N ms", "already expedited", or why not.
    [[nodiscard]] std::string state() const;

  private:
    void release() noexcept; // once, from the lapse or the destructor

    knob _knob;
    std::chrono::milliseconds _limit;
    std::string _why_not;  // set in the constructor only
    std::mutex _mu;        // guards _counted, which the lapse may clear
    bool _counted = false; // this hold is in the process's count
    std::optional<lapse_timer> _lapse;
};

// At a daemon's start: if `k.saved` holds a value (its predecessor died
// holding), puts it back and removes the file. Says what it did, or
// nothing if there was nothing to do.
[[nodiscard]] std::string recover(const knob& k);

} // namespace ferry::expedited_rcu
