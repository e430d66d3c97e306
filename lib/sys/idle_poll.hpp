// Keeps this host's idle CPUs polling for a bounded while: a PM QoS CPU
// latency request of 0 µs on /dev/cpu_dma_latency.
//
// A migration's downtime is a chain of wake-ups across processes (CRIU, its
// tasks, the daemons, the migrator). Where a CPU halts when idle, waking a
// thread there pays the halt's exit: on a KVM guest without halt polling,
// a VM exit and the host's wake of the vCPU, ~60 µs against ~10 µs from a
// polling CPU (examples/bench/uffd_floor, cross-CPU). The request makes the
// cpuidle governor keep to its polling state while it stands.
//
// The kernel drops the request when the file closes, so a process that dies
// cannot leave it behind. Each hold also lapses on its own after `limit`,
// so a migration stuck in its downtime does not keep the host's CPUs
// spinning beyond it.
#pragma once

#include "core/unique_fd.hpp"
#include "sys/lapse_timer.hpp"

#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace ferry::idle_poll {

// A migration's downtime is well under a second; one stuck in it for this
// long has lost its speed anyway and must not keep the CPUs spinning.
inline constexpr std::chrono::milliseconds downtime_limit{10'000};
// After the resume the workload's faults are the chain of wake-ups: the
// destination holds again for the post-copy, which may well take longer,
// but spinning through a long one would cost more than it gains.
inline constexpr std::chrono::milliseconds post_copy_limit{10'000};

// Why a hold would change nothing here, or empty if it would: no cpuidle
// driver (idle is then the architecture's default, which no request
// changes) or none at all.
[[nodiscard]] std::string why_no_effect();

// One standing request. Movable only through its unique_ptr.
class hold {
  public:
    // Takes the request, or leaves `state()` saying why not; never throws
    // for the machine's reasons (no device, no permission).
    explicit hold(std::chrono::milliseconds limit);
    hold(const hold&) = delete;
    hold& operator=(const hold&) = delete;
    ~hold();

    [[nodiscard]] bool held() const noexcept { return static_cast<bool>(_fd); }
    // Taken, then lapsed after its limit: it asks for nothing any more.
    [[nodiscard]] bool lapsed() const;
    // For logs and reports: "held", "lapsed after N ms", or why it was not
    // taken.
    [[nodiscard]] std::string state() const;

  private:
    unique_fd _fd;
    std::string _why_not;
    std::chrono::milliseconds _limit;
    // After `_limit` the request stays open but asks for nothing.
    std::optional<lapse_timer> _lapse;
};

// For a phase that may begin long after its hold was taken (a migration's
// downtime, after a pre-copy of unknown length): `h` if it is not lapsed,
// otherwise a new hold of `limit`, taken before `h` is released so that
// nothing lapses between them. `h` as it is if the new one is refused.
[[nodiscard]] std::unique_ptr<hold> renewed(std::unique_ptr<hold> h,
                                            std::chrono::milliseconds limit);

// The host's current CPU latency target in µs, as /dev/cpu_dma_latency reads
// (2'000'000'000 means no request stands), or -1 if it cannot be read.
[[nodiscard]] long long current_target_us();

} // namespace ferry::idle_poll
