// release_workload against a stand-in for a stuck CRIU: a process named
// "criu" that holds a sleeping task in a ptrace stop and then stops itself,
// as a CRIU waiting forever for a breakpoint would sit.
#include "criu/workload_release.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>

using namespace ferry;
namespace fs = std::filesystem;

namespace {

const std::string id = "0badc0de0badc0de0badc0de0badc0de";

struct stuck_tracer {
    fs::path dir;
    pid_t tracee = -1, tracer = -1;

    stuck_tracer() {
        char t[] = "/tmp/ferry-release-XXXXXX";
        REQUIRE(::mkdtemp(t));
        dir = t;
        fs::create_directories(dir / id);
        tracee = ::fork();
        REQUIRE(tracee >= 0);
        if (tracee == 0) {
            for (;;)
                ::pause();
        }
        int ready[2];
        REQUIRE(::pipe(ready) == 0);
        tracer = ::fork();
        REQUIRE(tracer >= 0);
        if (tracer == 0) {
            // As CRIU does: seize, interrupt, wait for the stop; its log is
            // open in the migration's directory. Then it gets stuck.
            ::prctl(PR_SET_NAME, "criu");
            const int log = ::open((dir / id / "dump.log").c_str(), O_CREAT | O_WRONLY, 0600);
            if (log < 0 || ::ptrace(PTRACE_SEIZE, tracee, nullptr, nullptr) != 0 ||
                ::ptrace(PTRACE_INTERRUPT, tracee, nullptr, nullptr) != 0)
                ::_exit(1);
            int st = 0;
            if (::waitpid(tracee, &st, __WALL) != tracee)
                ::_exit(1);
            (void)!::write(ready[1], "x", 1);
            ::raise(SIGSTOP);
            ::_exit(0);
        }
        ::close(ready[1]);
        char c = 0;
        REQUIRE(::read(ready[0], &c, 1) == 1);
        ::close(ready[0]);
    }

    ~stuck_tracer() {
        for (const pid_t p : {tracer, tracee}) {
            ::kill(p, SIGKILL);
            ::waitpid(p, nullptr, __WALL);
        }
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
};

} // namespace

namespace {

// Releases the stand-in's tracee as `migration` would, within `bound`.
criu::release_result release(const stuck_tracer& s, const std::string& migration, bool end,
                             std::chrono::milliseconds bound,
                             std::function<void()> after_kill = {}) {
    criu::release_request r;
    r.root = s.tracee;
    r.migration_id = migration;
    r.end_workload = end;
    r.bound = bound;
    r.after_criu_killed = std::move(after_kill);
    return criu::release_workload(r);
}

} // namespace

TEST_CASE("a stuck CRIU is found by its migration and killed; its tracee runs again", "[release]") {
    stuck_tracer s;
    const auto before = criu::inspect_workload(s.tracee);
    REQUIRE_FALSE(before.running());
    CHECK(before.describe_stuck().find("traced by") != std::string::npos);
    const auto found = criu::find_migration_criu(id);
    REQUIRE(found.size() == 1);
    CHECK(found[0] == s.tracer);
    CHECK(criu::find_migration_criu("1111111111111111").empty());

    bool hook_ran = false;
    const auto res = release(s, id, false, std::chrono::seconds(10), [&] { hook_ran = true; });
    CHECK(res.ok);
    CHECK(hook_ran);
    REQUIRE(res.killed_criu.size() == 1);
    CHECK(res.killed_criu[0] == s.tracer);
    CHECK(res.final_state.running());
    CHECK(res.summary.find("the workload runs") != std::string::npos);
}

TEST_CASE("after the commit, the stuck source is ended instead", "[release]") {
    stuck_tracer s;
    const auto res = release(s, id, true, std::chrono::seconds(10));
    CHECK(res.ok);
    CHECK(res.final_state.gone());
    CHECK(res.summary.find("is gone") != std::string::npos);
}

TEST_CASE("a workload that stays held is reported with its state, within the bound", "[release]") {
    stuck_tracer s;
    // Nobody is named as this migration's CRIU: nothing is killed, and the
    // tracee stays in its ptrace stop.
    const auto t0 = std::chrono::steady_clock::now();
    const auto res = release(s, "2222222222222222", false, std::chrono::milliseconds(300));
    CHECK_FALSE(res.ok);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
    CHECK(res.summary.find("does not run") != std::string::npos);
    CHECK(res.summary.find("traced by " + std::to_string(s.tracer)) != std::string::npos);
}
