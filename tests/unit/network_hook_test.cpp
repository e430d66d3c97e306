// Docker's network hook run ahead of a restore (engines/network_hook.hpp),
// with a stand-in for libnetwork-setkey: /bin/sh called with argv[0]
// "libnetwork-setkey", which binds the namespace of the pid it is given to
// a file, as dockerd binds it to its sandbox path.
#include "network_hook.hpp"
#include "temp_dir.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <cerrno>
#include <fstream>
#include <sstream>

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;
using ferry::test::temp_dir;

// A spec as docker writes it: a network namespace without a path, and
// libnetwork's hook among the prestart hooks.
json docker_spec(const std::string& hook_script, const fs::path& dir) {
    return {{"ociVersion", "1.0.2-dev"},
            {"linux",
             {{"namespaces",
               json::array({{{"type", "mount"}}, {{"type", "network"}}, {{"type", "pid"}}})}}},
            {"hooks",
             {{"prestart",
               json::array(
                   {{{"path", "/bin/true"}, {"args", {"other-hook"}}},
                    {{"path", "/bin/sh"},
                     {"args",
                      {"libnetwork-setkey", "-c", hook_script, "setkey", (dir / "sandbox").string(),
                       (dir / "pid").string()}},
                     {"env", {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "FERRY_HOOK_TEST=yes"}}}})}}}};
}

// Binds the namespace of the state's pid to $1, as dockerd does, after
// checking that it was given its environment.
const std::string binding_hook =
    R"([ "$FERRY_HOOK_TEST" = yes ] || { echo "no environment" >&2; exit 3; }
pid=$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p')
[ -n "$pid" ] || { echo "no pid in the state" >&2; exit 4; }
echo "$pid" >"$2"
touch "$1" && mount --bind "/proc/$pid/ns/net" "$1")";

void write_json(const fs::path& file, const json& j) {
    std::ofstream(file) << j.dump(2);
}
std::string slurp(const fs::path& file) {
    std::ifstream in(file);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}
uint64_t inode_of(const fs::path& p) {
    struct stat st {};
    REQUIRE(::stat(p.c_str(), &st) == 0);
    return st.st_ino;
}

} // namespace

TEST_CASE("a spec is docker's when its network namespace has no path and libnetwork's hook sets "
          "it up") {
    temp_dir dir;
    auto spec = docker_spec("true", dir.path);
    CHECK(ferry::engines::network_set_up_by_hook(spec));
    auto with_path = spec;
    with_path["linux"]["namespaces"][1]["path"] = "/run/netns/x"; // podman's way
    CHECK_FALSE(ferry::engines::network_set_up_by_hook(with_path));
    auto no_hook = spec;
    no_hook["hooks"]["prestart"].erase(1);
    CHECK_FALSE(ferry::engines::network_set_up_by_hook(no_hook));
    auto no_netns = spec;
    no_netns["linux"]["namespaces"].erase(1); // the host's network
    CHECK_FALSE(ferry::engines::network_set_up_by_hook(no_netns));
    // Only a namespace runc makes has anything left to do at CRIU's
    // setup-namespaces: not podman's, nor the host's network.
    CHECK(ferry::engines::network_namespace_made_in_restore(spec));
    CHECK(ferry::engines::network_namespace_made_in_restore(no_hook));
    CHECK_FALSE(ferry::engines::network_namespace_made_in_restore(with_path));
    CHECK_FALSE(ferry::engines::network_namespace_made_in_restore(no_netns));
}

TEST_CASE("a bound network namespace is found in mountinfo by its inode") {
    const std::string mountinfo =
        "44 42 0:4 net:[4026532177] /run/netns/sw rw shared:2 - nsfs nsfs rw\n"
        "45 42 0:4 / /proc rw - proc proc rw\n"
        "110 27 0:4 net:[4026532472] /run/docker/my\\040netns rw - nsfs nsfs rw\n";
    CHECK(ferry::engines::netns_mount_point(mountinfo, 4026532472) == "/run/docker/my netns");
    CHECK(ferry::engines::netns_mount_point(mountinfo, 4026532177) == "/run/netns/sw");
    CHECK(ferry::engines::netns_mount_point(mountinfo, 1).empty());
}

TEST_CASE("docker's network hook runs ahead of a restore, and the bundle then names its "
          "namespace") {
    temp_dir dir;
    write_json(dir.path / "config.json", docker_spec(binding_hook, dir.path));
    const auto path =
        ferry::engines::set_up_network_before_restore(dir.path, "c1", std::chrono::seconds(10));
    REQUIRE(path == dir.path / "sandbox");
    // A namespace of its own, which outlives the process made to hold it.
    CHECK(inode_of(path) != inode_of("/proc/self/ns/net"));
    const pid_t holder = std::stoi(slurp(dir.path / "pid"));
    CHECK(::kill(holder, 0) == -1);
    CHECK(errno == ESRCH);
    const auto spec = json::parse(slurp(dir.path / "config.json"));
    CHECK(spec["linux"]["namespaces"][1]["path"] == path.string());
    // The hook is gone (runc would run it again at setup-namespaces); the
    // other hook stays.
    REQUIRE(spec["hooks"]["prestart"].size() == 1);
    CHECK(spec["hooks"]["prestart"][0]["args"][0] == "other-hook");
    CHECK_FALSE(ferry::engines::network_set_up_by_hook(spec));
    CHECK(::umount2(path.c_str(), MNT_DETACH) == 0);
}

TEST_CASE("a network hook that fails, or binds nothing, fails the restore and leaves the bundle "
          "as it was") {
    temp_dir dir;
    std::string expected;
    SECTION("it fails: its message is in the error") {
        write_json(dir.path / "config.json",
                   docker_spec("echo 'no sandbox for this container' >&2; exit 2", dir.path));
        expected = "no sandbox for this container";
    }
    SECTION("it binds nothing") {
        write_json(dir.path / "config.json", docker_spec("exit 0", dir.path));
        expected = "bound the new namespace";
    }
    SECTION("it does not end") {
        write_json(dir.path / "config.json", docker_spec("exec sleep 60", dir.path));
        expected = "did not finish within 1500 ms";
    }
    const auto before = slurp(dir.path / "config.json");
    std::string message;
    try {
        (void)ferry::engines::set_up_network_before_restore(dir.path, "c1",
                                                            std::chrono::milliseconds(1500));
    } catch (const std::exception& e) {
        message = e.what();
    }
    INFO(message);
    CHECK(message.find(expected) != std::string::npos);
    CHECK(slurp(dir.path / "config.json") == before);
}

TEST_CASE("a bundle without docker's network hook is refused") {
    temp_dir dir;
    auto spec = docker_spec(binding_hook, dir.path);
    spec["linux"]["namespaces"][1]["path"] = "/run/netns/x";
    write_json(dir.path / "config.json", spec);
    CHECK_THROWS_WITH(
        ferry::engines::set_up_network_before_restore(dir.path, "c1", std::chrono::seconds(5)),
        Catch::Contains("no network namespace for libnetwork's hook"));
}
