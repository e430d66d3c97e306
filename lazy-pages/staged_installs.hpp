// Installing the pre-copy's staged pages (staged_pages.hpp): no fetch, only
// a UFFDIO_COPY from this process's own memory.
//
// A fault on a staged page is served at once, under the state lock, with
// the page alone first (its copy wakes the thread) and then a few staged
// successors. The local pass takes the rest, as the background does: it
// claims a slice of still-lazy staged pages under the lock, copies it
// without it (unlocked_copies.hpp) and takes the lock again to account for
// it. Meanwhile the background streams skip staged pages, until the local
// pass is over (background_pacer.cpp).
#pragma once

#include "fault_state.hpp"
#include "replies.hpp"

namespace ferry::lazy {

// Under the state lock, for a fault on lazy page `addr` of `p` in `range`:
// true if its page was staged and is now installed (or the fault otherwise
// dealt with), false if it must be fetched.
bool install_staged_fault(fault_state& s, lazy_process& p, uint64_t addr,
                          const address_range& range, uint64_t fault_ns);

// Under the state lock: claims the next slice of staged pages that are
// still lazy and not asked for, in one process, whose unlocked copies it
// begins. Null when no process has any left (the local pass is over).
lazy_process* claim_staged_slice(fault_state& s, background_slice& slice);

// Under the state lock, after copy_without_lock: takes what landed off the
// lazy map and accounts for it.
void commit_staged_slice(fault_state& s, lazy_process& p, const background_slice& slice);

} // namespace ferry::lazy
