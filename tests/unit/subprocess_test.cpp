// Children are waited for within bounds: a command that closes its output
// and runs on, or a child the caller drops, does not hold the caller.
#include "sys/subprocess.hpp"

#include <catch2/catch.hpp>
#include <signal.h>

#include <chrono>
#include <future>
#include <string>

using namespace ferry;
using namespace std::chrono_literals;

TEST_CASE("run_capture returns a command's output and fails on its status", "[subprocess]") {
    CHECK(run_capture({"sh", "-c", "echo out; echo err >&2"}, 10s) == "out\n");
    try {
        (void)run_capture({"sh", "-c", "echo why >&2; exit 3"}, 10s);
        FAIL("a failing command passed");
    } catch (const std::exception& e) {
        CHECK(std::string(e.what()).find("exit status 3") != std::string::npos);
        CHECK(std::string(e.what()).find("why") != std::string::npos);
    }
}

TEST_CASE("a command that closes its output and runs on is ended at its bound", "[subprocess]") {
    // Before, run_capture waited for it after the pipes closed, unbounded:
    // 60 s here, against a bound of a quarter second.
    auto r = std::async(std::launch::async, [] {
        return run_capture({"sh", "-c", "exec >/dev/null 2>&1; sleep 60"}, 250ms);
    });
    REQUIRE(r.wait_for(30s) == std::future_status::ready);
    try {
        (void)r.get();
        FAIL("a command still running passed");
    } catch (const std::exception& e) {
        CHECK(std::string(e.what()).find("did not finish within 250 ms") != std::string::npos);
    }
}

TEST_CASE("a dropped child is killed and reaped", "[subprocess]") {
    pid_t pid = 0;
    {
        auto c = child_process::spawn({"sleep", "60"}, std::filesystem::path());
        pid = c.pid();
        REQUIRE(pid > 0);
        CHECK(::kill(pid, 0) == 0);
    }
    CHECK(::kill(pid, 0) == -1); // reaped: no zombie left under that pid
}
