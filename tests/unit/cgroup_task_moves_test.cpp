// Which cgroup mount favordynmods goes on, and with which options
// (lib/sys/cgroup_task_moves.hpp): a reconfigure sets every option anew, so
// the plan must carry the mount's own (nsdelegate, the memory options).
#include "sys/cgroup_task_moves.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace ferry;
using strings = std::vector<std::string>;

namespace {

std::string line(int id, const std::string& point, const std::string& fstype,
                 const std::string& super) {
    return std::to_string(id) + " 1 0:" + std::to_string(id) + " / " + point +
           " rw,nosuid,nodev,noexec,relatime shared:" + std::to_string(id) + " - " + fstype + " " +
           fstype + " " + super + "\n";
}

cgroup_task_moves::plan plan_of(const std::string& mountinfo) {
    return cgroup_task_moves::plan_fast_moves(parse_mountinfo(mountinfo));
}

const std::string proc = line(20, "/proc", "proc", "rw");
const std::string v1 = line(32, "/sys/fs/cgroup/systemd", "cgroup", "rw,xattr,name=systemd") +
                       line(33, "/sys/fs/cgroup/memory", "cgroup", "rw,memory");

} // namespace

TEST_CASE("favordynmods goes on cgroup2 with the options it already has", "[cgroup_task_moves]") {
    SECTION("a pure cgroup2 host, as systemd mounts it") {
        const auto p = plan_of(
            proc + line(30, "/sys/fs/cgroup", "cgroup2", "rw,nsdelegate,memory_recursiveprot"));
        CHECK_FALSE(p.already_fast);
        REQUIRE(p.target);
        CHECK(p.target->point == "/sys/fs/cgroup");
        CHECK(p.options == strings{"nsdelegate", "memory_recursiveprot", "favordynmods"});
    }
    SECTION("the hybrid layout: cgroup2 is chosen over the v1 hierarchies listed first") {
        const auto p = plan_of(proc + v1 + line(35, "/sys/fs/cgroup/unified", "cgroup2", "rw"));
        REQUIRE(p.target);
        CHECK(p.target->point == "/sys/fs/cgroup/unified");
        CHECK(p.options == strings{"favordynmods"});
    }
    SECTION("v1 only: the first hierarchy, its name= kept") {
        const auto p = plan_of(proc + v1);
        REQUIRE(p.target);
        CHECK(p.target->point == "/sys/fs/cgroup/systemd");
        CHECK(p.options == strings{"xattr", "name=systemd", "favordynmods"});
    }
}

TEST_CASE("any cgroup mount with favordynmods makes every move fast", "[cgroup_task_moves]") {
    SECTION("on cgroup2") {
        const auto p =
            plan_of(proc + v1 + line(35, "/sys/fs/cgroup/unified", "cgroup2", "rw,favordynmods"));
        CHECK(p.already_fast);
        CHECK_FALSE(p.target);
    }
    SECTION("on one v1 hierarchy only") {
        const auto p =
            plan_of(proc + line(33, "/sys/fs/cgroup/memory", "cgroup", "rw,favordynmods,memory") +
                    line(35, "/sys/fs/cgroup/unified", "cgroup2", "rw"));
        CHECK(p.already_fast);
    }
    SECTION("a filesystem of another type with that word is not a cgroup") {
        const auto p = plan_of(proc + line(40, "/mnt", "tmpfs", "rw,favordynmods") +
                               line(35, "/sys/fs/cgroup/unified", "cgroup2", "rw"));
        CHECK_FALSE(p.already_fast);
        REQUIRE(p.target);
    }
}

TEST_CASE("no cgroup mount: nothing to reconfigure, and apply says so", "[cgroup_task_moves]") {
    const auto p = plan_of(proc);
    CHECK_FALSE(p.already_fast);
    CHECK_FALSE(p.target);
    CHECK_THROWS_WITH(cgroup_task_moves::apply(p), Catch::Matchers::Contains("no cgroup"));
}
