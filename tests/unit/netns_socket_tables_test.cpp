// Which child socket table sizes the daemon sets, and that the kernel then
// gives a new network namespace a TCP table of its own
// (lib/sys/netns_socket_tables.hpp).
#include "sys/netns_socket_tables.hpp"

#include "temp_dir.hpp"

#include <catch2/catch.hpp>

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

using namespace ferry;
using ferry::test::temp_dir;
namespace fs = std::filesystem;

namespace {

void write_file(const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
}

std::string read_file(const fs::path& p) {
    std::ifstream in(p);
    std::string s;
    in >> s;
    return s;
}

} // namespace

TEST_CASE("netns socket tables: only settings still 0 are planned, an administrator's size stays") {
    temp_dir d;
    const fs::path sys = d.path;
    write_file(sys / "net/ipv4/tcp_child_ehash_entries", "0\n");
    write_file(sys / "net/ipv4/udp_child_hash_entries", "4096\n");
    const auto todo = netns_socket_tables::plan(sys);
    REQUIRE(todo.size() == 1);
    CHECK(todo[0].name == "net.ipv4.tcp_child_ehash_entries");
    CHECK(todo[0].wanted == netns_socket_tables::tcp_buckets);

    const std::string now = netns_socket_tables::apply(sys, todo);
    CHECK(read_file(sys / "net/ipv4/tcp_child_ehash_entries") == "16384");
    CHECK(read_file(sys / "net/ipv4/udp_child_hash_entries") == "4096");
    CHECK(now == "net.ipv4.tcp_child_ehash_entries=16384, net.ipv4.udp_child_hash_entries=4096");
    CHECK(netns_socket_tables::plan(sys).empty());
}

TEST_CASE("netns socket tables: a kernel without a setting is left alone, garbage is an error") {
    temp_dir d;
    const fs::path sys = d.path;
    write_file(sys / "net/ipv4/tcp_child_ehash_entries", "0\n");
    const auto todo = netns_socket_tables::plan(sys);
    REQUIRE(todo.size() == 1); // no udp_child_hash_entries (Linux 6.1)
    CHECK(netns_socket_tables::describe(sys) ==
          "net.ipv4.tcp_child_ehash_entries=0, net.ipv4.udp_child_hash_entries=absent");

    write_file(sys / "net/ipv4/udp_child_hash_entries", "lots\n");
    CHECK_THROWS_WITH(netns_socket_tables::plan(sys), Catch::Contains("not a number"));
}

TEST_CASE("netns socket tables: a write the kernel refuses names the setting") {
    temp_dir d;
    const fs::path sys = d.path;
    // A directory where the file should be: the write fails.
    fs::create_directories(sys / "net/ipv4/tcp_child_ehash_entries");
    const std::vector<netns_socket_tables::setting> todo = {{"net.ipv4.tcp_child_ehash_entries",
                                                             "net/ipv4/tcp_child_ehash_entries",
                                                             netns_socket_tables::tcp_buckets}};
    CHECK_THROWS_WITH(netns_socket_tables::apply(sys, todo),
                      Catch::Contains("net.ipv4.tcp_child_ehash_entries"));
}

// The real kernel: in a namespace of its own (so the host's settings stay),
// set the sizes, then create a child namespace, whose tcp_ehash_entries is
// positive only when it has a table of its own (negative: the host's).
TEST_CASE("netns socket tables: a namespace created after apply has its own TCP table") {
    if (::geteuid() != 0 || !fs::exists("/proc/sys/net/ipv4/tcp_child_ehash_entries")) {
        WARN("needs root and Linux 6.1 or later");
        return;
    }
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        int code = 10;
        try {
            if (::unshare(CLONE_NEWNET) != 0)
                ::_exit(11);
            const fs::path sys = "/proc/sys";
            (void)netns_socket_tables::apply(sys, netns_socket_tables::plan(sys));
            if (::unshare(CLONE_NEWNET) != 0)
                ::_exit(13);
            code = read_file(sys / "net/ipv4/tcp_ehash_entries") == "16384" ? 0 : 14;
        } catch (...) {
            code = 15;
        }
        ::_exit(code);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
}
