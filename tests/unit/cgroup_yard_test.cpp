// Whether CRIU can take the host's cgroup mounts as its yard
// (lib/criu/cgroup_yard.hpp): only if every hierarchy the host lists is
// mounted whole under one directory, with CRIU's name for it.
#include "criu/cgroup_yard.hpp"

#include "temp_dir.hpp"

#include <catch2/catch.hpp>

#include <fstream>

namespace fs = std::filesystem;
using namespace ferry;
using Catch::Matchers::Contains;

namespace {

void write(const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
}

const char* hybrid_cgroup = "9:name=systemd:/\n"
                            "4:memory:/a/b\n"
                            "2:cpu,cpuacct:/\n"
                            "0::/\n";

std::string mount_line(int id, const std::string& root, const std::string& point,
                       const std::string& fstype, const std::string& super) {
    return std::to_string(id) + " 31 0:" + std::to_string(id) + " " + root + " " + point +
           " rw,relatime shared:9 - " + fstype + " " + fstype + " " + super + "\n";
}

} // namespace

TEST_CASE("systemd's hybrid layout is a yard CRIU can use as it is", "[cgroup_yard]") {
    test::temp_dir proc;
    write(proc.path / "self/cgroup", hybrid_cgroup);
    write(proc.path / "self/mountinfo",
          mount_line(31, "/", "/sys/fs/cgroup", "tmpfs", "rw,mode=755") +
              mount_line(32, "/", "/sys/fs/cgroup/systemd", "cgroup", "rw,xattr,name=systemd") +
              mount_line(33, "/", "/sys/fs/cgroup/memory", "cgroup", "rw,memory") +
              // listed cpuacct first, as the kernel may: the same hierarchy
              mount_line(34, "/", "/sys/fs/cgroup/cpu,cpuacct", "cgroup", "rw,cpuacct,cpu") +
              mount_line(35, "/", "/sys/fs/cgroup/unified", "cgroup2", "rw,nsdelegate"));
    const auto y = criu::host_cgroup_yard(proc.path);
    CHECK(y.dir == "/sys/fs/cgroup");
    CHECK(criu::cgroup_yard_config_line(y) == "cgroup-yard /sys/fs/cgroup\n");
}

TEST_CASE("a layout CRIU would not find its way in is left to CRIU's own mounts", "[cgroup_yard]") {
    test::temp_dir proc;
    write(proc.path / "self/cgroup", hybrid_cgroup);
    const auto base = mount_line(32, "/", "/sys/fs/cgroup/systemd", "cgroup", "rw,name=systemd") +
                      mount_line(33, "/", "/sys/fs/cgroup/memory", "cgroup", "rw,memory") +
                      mount_line(34, "/", "/sys/fs/cgroup/cpu,cpuacct", "cgroup", "rw,cpu,cpuacct");
    SECTION("no cgroup2 mount named unified (a pure v2 host mounts it at the top)") {
        write(proc.path / "self/mountinfo",
              base + mount_line(35, "/", "/sys/fs/cgroup", "cgroup2", "rw"));
        const auto y = criu::host_cgroup_yard(proc.path);
        CHECK(y.dir.empty());
        CHECK_THAT(y.why_not, Contains("/sys/fs/cgroup/unified"));
        CHECK(criu::cgroup_yard_config_line(y).empty());
    }
    SECTION("a hierarchy mounted only in part (a container's view of it)") {
        write(proc.path / "self/mountinfo",
              base + mount_line(35, "/a/b", "/sys/fs/cgroup/unified", "cgroup2", "rw"));
        CHECK(criu::host_cgroup_yard(proc.path).dir.empty());
    }
    SECTION("a controller under another hierarchy's name") {
        write(proc.path / "self/mountinfo",
              mount_line(32, "/", "/sys/fs/cgroup/systemd", "cgroup", "rw,name=systemd") +
                  mount_line(33, "/", "/sys/fs/cgroup/memory", "cgroup", "rw,memory") +
                  mount_line(34, "/", "/sys/fs/cgroup/cpu,cpuacct", "cgroup", "rw,cpu") +
                  mount_line(35, "/", "/sys/fs/cgroup/unified", "cgroup2", "rw"));
        const auto y = criu::host_cgroup_yard(proc.path);
        CHECK(y.dir.empty());
        CHECK_THAT(y.why_not, Contains("cpu,cpuacct"));
    }
    SECTION("no cgroups at all") {
        write(proc.path / "self/cgroup", "");
        write(proc.path / "self/mountinfo", base);
        CHECK(criu::host_cgroup_yard(proc.path).dir.empty());
    }
}

TEST_CASE("a favordynmods option is not taken for a controller", "[cgroup_yard]") {
    test::temp_dir proc;
    write(proc.path / "self/cgroup", hybrid_cgroup);
    const auto v1 = mount_line(32, "/", "/sys/fs/cgroup/systemd", "cgroup", "rw,name=systemd") +
                    mount_line(34, "/", "/sys/fs/cgroup/cpu,cpuacct", "cgroup", "rw,cpu,cpuacct");
    SECTION("on the cgroup2 mount") {
        write(proc.path / "self/mountinfo",
              v1 + mount_line(33, "/", "/sys/fs/cgroup/memory", "cgroup", "rw,memory") +
                  mount_line(35, "/", "/sys/fs/cgroup/unified", "cgroup2", "rw,favordynmods"));
        CHECK(criu::host_cgroup_yard(proc.path).dir == "/sys/fs/cgroup");
    }
    SECTION("on a v1 hierarchy, which is still the memory hierarchy for the yard") {
        write(proc.path / "self/mountinfo",
              v1 +
                  mount_line(33, "/", "/sys/fs/cgroup/memory", "cgroup", "rw,favordynmods,memory") +
                  mount_line(35, "/", "/sys/fs/cgroup/unified", "cgroup2", "rw"));
        CHECK(criu::host_cgroup_yard(proc.path).dir == "/sys/fs/cgroup");
    }
}
