// Page replies: checked against their request, verified page by page, and
// installed with UFFDIO_COPY (replies.cpp).
//
// Fault replies are handled whole under the state lock. Background replies
// are split: the background thread receives and verifies them outside the
// lock (the background channel and its request ring are its own), claims
// a slice of still-lazy pages under it, copies them without it, and takes
// it again to account for them (unlocked_copies.hpp says why that cannot
// race the uffd events that change the lazy maps).
#pragma once

#include "fault_state.hpp"
#include "unlocked_copies.hpp"

#include <array>
#include <cstdint>
#include <span>

namespace ferry::lazy {

// Handles every fault reply `ch` has. Under the state lock. Throws on a
// reply that does not match its request, a source that cannot serve a page,
// or a page corrupt twice.
void drain_fault_replies(fault_state& s, page_channel& ch);

// After a UFFDIO_COPY into `p` that ended with `result`, [at, at +
// bytes_left) not yet installed: true if installing may go on (done, or one
// page found present). Otherwise handles the outcome (wakes the range on a
// retry, drops a process that is gone, throws on anything else), and the
// caller installs no more of its range. Under the state lock.
bool copy_may_go_on(fault_state& s, lazy_process& p, uffd::outcome result, int err, uint64_t at,
                    uint64_t bytes_left);

// Under the state lock, after copy_without_lock: takes the pages of `run`
// that landed (its copied pages, and a page found present) off `p`'s lazy
// map, counting those still lazy in `counter` (pages_forked for a forked
// child). Returns the pages landed.
uint32_t take_landed(fault_state& s, lazy_process& p, const unlocked_run& run, uint64_t& counter);

// Throws unless `reply` answers `req` with pages.
void check_reply(const outstanding_request& req, const incoming_reply& reply);

// Checks pages [req.verified, upto) against their checksums, stopping at the
// first bad one (req.bad_from). Touches only `req`: no lock needed.
void verify_pages(outstanding_request& req, const incoming_reply& reply, uint32_t upto) noexcept;

// Verified pages of a stream's oldest background request, claimed under the
// state lock and copied without it (unlocked_copies.hpp).
struct background_slice {
    static constexpr uint32_t max_pages = 256;
    std::array<unlocked_run, 32> runs;
    size_t count = 0;
    uint32_t upto = 0; // the request's pages before this are claimed or skipped
    [[nodiscard]] std::span<const unlocked_run> claimed() const noexcept {
        return {runs.data(), count};
    }
    [[nodiscard]] std::span<unlocked_run> claimed() noexcept { return {runs.data(), count}; }
};

// Under the state lock: claims the verified pages of the stream's oldest
// request from req.consumed on that are still lazy, as runs, and begins
// the process's unlocked copies when there are any (copy_without_lock
// ends them). Pages no longer lazy are skipped.
void claim_background_slice(fault_state& s, background_stream& st, const incoming_reply& reply,
                            background_slice& slice);

// Under the state lock, after the copies: takes what landed off the lazy
// map and accounts for it; the request's pages after a copy that stopped
// short go next turn. Once the reply is complete and installed, finishes
// the request (and refetches a corrupt tail). True when it was finished.
bool commit_background_slice(fault_state& s, background_stream& st, const incoming_reply& reply,
                             const background_slice& slice);

} // namespace ferry::lazy
