#include "pool/pool_client_state.hpp"

#include "core/checksum.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/page.hpp"
#include "wire/control.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

namespace ferry::pool {

// --- writes ----------------------------------------------------------------

void pool_client::wait_puts() {
    while (_puts_outstanding > 0)
        progress(std::chrono::milliseconds(10));
}

uint32_t pool_client::put_members(uint64_t first_stripe, uint32_t count, int only_slot,
                                  const std::byte* pages, const uint64_t* checksums) {
    const auto& g = _layout.geo;
    const uint32_t n = g.members(), pps = _layout.pages_per_stripe, mlen = _layout.member_len;
    sync_with_health();
    // Parity of every stripe first, then the members go out node by node.
    std::vector<std::byte> parity_mem(size_t(count) * g.parity * mlen + raid::alignment);
    auto* parity = reinterpret_cast<std::byte*>(
        (reinterpret_cast<uintptr_t>(parity_mem.data()) + raid::alignment - 1) &
        ~uintptr_t(raid::alignment - 1));
    uint32_t failures = 0;
    _put_failures = 0;
    for (uint32_t i = 0; i < count; i++) {
        std::array<std::byte*, raid::max_members> ptrs{};
        for (uint32_t m = 0; m < n; m++)
            // The data is only read: encode writes the parity members alone.
            ptrs[m] = m < g.data ? const_cast<std::byte*>(pages) + (size_t(i) * pps) * page_size +
                                       size_t(m) * mlen
                                 : parity + (size_t(i) * g.parity + (m - g.data)) * mlen;
        if (g.parity)
            _codec.encode(std::span(ptrs.data(), n), mlen);
        const uint64_t stripe = first_stripe + i;
        for (uint32_t m = 0; m < n; m++) {
            const uint32_t slot = _layout.node_of(stripe, m);
            if (only_slot >= 0 && slot != uint32_t(only_slot))
                continue;
            request r{op::put, _object, chunk_of(stripe, m), _layout.meta_len(), mlen, _next_id++};
            expectation e{r.request_id, monotonic_ns(), op::put, -1, 0, 0, uint8_t(m)};
            if (post(slot, r, checksums + size_t(i) * pps, ptrs[m], e))
                _puts_outstanding++;
            else
                failures++;
        }
    }
    wait_puts();
    return failures + _put_failures;
}

uint32_t pool_client::put_stripes(uint64_t first_stripe, uint32_t count, const std::byte* pages,
                                  const uint64_t* checksums) {
    return put_members(first_stripe, count, -1, pages, checksums);
}

uint32_t pool_client::put_slot(uint64_t first_stripe, uint32_t count, uint32_t slot,
                               const std::byte* pages, const uint64_t* checksums) {
    return put_members(first_stripe, count, int(slot), pages, checksums);
}

void pool_client::drop_object() {
    sync_with_health();
    _put_failures = 0;
    for (uint32_t s = 0; s < _links.size(); s++) {
        request r{op::drop, _object, 0, 0, 0, _next_id++};
        expectation e{r.request_id, monotonic_ns(), op::drop, -1, 0, 0, 0};
        if (post(s, r, nullptr, nullptr, e))
            _puts_outstanding++;
    }
    wait_puts();
}

uint32_t pool_client::grant(const std::string& identity) {
    if (identity.empty() || identity.size() > max_meta_len)
        throw error(fmt::format("'{}' cannot be granted pool access", identity));
    sync_with_health();
    _put_failures = 0;
    uint32_t failures = 0;
    for (uint32_t s = 0; s < _links.size(); s++) {
        request r{op::grant, _object, 0, uint32_t(identity.size()), 0, _next_id++};
        expectation e{r.request_id, monotonic_ns(), op::grant, -1, 0, 0, 0};
        if (post(s, r, identity.data(), nullptr, e))
            _puts_outstanding++;
        else
            failures++;
    }
    wait_puts();
    return failures + _put_failures;
}

std::string pool_client::node_stats(uint32_t slot) {
    sync_with_health();
    _stats_done = false;
    request r{op::stats, _object, 0, 0, 0, _next_id++};
    expectation e{r.request_id, monotonic_ns(), op::stats, -1, 0, 0, 0};
    if (!post(slot, r, nullptr, nullptr, e))
        return "error: node is dead";
    while (!_stats_done)
        progress(std::chrono::milliseconds(10));
    return _stats_reply;
}

} // namespace ferry::pool
