// A thread at SCHED_IDLE or back at SCHED_OTHER: the one switch for the
// threads whose work nothing waits for (background pulls, the pre-copy's
// rounds and staging, the local pass, page-table walks of frozen tasks),
// which any thread that wakes on the host preempts at once.
#pragma once

#include <sys/types.h>

namespace ferry::proc {

// Puts thread `tid` (0: the caller) at SCHED_IDLE (`idle`) or at
// SCHED_OTHER. False, with errno, if the kernel refused; callers treat it
// as best effort.
bool set_idle_policy(bool idle, pid_t tid = 0) noexcept;

} // namespace ferry::proc
