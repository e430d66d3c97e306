#include "sys/subprocess.hpp"

#include "core/error.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <cstring>
#include <fstream>
#include <sstream>

namespace ferry {

namespace {

int pidfd_open(pid_t pid) {
    return int(::syscall(SYS_pidfd_open, pid, 0));
}

std::vector<char*> c_strings(const std::vector<std::string>& v) {
    std::vector<char*> out;
    for (const auto& s : v)
        out.push_back(const_cast<char*>(s.c_str()));
    out.push_back(nullptr);
    return out;
}

extern "C" char** environ;

// How long a child killed with SIGKILL is waited for: one stuck in the
// kernel (a hung mount, a frozen cgroup) may never end, and is left then
// rather than hanging its caller.
constexpr auto kill_reap_wait = std::chrono::seconds(5);

// The wait status of `pid` once it ends within `timeout`, watched through
// its `pidfd`; nullopt if it has not (it is not reaped then).
std::optional<int> reap_within(pid_t pid, int pidfd, std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        int status = 0;
        if (::waitpid(pid, &status, WNOHANG) == pid)
            return status;
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            until - std::chrono::steady_clock::now());
        if (left.count() <= 0)
            return std::nullopt;
        pollfd p{pidfd, POLLIN, 0};
        if (::poll(&p, 1, int(left.count())) < 0 && errno != EINTR)
            return std::nullopt;
    }
}

// In the forked child: stdout/stderr to the given fds (-1: inherited),
// stdin from `in_fd` (-1: /dev/null), no blocked signals, then exec of
// `program` (nullptr: argv[0], searched in PATH). Async-signal-safe calls
// only: the parent may have threads.
[[noreturn]] void exec_child(int out_fd, int err_fd, char* const* argv, char* const* envp,
                             const int* keep = nullptr, size_t n_keep = 0, bool own_group = false,
                             int in_fd = -1, const char* program = nullptr) {
    if (own_group)
        ::setpgid(0, 0);
    for (size_t i = 0; i < n_keep; i++)
        ::fcntl(keep[i], F_SETFD, 0);
    if (out_fd >= 0)
        ::dup2(out_fd, STDOUT_FILENO);
    if (err_fd >= 0)
        ::dup2(err_fd, STDERR_FILENO);
    const int in = in_fd >= 0 ? in_fd : ::open("/dev/null", O_RDONLY);
    if (in >= 0)
        ::dup2(in, STDIN_FILENO);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (program)
        ::execve(program, argv, envp);
    else
        ::execvpe(argv[0], argv, envp);
    ::_exit(127);
}

} // namespace

child_process::child_process(child_process&& o) noexcept
    : _pid(std::exchange(o._pid, -1)), _pidfd(std::move(o._pidfd)), _log(std::move(o._log)) {}

child_process& child_process::operator=(child_process&& o) noexcept {
    if (this != &o) {
        this->~child_process();
        _pid = std::exchange(o._pid, -1);
        _pidfd = std::move(o._pidfd);
        _log = std::move(o._log);
    }
    return *this;
}

child_process::~child_process() {
    if (_pid > 0) {
        ::kill(_pid, SIGKILL);
        (void)reap_within(_pid, _pidfd.get(), kill_reap_wait);
    }
}

child_process child_process::spawn(const std::vector<std::string>& argv, const options& o) {
    // Everything the child needs is built before fork.
    std::vector<std::string> env(o.extra_env);
    for (char** e = environ; *e; e++)
        env.emplace_back(*e);
    auto args = c_strings(argv);
    auto envp = c_strings(env);
    unique_fd out;
    if (!o.log.empty()) {
        out.reset(::open(o.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
        if (!out)
            throw sys_error("open " + o.log.string());
    }
    const pid_t pid = ::fork();
    if (pid < 0)
        throw sys_error("fork");
    if (pid == 0)
        exec_child(out.get(), out.get(), args.data(), envp.data(), o.keep_fds.data(),
                   o.keep_fds.size(), o.own_process_group);
    child_process c;
    c._pid = pid;
    c._pidfd.reset(pidfd_open(pid));
    c._log = o.log;
    if (!c._pidfd)
        throw sys_error("pidfd_open");
    return c;
}

child_process child_process::spawn(const std::vector<std::string>& argv,
                                   const std::filesystem::path& log,
                                   const std::vector<std::string>& extra_env) {
    options o;
    o.log = log;
    o.extra_env = extra_env;
    return spawn(argv, o);
}

std::optional<int> child_process::wait_for(std::chrono::milliseconds timeout) {
    if (_pid <= 0)
        throw error("waiting for a child that was already reaped");
    pollfd p{_pidfd.get(), POLLIN, 0};
    const int n = ::poll(&p, 1, int(timeout.count()));
    if (n < 0 && errno != EINTR)
        throw sys_error("poll pidfd");
    if (n <= 0)
        return std::nullopt;
    int status = 0;
    if (::waitpid(_pid, &status, 0) != _pid)
        throw sys_error("waitpid");
    _pid = -1;
    _pidfd.reset();
    return status;
}

void child_process::signal(int sig) noexcept {
    if (_pid > 0)
        ::kill(_pid, sig);
}

std::string child_process::log_tail(size_t max_bytes) const {
    std::ifstream in(_log, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string s = ss.str();
    if (s.size() > max_bytes)
        s = "..." + s.substr(s.size() - max_bytes);
    while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
        s.pop_back();
    return s;
}

std::string describe_wait_status(int status) {
    if (WIFEXITED(status))
        return fmt::format("exit status {}", WEXITSTATUS(status));
    if (WIFSIGNALED(status))
        return fmt::format("killed by signal {} ({}){}", WTERMSIG(status),
                           ::strsignal(WTERMSIG(status)), WCOREDUMP(status) ? ", core dumped" : "");
    return fmt::format("wait status {:#x}", status);
}

std::string run_capture(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                        const command_input& input) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) || ::pipe2(err, O_CLOEXEC))
        throw sys_error("pipe");
    unique_fd out_r(out[0]), out_w(out[1]), err_r(err[0]), err_w(err[1]);
    // The input goes into the pipe whole before the fork: the child can
    // never block the parent on it.
    unique_fd in_r;
    if (!input.stdin_text.empty()) {
        int in[2];
        if (::pipe2(in, O_CLOEXEC))
            throw sys_error("pipe");
        in_r.reset(in[0]);
        unique_fd in_w(in[1]);
        if (input.stdin_text.size() > 65536 ||
            ::write(in_w.get(), input.stdin_text.data(), input.stdin_text.size()) !=
                ssize_t(input.stdin_text.size()))
            throw error(fmt::format("cannot give '{}' its {} bytes of input", argv[0],
                                    input.stdin_text.size()));
    }
    auto args = c_strings(argv);
    auto env = input.env ? c_strings(*input.env) : std::vector<char*>();
    const pid_t pid = ::fork();
    if (pid < 0)
        throw sys_error("fork");
    if (pid == 0)
        exec_child(out_w.get(), err_w.get(), args.data(), input.env ? env.data() : environ, nullptr,
                   0, false, in_r.get(), input.program.empty() ? nullptr : input.program.c_str());
    const unique_fd pidfd(pidfd_open(pid)); // -1 (an old kernel): reap_within sleeps instead
    in_r.reset();
    out_w.reset();
    err_w.reset();
    std::string stdout_text, stderr_text;
    const auto until = std::chrono::steady_clock::now() + timeout;
    bool timed_out = false;
    for (int open_fds = 2; open_fds > 0;) {
        pollfd fds[2] = {{out_r.get(), POLLIN, 0}, {err_r.get(), POLLIN, 0}};
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            until - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            timed_out = true;
            break;
        }
        if (::poll(fds, 2, int(left.count())) < 0 && errno != EINTR)
            throw sys_error("poll");
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !fds[i].revents)
                continue;
            char buf[4096];
            const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
            if (n <= 0) {
                (i == 0 ? out_r : err_r).reset();
                open_fds--;
                continue;
            }
            (i == 0 ? stdout_text : stderr_text).append(buf, size_t(n));
        }
    }
    // Both pipes closed: the child ends now, unless it closed them and went
    // on (a hook that sends its output elsewhere), which the bound covers.
    std::optional<int> ended;
    if (!timed_out) {
        ended = reap_within(pid, pidfd.get(),
                            std::chrono::duration_cast<std::chrono::milliseconds>(
                                until - std::chrono::steady_clock::now()));
        timed_out = !ended;
    }
    if (timed_out) {
        ::kill(pid, SIGKILL);
        (void)reap_within(pid, pidfd.get(), kill_reap_wait);
    }
    const int status = ended.value_or(0);
    while (!stderr_text.empty() && stderr_text.back() == '\n')
        stderr_text.pop_back();
    if (timed_out)
        throw error(fmt::format("'{}' did not finish within {} ms", argv[0], timeout.count()));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        throw error(fmt::format("'{} {}' failed ({}): {}", argv[0], argv.size() > 1 ? argv[1] : "",
                                describe_wait_status(status), stderr_text));
    return stdout_text;
}

} // namespace ferry
