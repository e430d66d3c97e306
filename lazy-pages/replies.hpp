// Page replies: checked against their request, verified page by page, and
// installed with UFFDIO_COPY (replies.cpp). Under the state lock.
#pragma once

#include "fault_state.hpp"

#include <atomic>
#include <cstddef>

namespace ferry::lazy {

// Handles what `ch` has for requests of `kind`, doing about `budget` bytes
// of work. Background data gives up as soon as a handler waits for the lock
// (`handlers_waiting`). Throws on a reply that does not match its request, a
// source that cannot serve a page, or a page corrupt twice.
void drain_channel(fault_state& s, page_channel& ch, request_kind kind, size_t budget,
                   const std::atomic<uint32_t>& handlers_waiting);

} // namespace ferry::lazy
