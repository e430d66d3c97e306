#include "sys/kept_logs.hpp"
#include "temp_dir.hpp"

#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>

using namespace ferry;
namespace fs = std::filesystem;

namespace {

fs::path failed_migration(const fs::path& root, int n, int age_s) {
    const auto dir = root / fmt::format("{:032x}", n);
    fs::create_directories(dir);
    std::ofstream(dir / "dump.log") << "log " << n << "\n";
    fs::last_write_time(dir, fs::file_time_type::clock::now() - std::chrono::seconds(age_s));
    return dir;
}

} // namespace

TEST_CASE("only the newest failed migrations keep their logs") {
    test::temp_dir root;
    for (int i = 0; i < 10; i++)
        failed_migration(root.path, i, 1000 - i * 10); // 9 is the newest
    // A migration under way: its images are beside its logs.
    const auto running = failed_migration(root.path, 100, 5000);
    std::ofstream(running / "pages-1.img") << "x";
    // Not a migration's directory, and a directory with no log.
    const auto other = root.path / "operator-notes";
    fs::create_directories(other);
    std::ofstream(other / "a.log") << "x";
    const auto no_log = root.path / fmt::format("{:032x}", 200);
    fs::create_directories(no_log);

    CHECK(prune_kept_logs(root.path, 4) == 6);
    for (int i = 0; i < 10; i++)
        CHECK(fs::exists(root.path / fmt::format("{:032x}", i)) == (i >= 6));
    CHECK(fs::exists(running / "pages-1.img"));
    CHECK(fs::exists(other / "a.log"));
    CHECK(fs::exists(no_log));

    CHECK(prune_kept_logs(root.path, 4) == 0);
}

TEST_CASE("pruning a missing or small work directory removes nothing") {
    test::temp_dir root;
    CHECK(prune_kept_logs(root.path / "absent", 4) == 0);
    failed_migration(root.path, 1, 10);
    CHECK(prune_kept_logs(root.path, 4) == 0);
    CHECK(fs::exists(root.path / fmt::format("{:032x}", 1)));
}
