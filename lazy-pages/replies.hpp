// Page replies: checked against their request, verified page by page, and
// installed with UFFDIO_COPY (replies.cpp).
//
// Fault replies are handled whole under the state lock. Background replies
// are split: the background thread receives and verifies them outside the
// lock (the background channel and its request ring are its own), and only
// the install, which must not race the uffd events that change the lazy
// maps, takes the lock, a slice at a time.
#pragma once

#include "fault_state.hpp"

#include <atomic>
#include <cstdint>

namespace ferry::lazy {

// Handles every fault reply `ch` has. Under the state lock. Throws on a
// reply that does not match its request, a source that cannot serve a page,
// or a page corrupt twice.
void drain_fault_replies(fault_state& s, page_channel& ch);

// Throws unless `reply` answers `req` with pages.
void check_reply(const outstanding_request& req, const incoming_reply& reply);

// Checks pages [req.verified, upto) against their checksums, stopping at the
// first bad one (req.bad_from). Touches only `req`: no lock needed.
void verify_pages(outstanding_request& req, const incoming_reply& reply, uint32_t upto) noexcept;

// Installs the verified pages of a stream's oldest background request, a slice of
// cfg.install_batch_pages at a time, leaving the rest to the next call as
// soon as a handler waits for the lock. Once the reply is complete and
// installed, finishes the request (and refetches a corrupt tail). Under the
// state lock; true when the request was finished.
bool install_background_reply(fault_state& s, background_stream& st, const incoming_reply& reply,
                              const std::atomic<uint32_t>& handlers_waiting);

} // namespace ferry::lazy
