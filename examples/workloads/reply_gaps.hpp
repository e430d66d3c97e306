// The client-visible downtime of a server on one connection: the longest
// gap between two replies, and where it began. Shared by the example
// clients (ferry-echo-client, ferry-redis-client).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>

namespace ferry::examples {

class reply_gaps {
  public:
    explicit reply_gaps(uint64_t start_ns) : _start(start_ns) {}

    // A reply arrived at `t_ns` (monotonic).
    void reply(uint64_t t_ns) {
        if (_last && t_ns - _last > _longest) {
            _longest = t_ns - _last;
            _longest_from = _last;
        }
        _last = t_ns;
    }

    // "longest_gap_ms" and "longest_gap_start_ms" (from the start), and when
    // the gap ended on CLOCK_MONOTONIC (to line it up with the hosts' logs).
    void report(nlohmann::json& out) const {
        out["longest_gap_ms"] = double(_longest) / 1e6;
        out["longest_gap_start_ms"] = double(_longest_from ? _longest_from - _start : 0) / 1e6;
        out["longest_gap_end_monotonic_ns"] = _longest_from ? _longest_from + _longest : 0;
    }

  private:
    uint64_t _start;
    uint64_t _last = 0, _longest = 0, _longest_from = 0;
};

} // namespace ferry::examples
