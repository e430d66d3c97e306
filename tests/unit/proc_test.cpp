// Reading /proc files of processes that may exit at any moment
// (lib/sys/proc.hpp).
#include "sys/proc.hpp"

#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace {

// A child that waits to be killed; its command line is `sleep 600`.
pid_t sleeping_child() {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        ::execlp("sleep", "sleep", "600", static_cast<char*>(nullptr));
        ::_exit(127);
    }
    // Until its exec: the command line is the test binary's before it.
    for (int i = 0; i < 500 && ferry::proc::cmdline(pid).rfind("sleep", 0) != 0; i++)
        ::usleep(2000);
    return pid;
}

void end(pid_t pid) {
    ::kill(pid, SIGKILL);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
}

} // namespace

TEST_CASE("a process's command line, with its NULs", "[proc]") {
    const pid_t pid = sleeping_child();
    CHECK(ferry::proc::cmdline(pid) == std::string("sleep\0"
                                                   "600\0",
                                                   10));
    end(pid);
    CHECK(ferry::proc::cmdline(pid).empty()); // gone
}

TEST_CASE("a /proc file whose process exits after its open reads as empty, not a throw", "[proc]") {
    const pid_t pid = sleeping_child();
    std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
    REQUIRE(in.is_open());
    end(pid);
    // The read now fails with ESRCH, which the stream buffer throws.
    std::string text = "before";
    REQUIRE_NOTHROW(text = ferry::proc::rest_of(in));
    CHECK(text.empty());
}
