#include "sys/remote_syscall.hpp"

#include "core/error.hpp"
#include "sys/proc.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace ferry::proc {

namespace {

// The kernel's restart codes (include/linux/errno.h), never seen by a task.
constexpr long erestartsys = 512;
constexpr long erestartnointr = 513;
constexpr long erestartnohand = 514;
constexpr long erestart_restartblock = 516;
constexpr int syscall_stop = SIGTRAP | 0x80; // PTRACE_O_TRACESYSGOOD

// A `syscall` instruction (0f 05) in the task's vDSO. Any two such bytes
// do: the CPU decodes from wherever the instruction pointer is set.
uint64_t vdso_syscall(pid_t tid) {
    std::ifstream maps(fmt::format("/proc/{}/maps", tid));
    std::string line;
    uint64_t start = 0, end = 0;
    while (std::getline(maps, line)) {
        if (line.find("[vdso]") == std::string::npos)
            continue;
        std::istringstream in(line);
        char dash = 0;
        in >> std::hex >> start >> dash >> end;
        break;
    }
    if (start == 0 || end <= start || end - start > (1u << 20))
        throw error(fmt::format("task {} has no vDSO to make a system call from", tid));
    std::vector<unsigned char> code(end - start);
    iovec local{code.data(), code.size()};
    iovec remote{reinterpret_cast<void*>(start), code.size()};
    if (::process_vm_readv(tid, &local, 1, &remote, 1, 0) != ssize_t(code.size()))
        throw sys_error(fmt::format("read the vDSO of task {}", tid));
    for (size_t i = 0; i + 1 < code.size(); i++)
        if (code[i] == 0x0f && code[i + 1] == 0x05)
            return start + i;
    throw error(fmt::format("the vDSO of task {} has no syscall instruction", tid));
}

// The call the task was in when it stopped restarts when it runs again, as
// the kernel's own signal path would have done had it not been replaced.
// (The detach's wake-up runs that path again on these registers, which
// restarts it too here; done here, it does not depend on that. After this,
// that path finds no restart code and leaves them be.)
void restart_interrupted_call(user_regs_struct& r) noexcept {
    if (long(r.orig_rax) < 0)
        return; // not in a system call
    switch (-long(r.rax)) {
    case erestartsys:
    case erestartnointr:
    case erestartnohand:
        r.rax = r.orig_rax;
        r.rip -= 2;
        break;
    case erestart_restartblock:
        r.rax = uint64_t(-EINTR);
        break;
    default:
        break;
    }
}

struct injection {
    pid_t tid;
    long nr;
    std::array<uint64_t, 6> args;
    std::mutex mu;
    std::condition_variable changed;
    bool stopped = false;   // the task is in our stop: the call is moments away
    bool finished = false;  // the thread is done, one way or the other
    bool abandoned = false; // the caller stopped waiting: let the task go untouched
    long result = 0;
    std::string failure;
};

class tracee {
  public:
    explicit tracee(injection& j) : _j(j) {}

    // The next stop; signals the task receives meanwhile are kept, to send
    // again after the detach, and it is resumed with `resume` past them.
    // False if the task is gone.
    bool next_stop(int& status, int resume) {
        for (;;) {
            if (::waitpid(_j.tid, &status, __WALL) < 0) {
                if (errno == EINTR)
                    continue;
                return false;
            }
            if (!WIFSTOPPED(status))
                return false; // exited or killed
            const int sig = WSTOPSIG(status);
            if (status >> 16 == PTRACE_EVENT_STOP || sig == syscall_stop)
                return true;
            _signals.push_back(sig); // a signal-delivery stop: held back
            if (::ptrace(__ptrace_request(resume), _j.tid, 0, 0) != 0)
                return false;
        }
    }

    // Lets the task go, and sends it the signals held back meanwhile.
    void detach() noexcept {
        (void)::ptrace(PTRACE_DETACH, _j.tid, 0, 0);
        const pid_t tgid = thread_group(_j.tid);
        for (const int sig : _signals)
            (void)::syscall(SYS_tgkill, tgid, _j.tid, sig);
    }

  private:
    static pid_t thread_group(pid_t tid) noexcept {
        std::ifstream status(fmt::format("/proc/{}/status", tid));
        std::string key;
        pid_t tgid = tid;
        while (status >> key)
            if (key == "Tgid:") {
                status >> tgid;
                break;
            }
        return tgid;
    }
    injection& _j;
    std::vector<int> _signals;
};

// The tracer's whole job, on its own thread (ptrace answers only the thread
// that seized the task).
long inject(injection& j, tracee& t) {
    const uint64_t at = vdso_syscall(j.tid);
    const long options = PTRACE_O_TRACESYSGOOD | PTRACE_O_SUSPEND_SECCOMP;
    if (::ptrace(PTRACE_SEIZE, j.tid, 0, options) != 0) {
        // Without CAP_SYS_ADMIN or CONFIG_CHECKPOINT_RESTORE: a task under
        // seccomp may then refuse the call, which says so in its result.
        if (errno != EINVAL && errno != EPERM)
            throw sys_error(fmt::format("ptrace seize task {}", j.tid));
        if (::ptrace(PTRACE_SEIZE, j.tid, 0, PTRACE_O_TRACESYSGOOD) != 0)
            throw sys_error(fmt::format("ptrace seize task {} (traced already?)", j.tid));
    }
    if (::ptrace(PTRACE_INTERRUPT, j.tid, 0, 0) != 0)
        throw sys_error(fmt::format("ptrace interrupt task {}", j.tid));
    int status = 0;
    if (!t.next_stop(status, PTRACE_CONT))
        throw error(fmt::format("task {} ended before it stopped", j.tid));
    {
        std::lock_guard lock(j.mu);
        if (j.abandoned)
            return -ECANCELED;
        j.stopped = true;
    }
    j.changed.notify_all();
    user_regs_struct saved{};
    if (::ptrace(PTRACE_GETREGS, j.tid, 0, &saved) != 0)
        throw sys_error(fmt::format("ptrace getregs task {}", j.tid));
    user_regs_struct call = saved;
    call.orig_rax = uint64_t(-1); // no restart of the interrupted call on the way out
    call.rax = uint64_t(j.nr);
    call.rdi = j.args[0];
    call.rsi = j.args[1];
    call.rdx = j.args[2];
    call.r10 = j.args[3];
    call.r8 = j.args[4];
    call.r9 = j.args[5];
    call.rip = at;
    if (::ptrace(PTRACE_SETREGS, j.tid, 0, &call) != 0)
        throw sys_error(fmt::format("ptrace setregs task {}", j.tid));
    // From here on the task's registers must be put back, whatever fails.
    std::optional<long> result;
    for (int stop = 0; stop < 2; stop++) { // the call's entry, then its exit
        if (::ptrace(PTRACE_SYSCALL, j.tid, 0, 0) != 0 || !t.next_stop(status, PTRACE_SYSCALL))
            throw error(fmt::format("task {} ended during the call", j.tid));
    }
    user_regs_struct after{};
    if (::ptrace(PTRACE_GETREGS, j.tid, 0, &after) == 0)
        result = long(after.rax);
    restart_interrupted_call(saved);
    if (::ptrace(PTRACE_SETREGS, j.tid, 0, &saved) != 0)
        throw sys_error(fmt::format("ptrace setregs task {} (putting its registers back)", j.tid));
    if (!result)
        throw error(fmt::format("cannot read the result of task {}'s call", j.tid));
    return *result;
}

} // namespace

long remote_syscall(pid_t tid, long nr, const std::array<uint64_t, 6>& args,
                    std::chrono::milliseconds bound) {
    const auto state = proc::state(tid);
    if (!state)
        throw error(fmt::format("no task {}", tid));
    if (*state == 'T' || *state == 't')
        throw error(fmt::format("task {} is stopped or traced", tid));
    if (*state == 'Z' || *state == 'X')
        throw error(fmt::format("task {} has exited", tid));
    auto j = std::make_shared<injection>();
    j->tid = tid;
    j->nr = nr;
    j->args = args;
    std::thread([j] {
        tracee t(*j);
        long result = 0;
        std::string failure;
        try {
            result = inject(*j, t);
        } catch (const std::exception& e) {
            failure = e.what();
        }
        t.detach();
        {
            std::lock_guard lock(j->mu);
            j->result = result;
            j->failure = failure;
            j->finished = true;
        }
        j->changed.notify_all();
    }).detach();
    std::unique_lock lock(j->mu);
    // The stop, then the call: each within the bound.
    if (!j->changed.wait_for(lock, bound, [&] { return j->stopped || j->finished; })) {
        j->abandoned = true;
        throw error(fmt::format("task {} did not stop within {} ms (in uninterruptible sleep?)",
                                tid, bound.count()));
    }
    if (!j->changed.wait_for(lock, bound, [&] { return j->finished; }))
        throw error(
            fmt::format("task {}'s system call did not return within {} ms", tid, bound.count()));
    if (!j->failure.empty())
        throw error(j->failure);
    return j->result;
}

} // namespace ferry::proc
