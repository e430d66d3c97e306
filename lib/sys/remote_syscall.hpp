// One system call made by another task, as if it had made it itself: for
// the calls whose result belongs to the caller's process, its memory or its
// fd table (userfaultfd() over another process's memory, then close() of
// the fd that call left there).
//
// The task is seized with ptrace and interrupted, then resumed at a
// `syscall` instruction of its own vDSO (nothing is written to its memory)
// and stopped at that call's exit. Its registers are put back, with the call
// it was in when interrupted set to restart as the kernel would restart it
// (CRIU's compel does the same: a call that cannot restart, a sleep, returns
// EINTR). A container's seccomp filter, which refuses userfaultfd, is
// suspended for the tracee (PTRACE_O_SUSPEND_SECCOMP, as CRIU's dumps do).
// Signals that arrive meanwhile are sent again after the detach.
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstdint>

namespace ferry::proc {

// Task `tid` makes system call `nr` with `args`; its raw result (-errno on
// failure). Throws when the task cannot be made to (it is traced already,
// is stopped, has exited, has no vDSO) or does not stop within `bound`: a
// task in uninterruptible sleep stops only when it wakes, so that wait goes
// on in a thread of its own, which then lets the task go untouched.
[[nodiscard]] long remote_syscall(pid_t tid, long nr, const std::array<uint64_t, 6>& args,
                                  std::chrono::milliseconds bound);

} // namespace ferry::proc
