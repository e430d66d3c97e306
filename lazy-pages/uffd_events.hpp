// The uffd events of one process, read in batches and handled one function
// per event type (uffd_events.cpp). Under the state lock.
#pragma once

#include "fault_state.hpp"

#include <functional>

namespace ferry::lazy {

// Told of every uffd a FORK event creates (the daemon keeps a duplicate,
// so that a dead fault daemon freezes the tasks instead of letting them
// see zero pages).
using uffd_fn = std::function<void(int uffd)>;

// Reads and handles a few batches of `p`'s events, leaving the rest in the
// kernel when the fault ring has no room for the requests they would issue.
void drain_uffd(fault_state& s, lazy_process& p, const uffd_fn& new_uffd);

} // namespace ferry::lazy
