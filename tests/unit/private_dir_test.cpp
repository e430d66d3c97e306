// A work directory on a shared tmpfs (lib/sys/private_dir.hpp): made 0700
// and kept only if it is this user's own directory.
#include "sys/private_dir.hpp"
#include "temp_dir.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

using namespace ferry;
namespace fs = std::filesystem;

namespace {

mode_t mode_of(const fs::path& p) {
    struct stat st {};
    REQUIRE(::lstat(p.c_str(), &st) == 0);
    return st.st_mode & 07777;
}

} // namespace

TEST_CASE("a missing work dir is made, with its parents, and only its owner may enter",
          "[private_dir]") {
    test::temp_dir root;
    const auto dir = root.path / "shm" / "ferry";
    make_private_dir(dir);
    CHECK(fs::is_directory(dir));
    CHECK(mode_of(dir) == 0700);
    // Again, as every migration does: nothing changes.
    make_private_dir(dir);
    CHECK(mode_of(dir) == 0700);
}

TEST_CASE("a directory that was there is taken as it is, unless others can write it",
          "[private_dir]") {
    test::temp_dir root;
    const auto dir = root.path / "ferry";
    fs::create_directory(dir);
    REQUIRE(::chmod(dir.c_str(), 0755) == 0);
    make_private_dir(dir); // an older Ferry's /dev/shm/ferry
    CHECK(mode_of(dir) == 0755);
    // Like /tmp or /dev/shm itself: refused, and not changed.
    REQUIRE(::chmod(dir.c_str(), 01777) == 0);
    CHECK_THROWS_WITH(make_private_dir(dir), Catch::Contains("writable by other users"));
    CHECK(mode_of(dir) == 01777);
}

TEST_CASE("a name someone else made first is refused", "[private_dir]") {
    test::temp_dir root;
    SECTION("a symlink to a directory elsewhere") {
        const auto elsewhere = root.path / "elsewhere";
        fs::create_directory(elsewhere);
        fs::create_directory_symlink(elsewhere, root.path / "ferry");
        CHECK_THROWS_WITH(make_private_dir(root.path / "ferry"), Catch::Contains("is a symlink"));
    }
    SECTION("a file") {
        std::ofstream(root.path / "ferry") << "x";
        CHECK_THROWS_WITH(make_private_dir(root.path / "ferry"),
                          Catch::Contains("not a directory"));
    }
    // Only root can give a directory to another user (CI runs as root).
    if (::geteuid() == 0)
        SECTION("another user's directory") {
            const auto dir = root.path / "ferry";
            fs::create_directory(dir);
            REQUIRE(::chown(dir.c_str(), 65534, 65534) == 0);
            REQUIRE(::chmod(dir.c_str(), 0700) == 0);
            CHECK_THROWS_WITH(make_private_dir(dir), Catch::Contains("belongs to uid 65534"));
        }
}
