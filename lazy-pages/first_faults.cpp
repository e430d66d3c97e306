#include "first_faults.hpp"

#include <fmt/format.h>

namespace ferry::lazy {

std::string first_faults::describe() const {
    if (_n == 0)
        return "no faults";
    const uint64_t t0 = _at[0].fault_ns;
    uint64_t waited = 0;
    std::string out;
    for (size_t i = 0; i < _n; i++) {
        const auto& e = _at[i];
        waited += e.installed_ns - e.fault_ns;
        out += fmt::format(" +{:.2f}/{:.2f}@{:x}", double(e.fault_ns - t0) / 1e6,
                           double(e.installed_ns - e.fault_ns) / 1e6, e.addr);
    }
    return fmt::format("{} faults from {} (monotonic ns), {:.2f} ms waited in all; "
                       "ms after the first / ms waited @ address:{}",
                       _n, t0, double(waited) / 1e6, out);
}

} // namespace ferry::lazy
