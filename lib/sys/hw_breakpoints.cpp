#include "sys/hw_breakpoints.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace ferry::hw_breakpoints {

namespace {

// Where the breakpoint goes. noinline and not static-folded, so the child
// really executes this address; it stops itself, so a breakpoint that does
// not fire is seen as a SIGSTOP stop here rather than a SIGTRAP at entry.
[[gnu::noinline]] void breakpoint_target() {
    ::raise(SIGSTOP);
    ::_exit(1);
}

// waitpid, retried on EINTR; -1 on any other failure.
int wait_stop(pid_t child) {
    int status = 0;
    while (::waitpid(child, &status, 0) < 0) {
        if (errno != EINTR)
            return -1;
    }
    return status;
}

void end_child(pid_t child) {
    ::kill(child, SIGKILL);
    (void)wait_stop(child);
}

} // namespace

probe_outcome probe() {
#if defined(__x86_64__)
    const pid_t child = ::fork();
    if (child < 0)
        return probe_outcome::probe_failed;
    if (child == 0) {
        // Async-signal-safe calls only: the parent may have threads.
        ::alarm(10); // a stop we do not expect ends the probe, not the caller
        if (::ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) != 0)
            ::_exit(2);
        ::raise(SIGSTOP);
        breakpoint_target();
        ::_exit(1);
    }
    int status = wait_stop(child);
    if (status < 0 || !WIFSTOPPED(status) || WSTOPSIG(status) != SIGSTOP) {
        end_child(child);
        return probe_outcome::probe_failed;
    }
    // The same registers compel uses: DR0 = address, DR7 = local enable of
    // DR0 (an execute breakpoint of length 1).
    const auto target = reinterpret_cast<void*>(&breakpoint_target);
    if (::ptrace(PTRACE_POKEUSER, child, offsetof(struct user, u_debugreg[0]), target) != 0 ||
        ::ptrace(PTRACE_POKEUSER, child, offsetof(struct user, u_debugreg[7]), 1L) != 0 ||
        ::ptrace(PTRACE_CONT, child, nullptr, nullptr) != 0) {
        // The kernel refused the debug registers: CRIU would fail, not hang.
        end_child(child);
        return probe_outcome::did_not_trap;
    }
    status = wait_stop(child);
    end_child(child);
    if (status < 0 || !WIFSTOPPED(status))
        return probe_outcome::probe_failed;
    return WSTOPSIG(status) == SIGTRAP ? probe_outcome::trapped : probe_outcome::did_not_trap;
#else
    return probe_outcome::probe_failed; // compel uses breakpoints on x86 only here
#endif
}

const char* to_string(probe_outcome o) noexcept {
    switch (o) {
    case probe_outcome::trapped:
        return "hardware breakpoints trap";
    case probe_outcome::did_not_trap:
        return "hardware breakpoints do not trap";
    case probe_outcome::probe_failed:
        return "the breakpoint probe could not run";
    }
    return "?";
}

criu_stop_method decide(probe_outcome outcome, bool forced_off,
                        const std::optional<std::string>& existing_criu_fault) {
    criu_stop_method m;
    const bool fallback = forced_off || outcome != probe_outcome::trapped;
    if (!fallback) {
        m.reason = "hardware breakpoints";
        return m;
    }
    m.use_breakpoints = false;
    const std::string why = forced_off ? "forced" : to_string(outcome);
    if (existing_criu_fault && *existing_criu_fault != criu_no_breakpoints_fault) {
        // CRIU holds one fault at a time: the operator's wins. A patched
        // CRIU still falls back by its own probe; an unpatched one may hang.
        m.use_breakpoints = true;
        m.reason = fmt::format("hardware breakpoints (CRIU_FAULT={} is set, so Ferry cannot "
                               "ask for the syscall-stepping fallback: {})",
                               *existing_criu_fault, why);
        return m;
    }
    m.criu_env = fmt::format("CRIU_FAULT={}", criu_no_breakpoints_fault);
    m.reason = fmt::format("syscall stepping ({})", why);
    return m;
}

} // namespace ferry::hw_breakpoints
