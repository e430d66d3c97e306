#include "criu/criu_deadlines.hpp"

#include <algorithm>
#include <cmath>

namespace ferry::criu {

namespace {

using ms = std::chrono::milliseconds;

// base + per_gib for each GiB (rounded up), times scale; never under 200 ms.
ms bound(ms base, ms per_gib, double gib, double scale) {
    const double total = double(base.count()) + double(per_gib.count()) * std::ceil(gib);
    return ms(std::max<int64_t>(200, int64_t(total * scale)));
}

} // namespace

deadlines deadlines::for_memory(uint64_t workload_bytes, double scale) {
    const double gib = double(workload_bytes) / double(1ull << 30);
    deadlines d;
    d.dump = bound(ms(30'000), ms(15'000), gib, scale);
    d.page_server = bound(ms(10'000), ms(5'000), gib, scale);
    d.notify = bound(ms(10'000), ms(0), gib, scale);
    d.close = bound(ms(20'000), ms(5'000), gib, scale);
    d.abort = bound(ms(20'000), ms(5'000), gib, scale);
    d.restore = bound(ms(60'000), ms(30'000), gib, scale);
    d.release = bound(ms(10'000), ms(2'000), gib, scale);
    return d;
}

} // namespace ferry::criu
