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

// --- reads -----------------------------------------------------------------

std::byte* pool_client::member_buffer(read_op& op, uint32_t i, uint32_t member) const noexcept {
    const auto& g = _layout.geo;
    if (member < g.data)
        return op.data + size_t(i) * _layout.pages_per_stripe * page_size +
               size_t(member) * _layout.member_len;
    return op.parity + (size_t(i) * g.parity + (member - g.data)) * _layout.member_len;
}

bool pool_client::usable(const read_op& op, uint32_t i, uint32_t member) const noexcept {
    const uint64_t stripe = op.first_stripe + i;
    const uint32_t slot = _layout.node_of(stripe, member);
    const uint8_t st = op.states[size_t(i) * raid::max_members + member];
    return _links[slot]->live() && !_health->dead(slot) && st != failed && st != slow &&
           st != refused;
}

bool pool_client::request_member(read_op& op, uint32_t i, uint32_t member) {
    const uint64_t stripe = op.first_stripe + i;
    const uint32_t slot = _layout.node_of(stripe, member);
    uint8_t& st = op.states[size_t(i) * raid::max_members + member];
    request r{op::get, _object, chunk_of(stripe, member), 0, 0, _next_id++};
    const expectation e{r.request_id,   monotonic_ns(), op::get, op.index, op.gen, i,
                        uint8_t(member)};
    // One-sided when the node offers it; two-sided otherwise (or when every
    // RDMA landing slot is busy).
    auto& l = *_links[slot];
    if (l.rdma && !_health->dead(slot) && post_one_sided(slot, e)) {
        st = requested;
        return true;
    }
    if (!post(slot, r, nullptr, nullptr, e)) {
        st = failed;
        return false;
    }
    st = requested;
    return true;
}

void pool_client::finish_stripe(read_op& op, uint32_t i, bool degraded) {
    op.done[i] = 1;
    if (degraded)
        _stats.degraded_stripes++;
    if (--op.stripes_left == 0)
        op.status = read_status::ok;
}

// Decides what stripe i of a read still needs: the data members holding
// the wanted pages when their nodes are fine, else any `data` members to
// rebuild them from.
void pool_client::plan_stripe(read_op& op, uint32_t i) {
    const auto& g = _layout.geo;
    const uint32_t n = g.members(), pps = _layout.pages_per_stripe;
    const uint64_t stripe = op.first_stripe + i;
    const uint64_t lo = std::max(op.first_page, stripe * pps);
    const uint64_t hi = std::min(op.first_page + op.nr_pages - 1, stripe * pps + pps - 1);
    const uint32_t m_lo = _layout.first_member_of_page(lo), m_hi = _layout.last_member_of_page(hi);
    uint8_t* st = &op.states[size_t(i) * raid::max_members];
    for (;;) {
        if (op.done[i] || op.status != read_status::pending)
            return;
        uint32_t n_arrived = 0, n_active = 0, n_slow = 0;
        for (uint32_t m = 0; m < n; m++) {
            if (st[m] == missing) {
                op.status = read_status::missing;
                op.error = fmt::format("stripe {} is not in the pool", stripe);
                return;
            }
            n_arrived += st[m] == arrived;
            n_active += st[m] == requested;
            n_slow += st[m] == slow;
        }
        if (op.all_members) {
            plan_scrub(op, i, n_arrived, n_active);
            return;
        }
        bool have_needed = true, healthy = true;
        for (uint32_t m = m_lo; m <= m_hi; m++) {
            have_needed &= st[m] == arrived;
            healthy &= st[m] == arrived || (!op.distrust && usable(op, i, m));
        }
        if (have_needed && !op.distrust)
            return finish_stripe(op, i, false);
        if (healthy) {
            bool sent_all = true;
            for (uint32_t m = m_lo; m <= m_hi; m++)
                if (st[m] == idle && !request_member(op, i, m))
                    sent_all = false;
            if (sent_all)
                return;
            continue; // a node failed as we asked it: plan again
        }
        if (n_arrived >= g.data) {
            std::array<std::byte*, raid::max_members> ptrs{};
            std::array<bool, raid::max_members> lost{};
            for (uint32_t m = 0; m < n; m++) {
                ptrs[m] = member_buffer(op, i, m);
                lost[m] = st[m] != arrived;
            }
            if (!_codec.reconstruct(std::span(ptrs.data(), n), std::span(lost.data(), n),
                                    _layout.member_len))
                break; // cannot happen with `data` survivors; reported below
            return finish_stripe(op, i, true);
        }
        // Degraded: ask for more members, data first, until `data` are coming.
        uint32_t want = g.data - n_arrived - std::min(n_active, g.data - n_arrived);
        bool retry = false;
        for (uint32_t m = 0; m < n && want > 0; m++) {
            const bool distrusted = op.distrust && m >= m_lo && m <= m_hi;
            if (st[m] != idle || distrusted || !usable(op, i, m))
                continue;
            if (request_member(op, i, m))
                want--;
            else
                retry = true;
        }
        if (retry)
            continue;
        // Enough members coming; or late ones that may still answer.
        if (want == 0 || want <= n_slow)
            return;
        break;
    }
    // Fewer usable members than the level needs: name what was lost.
    for (uint32_t m = 0; m < n; m++)
        if (st[m] == refused) {
            op.status = read_status::lost;
            op.error = fmt::format("pool object {:016x}: {} (pool node {})", _object,
                                   to_string(status::forbidden),
                                   _health->endpoint(_layout.node_of(stripe, m)).to_string());
            return;
        }
    std::string what;
    for (uint32_t m = 0; m < n; m++)
        if (st[m] != arrived && st[m] != requested)
            what += fmt::format("{}member {} on {}", what.empty() ? "" : ", ", m,
                                _health->endpoint(_layout.node_of(stripe, m)).to_string());
    op.status = read_status::lost;
    op.error = fmt::format("stripe {} of pool object {:016x} cannot be read: {} unavailable, "
                           "{} tolerates {} (lost nodes: {})",
                           stripe, _object, what, raid::to_string(g.lvl), g.tolerates(),
                           _health->lost_nodes());
}

// Scrub: every member must be read and the parity must match the data.
void pool_client::plan_scrub(read_op& op, uint32_t i, uint32_t n_arrived, uint32_t n_active) {
    const auto& g = _layout.geo;
    const uint32_t n = g.members();
    const uint64_t stripe = op.first_stripe + i;
    uint8_t* st = &op.states[size_t(i) * raid::max_members];
    for (uint32_t m = 0; m < n; m++)
        if (st[m] == idle && !request_member(op, i, m))
            n_active = UINT32_MAX;
    for (uint32_t m = 0; m < n; m++)
        if (st[m] == failed) {
            op.status = read_status::lost;
            op.error = fmt::format("stripe {}: member {} on {} is unreadable", stripe, m,
                                   _health->endpoint(_layout.node_of(stripe, m)).to_string());
            return;
        }
    if (n_arrived < n)
        return;
    (void)n_active;
    std::array<std::byte*, raid::max_members> ptrs{}, scratch{};
    std::vector<std::byte> spare(size_t(g.parity + 1) * _layout.member_len + raid::alignment);
    auto* base = reinterpret_cast<std::byte*>(
        (reinterpret_cast<uintptr_t>(spare.data()) + raid::alignment - 1) &
        ~uintptr_t(raid::alignment - 1));
    for (uint32_t m = 0; m < n; m++)
        ptrs[m] = member_buffer(op, i, m);
    for (uint32_t p = 0; p < g.parity; p++)
        scratch[p] = base + size_t(p) * _layout.member_len;
    if (g.parity && !_codec.verify(std::span(ptrs.data(), n), _layout.member_len,
                                   std::span(scratch.data(), g.parity))) {
        op.status = read_status::lost;
        op.error = fmt::format("stripe {}: parity does not match the data", stripe);
        return;
    }
    finish_stripe(op, i, false);
}

int pool_client::begin_read(uint64_t first_page, uint32_t nr_pages, read_mode mode) {
    if (nr_pages == 0 || nr_pages > _opt.max_read_pages)
        throw error(
            fmt::format("pool read of {} pages (at most {})", nr_pages, _opt.max_read_pages));
    sync_with_health();
    for (size_t k = 0; k < _reads.size(); k++) {
        auto& op = *_reads[k];
        if (op.active)
            continue;
        op.active = true;
        op.gen++;
        op.distrust = mode == read_mode::distrust_data;
        op.all_members = mode == read_mode::all_members;
        op.first_page = first_page;
        op.nr_pages = nr_pages;
        op.first_stripe = _layout.stripe_of_page(first_page);
        op.nr_stripes =
            uint32_t(_layout.stripe_of_page(first_page + nr_pages - 1) - op.first_stripe + 1);
        op.stripes_left = op.nr_stripes;
        op.status = read_status::pending;
        op.error.clear();
        std::fill_n(op.states.begin(), size_t(op.nr_stripes) * raid::max_members, idle);
        std::fill_n(op.done.begin(), op.nr_stripes, 0);
        _stats.reads++;
        for (uint32_t i = 0; i < op.nr_stripes; i++)
            plan_stripe(op, i);
        return int(k);
    }
    return -1;
}

read_status pool_client::poll_read(int slot) const noexcept {
    return _reads[size_t(slot)]->status;
}

const std::byte* pool_client::read_pages(int slot) const noexcept {
    const auto& op = *_reads[size_t(slot)];
    return op.data + (op.first_page - op.first_stripe * _layout.pages_per_stripe) * page_size;
}

const uint64_t* pool_client::read_checksums(int slot) const noexcept {
    const auto& op = *_reads[size_t(slot)];
    return op.sums.data() + (op.first_page - op.first_stripe * _layout.pages_per_stripe);
}

const std::string& pool_client::read_error(int slot) const noexcept {
    return _reads[size_t(slot)]->error;
}

void pool_client::end_read(int slot) noexcept {
    _reads[size_t(slot)]->active = false;
}

std::optional<uint32_t> pool_client::first_bad_page(int slot) const noexcept {
    const std::byte* pages = read_pages(slot);
    const uint64_t* sums = read_checksums(slot);
    for (uint32_t i = 0; i < _reads[size_t(slot)]->nr_pages; i++)
        if (page_checksum(pages + size_t(i) * page_size) != sums[i])
            return i;
    return std::nullopt;
}

read_status pool_client::read_now(uint64_t first_page, uint32_t nr_pages, read_mode mode, int& slot,
                                  std::chrono::steady_clock::time_point until) {
    slot = begin_read(first_page, nr_pages, mode);
    if (slot < 0)
        throw error("no free pool read slot");
    read_status st;
    while ((st = poll_read(slot)) == read_status::pending) {
        if (std::chrono::steady_clock::now() > until) {
            end_read(slot);
            throw error(fmt::format("pool pages [{}, +{}) of object {:016x}: no answer in time",
                                    first_page, nr_pages, _object));
        }
        progress(std::chrono::milliseconds(1));
    }
    return st;
}

} // namespace ferry::pool
