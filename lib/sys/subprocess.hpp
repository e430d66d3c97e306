// Child processes Ferry drives: container engines (podman, docker) whose
// commands run for the whole migration, and short queries.
#pragma once

#include "core/unique_fd.hpp"

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace ferry {

class child_process {
  public:
    child_process() = default;
    child_process(child_process&& o) noexcept;
    child_process& operator=(child_process&& o) noexcept;
    child_process(const child_process&) = delete;
    child_process& operator=(const child_process&) = delete;
    // Kills a child still running: every owner must wait for it first.
    ~child_process();

    struct options {
        // stdout and stderr are appended here; empty: inherited.
        std::filesystem::path log;
        // Entries (NAME=VALUE) put before the environment, so they win.
        std::vector<std::string> extra_env;
        // Descriptors the child keeps across exec, at the same numbers.
        std::vector<int> keep_fds;
        // In a process group of its own: a Ctrl-C meant for Ferry does not
        // reach it (CRIU, while its parasite sits in frozen tasks).
        bool own_process_group = false;
    };
    // Starts argv[0] (searched in PATH). Throws std::system_error.
    static child_process spawn(const std::vector<std::string>& argv, const options& o);
    // The same, with stdout and stderr appended to `log`.
    static child_process spawn(const std::vector<std::string>& argv,
                               const std::filesystem::path& log,
                               const std::vector<std::string>& extra_env = {});

    [[nodiscard]] pid_t pid() const noexcept { return _pid; }
    // Readable (POLLIN) once the child has ended; -1 after it was reaped.
    [[nodiscard]] int exit_fd() const noexcept { return _pidfd.get(); }
    [[nodiscard]] bool running() const noexcept { return _pid > 0; }
    // The wait status once the child has ended within `timeout`.
    std::optional<int> wait_for(std::chrono::milliseconds timeout);
    void signal(int sig) noexcept;
    // Forgets a child that must outlive this object (it is never killed).
    void detach() noexcept {
        _pid = -1;
        _pidfd.reset();
    }
    // The last `max_bytes` of the log, for error messages.
    [[nodiscard]] std::string log_tail(size_t max_bytes = 2000) const;
    [[nodiscard]] const std::filesystem::path& log() const noexcept { return _log; }

  private:
    pid_t _pid = -1;
    unique_fd _pidfd;
    std::filesystem::path _log;
};

// "exit status 3", "killed by signal 9".
std::string describe_wait_status(int status);

// What a command run to its end may be given besides its arguments.
struct command_input {
    // The file to run when it is not argv[0] (an OCI hook's path, whose
    // argv[0] says what the program should do); empty: argv[0], searched in
    // PATH.
    std::string program;
    // Its standard input (up to a pipe's buffer, 64 KiB); empty: /dev/null.
    std::string stdin_text;
    // Its whole environment (NAME=VALUE); nothing: this process's.
    std::optional<std::vector<std::string>> env;
};

// Runs a command to its end and returns its stdout; throws ferry::error with
// its stderr when it fails or outlives `timeout`.
std::string run_capture(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                        const command_input& input = {});

} // namespace ferry
