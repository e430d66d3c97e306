#include "core/error.hpp"
#include "migration_record.hpp"
#include "sys/proc.hpp"
#include "temp_dir.hpp"

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

using namespace ferry;
namespace fs = std::filesystem;

using test::temp_dir;

namespace {

records::migration_record sample(const std::string& id, uint64_t started) {
    records::migration_record r;
    r.id = id;
    r.mode = "migrate";
    r.migrator_pid = ::getpid();
    r.source_pid = 4242;
    r.container = "web";
    r.engine = "podman";
    r.destination = "10.0.0.2:7140";
    r.phase = "freezing";
    r.started_unix_ms = started;
    r.phase_since_unix_ms = started + 5;
    r.cgroup_was_frozen = true;
    r.work_dir = "/dev/shm/ferry/" + id;
    return r;
}

} // namespace

TEST_CASE("migration records round-trip and are listed oldest first", "[records]") {
    temp_dir d;
    records::write(sample("bbbb0000", 200), d.path);
    records::write(sample("aaaa0000", 100), d.path);
    auto r = sample("aaaa0000", 100);
    r.phase = "committing";
    r.committed = true;
    records::write(r, d.path); // replaces
    const auto all = records::list(d.path);
    REQUIRE(all.size() == 2);
    CHECK(all[0].id == "aaaa0000");
    CHECK(all[0].phase == "committing");
    CHECK(all[0].committed);
    CHECK(all[0].cgroup_was_frozen);
    CHECK(all[0].container == "web");
    CHECK(all[0].source_pid == 4242);
    CHECK(all[1].id == "bbbb0000");
    CHECK_FALSE(all[1].committed);
}

TEST_CASE("records are found by an unambiguous prefix", "[records]") {
    temp_dir d;
    records::write(sample("abcd1111", 1), d.path);
    records::write(sample("abce2222", 2), d.path);
    CHECK(records::find("abcd", d.path).id == "abcd1111");
    CHECK_THROWS_AS(records::find("abc", d.path), ferry::error);  // two match
    CHECK_THROWS_AS(records::find("ffff", d.path), ferry::error); // none
    records::remove("abcd1111", d.path);
    CHECK(records::list(d.path).size() == 1);
    CHECK_THROWS_AS(records::find("abcd", d.path), ferry::error);
}

TEST_CASE("hostile ids are refused and foreign files ignored", "[records]") {
    temp_dir d;
    CHECK_THROWS_AS(records::write(sample("../etc", 1), d.path), ferry::error);
    CHECK_THROWS_AS(records::write(sample("", 1), d.path), ferry::error);
    fs::create_directories(d.path / "not-an-id");
    fs::create_directories(d.path / "cafe");
    std::ofstream(d.path / "cafe" / "record.json") << "{not json";
    CHECK(records::list(d.path).empty());
    records::remove("..", d.path); // does nothing
    CHECK(fs::exists(d.path));
}

TEST_CASE("a record's migrator is alive only with its own start time", "[records]") {
    auto r = sample("abcd", 1);
    r.migrator_start = 0; // not this process's start time
    CHECK_FALSE(records::migrator_alive(r));
    r.migrator_pid = 0;
    CHECK_FALSE(records::migrator_alive(r));
    r.migrator_pid = ::getpid();
    r.migrator_start = proc::start_time(::getpid());
    CHECK(records::migrator_alive(r));
}

TEST_CASE("a migrator that died but is not reaped yet is not alive", "[records]") {
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0)
        ::_exit(0);
    auto r = sample("dead", 1);
    r.migrator_pid = child;
    // Until it is reaped below, the child stays a zombie with its start time.
    for (int i = 0; i < 200 && proc::state(child) != 'Z'; ++i)
        ::usleep(5000);
    REQUIRE(proc::state(child) == std::optional<char>('Z'));
    r.migrator_start = proc::start_time(child);
    CHECK_FALSE(records::migrator_alive(r));
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
}
