// The first faults after the restore, in order, with when each was read and
// when its page went in: what a restored workload waits for in its first
// milliseconds (the requests that were in flight at the freeze, say).
// Fixed size, so recording on the fault path never allocates.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace ferry::lazy {

class first_faults {
  public:
    static constexpr size_t capacity = 64;

    void record(uint64_t addr, uint64_t fault_ns, uint64_t installed_ns) noexcept {
        if (_n < capacity)
            _at[_n++] = {addr, fault_ns, installed_ns};
    }

    // "N faults from T (monotonic ns): +start/wait ms@address ..." for the log.
    [[nodiscard]] std::string describe() const;

  private:
    struct entry {
        uint64_t addr, fault_ns, installed_ns;
    };
    std::array<entry, capacity> _at{};
    size_t _n = 0;
};

} // namespace ferry::lazy
