// The idle cpu cgroup that background threads join
// (lib/sys/idle_cpu_group.hpp): found under the process's own cpu cgroup
// from /proc, marked idle, joined and left by thread id; on this host's
// real hierarchy when it has one.
#include "sys/idle_cpu_group.hpp"

#include "temp_dir.hpp"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace fs = std::filesystem;
using namespace ferry;
using Catch::Matchers::Contains;

namespace {

void put_file(const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
}

std::string file_text(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

std::string cgroup_mount(int id, const std::string& root, const std::string& point,
                         const std::string& super) {
    return std::to_string(id) + " 31 0:" + std::to_string(id) + " " + root + " " + point +
           " rw,relatime shared:9 - cgroup cgroup " + super + "\n";
}

// A fake host: procfs under `proc`, a cpu hierarchy mounted at `cpu`
// showing the hierarchy from `mount_root` down.
struct fake_host {
    test::temp_dir proc, cpu;
    fake_host(const std::string& own, const std::string& mount_root) {
        put_file(proc.path / "self/cgroup", "4:memory:/x\n2:cpu,cpuacct:" + own + "\n0::/\n");
        put_file(proc.path / "self/mountinfo",
                 cgroup_mount(33, "/", "/sys/fs/cgroup/memory", "rw,memory") +
                     cgroup_mount(34, mount_root, cpu.path.string(), "rw,cpuacct,cpu"));
    }
};

} // namespace

TEST_CASE("the group is made at the top of the cpu hierarchy, marked idle, and joined by "
          "thread id; threads go back to the process's own cgroup",
          "[idle_cpu_group]") {
    // A service's group: an idle group under it would yield to its own
    // threads only, so the group goes to the top, beside the service's.
    fake_host host("/system.slice/pagesrv.service", "/");
    const fs::path home = host.cpu.path / "system.slice/pagesrv.service";
    const fs::path group = host.cpu.path / "ferry-idle";
    put_file(home / "tasks", "");
    // A real hierarchy fills a new group with its files; here they are made first.
    put_file(group / "cpu.idle", "0");
    put_file(group / "tasks", "");

    const auto g = proc::idle_cpu_group::open("ferry-idle", host.proc.path);
    INFO(g.why_not());
    REQUIRE(g.usable());
    CHECK(g.dir() == group);
    CHECK(file_text(group / "cpu.idle") == "1");
    CHECK_FALSE(fs::exists(home / "ferry-idle"));

    REQUIRE(g.join(4242));
    CHECK(file_text(group / "tasks") == "4242");
    REQUIRE(g.leave(4242));
    CHECK(file_text(home / "tasks") == "4242");
    REQUIRE(g.join()); // the caller: its own thread id
    CHECK(file_text(group / "tasks") == "4242" + std::to_string(::gettid()));
}

TEST_CASE("a thread's cpu cgroup is read from thread-self", "[idle_cpu_group]") {
    test::temp_dir proc;
    put_file(proc.path / "thread-self/cgroup", "4:memory:/x\n2:cpu,cpuacct:/a/ferry-idle\n0::/\n");
    CHECK(proc::calling_thread_cpu_cgroup(proc.path) == "/a/ferry-idle");
    put_file(proc.path / "thread-self/cgroup", "0::/a\n");
    CHECK(proc::calling_thread_cpu_cgroup(proc.path).empty());
}

TEST_CASE("a hierarchy mounted from below its root is followed", "[idle_cpu_group]") {
    // A container's namespace may show only its own part of the hierarchy.
    // The group goes to the top it shows, and threads come back to inner.
    fake_host host("/docker/abc/inner", "/docker/abc");
    put_file(host.cpu.path / "inner/tasks", "");
    put_file(host.cpu.path / "g/cpu.idle", "0");
    put_file(host.cpu.path / "g/tasks", "");
    const auto g = proc::idle_cpu_group::open("g", host.proc.path);
    INFO(g.why_not());
    REQUIRE(g.usable());
    CHECK(g.dir() == host.cpu.path / "g");
    REQUIRE(g.leave(7));
    CHECK(file_text(host.cpu.path / "inner/tasks") == "7");
}

TEST_CASE("where there can be no idle group, it says why and leaves nothing behind",
          "[idle_cpu_group]") {
    SECTION("cgroup v2 only") {
        test::temp_dir proc;
        put_file(proc.path / "self/cgroup", "0::/system.slice/pagesrv.service\n");
        put_file(proc.path / "self/mountinfo", "");
        const auto g = proc::idle_cpu_group::open("ferry-idle", proc.path);
        CHECK_FALSE(g.usable());
        CHECK_THAT(g.why_not(), Contains("cgroup v2"));
        CHECK_FALSE(g.join());
    }
    SECTION("a kernel without cpu.idle") {
        fake_host host("/", "/");
        put_file(host.cpu.path / "tasks", "");
        const auto g = proc::idle_cpu_group::open("ferry-idle", host.proc.path);
        CHECK_FALSE(g.usable());
        CHECK_THAT(g.why_not(), Contains("cpu.idle"));
        CHECK_FALSE(fs::exists(host.cpu.path / "ferry-idle"));
    }
    SECTION("a cgroup the mount does not show") {
        fake_host host("/elsewhere", "/docker/abc");
        const auto g = proc::idle_cpu_group::open("ferry-idle", host.proc.path);
        CHECK_FALSE(g.usable());
        CHECK_THAT(g.why_not(), Contains("not mounted"));
    }
}

TEST_CASE("on this host's cpu hierarchy a thread joins the idle group and leaves it",
          "[idle_cpu_group]") {
    const std::string name = "ferry-test-" + std::to_string(::getpid());
    const auto g = proc::idle_cpu_group::open(name);
    if (!g.usable()) {
        WARN("no idle cpu group on this host: " << g.why_not());
        return;
    }
    CHECK(file_text(g.dir() / "cpu.idle") == "1\n");
    std::string inside, after, seen_inside, seen_after;
    std::thread t([&] {
        const auto own = fs::path("/proc/self/task") / std::to_string(::gettid()) / "cgroup";
        if (g.join()) {
            inside = file_text(own);
            seen_inside = proc::calling_thread_cpu_cgroup();
        }
        if (g.leave()) {
            after = file_text(own);
            seen_after = proc::calling_thread_cpu_cgroup();
        }
    });
    t.join();
    CHECK(seen_inside.ends_with("/" + name));
    CHECK(seen_after.find(name) == std::string::npos);
    CHECK_THAT(inside, Contains("/" + name + "\n"));
    CHECK(after.find(name) == std::string::npos);
    CHECK(!after.empty());
    g.remove_if_empty();
    CHECK_FALSE(fs::exists(g.dir()));
}
