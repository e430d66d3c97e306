// Whether CRIU may stop its parasite and restorer with x86 hardware
// breakpoints here.
//
// compel catches the final rt_sigreturn of its parasite (dump) and of the
// restorer (restore) with a debug-register breakpoint. On some virtual
// machines the hypervisor never delivers it: the task runs on, traced but
// free, and CRIU waits in wait4 forever. CRIU then has to step through
// syscalls instead (PTRACE_SYSCALL), which CRIU_FAULT=130 (its fault
// injection FI_NO_BREAKPOINTS) forces. Ferry's patched CRIU probes this
// itself (examples/criu-patches/0003); Ferry probes too, so that a CRIU
// without that patch is also told, and so that the fallback can be forced
// for tests on machines where breakpoints work.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ferry::hw_breakpoints {

enum class probe_outcome : uint8_t {
    trapped,      // the child stopped with SIGTRAP on the breakpoint
    did_not_trap, // the child ran past the breakpoint
    probe_failed, // the probe itself could not run (no ptrace, odd stop)
};

// Forks a child, sets DR0/DR7 on a function it then calls, and requires a
// SIGTRAP stop there. Bounded by construction: the child stops itself right
// after the function either way (and an alarm ends it if anything else goes
// wrong). About a millisecond. Not for the fault path.
probe_outcome probe();

[[nodiscard]] const char* to_string(probe_outcome o) noexcept;

// How CRIU should stop tasks at their sigreturn, and what to tell it.
struct criu_stop_method {
    bool use_breakpoints = true;
    // An environment entry for every CRIU Ferry starts, directly or through
    // an engine's runc (the shim exports it): "CRIU_FAULT=130", or empty.
    std::string criu_env;
    std::string reason; // for logs and the migration report
};

// The decision. `forced_off`: the operator (or a test) wants the fallback
// even where breakpoints work. `existing_criu_fault`: CRIU_FAULT as already
// set in the environment, which is never overridden (it holds one fault
// at a time; an operator who set another one knows why).
[[nodiscard]] criu_stop_method decide(probe_outcome outcome, bool forced_off,
                                      const std::optional<std::string>& existing_criu_fault);

inline constexpr const char* criu_no_breakpoints_fault = "130";

} // namespace ferry::hw_breakpoints
