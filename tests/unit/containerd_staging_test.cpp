// containerd's leftover checkpoint copies: only this migration's go.
#include "docker/containerd_staging.hpp"
#include "temp_dir.hpp"

#include <catch2/catch.hpp>

#include <fstream>

namespace fs = std::filesystem;
using namespace std::string_literals;
using ferry::engines::docker::remove_containerd_staging;

namespace {

void write(const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
}

// A process in the fake /proc whose root is `root`.
void process(const fs::path& proc, int pid, const std::string& comm, const std::string& environ,
             const fs::path& root) {
    const auto dir = proc / std::to_string(pid);
    write(dir / "comm", comm + "\n");
    write(dir / "environ", environ);
    fs::create_directory_symlink(root, dir / "root");
}

fs::path staging(const fs::path& parent, const std::string& name, const std::string& id) {
    const auto dir = parent / name;
    write(dir / "ferry-restore.json", R"({"migration_id": ")" + id + R"(", "images_dir": "/x"})");
    write(dir / "core-1.img", "image");
    return dir;
}

} // namespace

TEST_CASE("only this migration's staging directories of containerd go", "[containerd]") {
    ferry::test::temp_dir t;
    const auto proc = t.path / "proc", root = t.path / "root";
    // containerd with TMPDIR set, a second one with neither variable (/tmp),
    // and a process that is not containerd with its own "staging" dir.
    process(proc, 100, "containerd", "PATH=/bin\0TMPDIR=/var/ctd\0"s, root);
    process(proc, 200, "containerd", "PATH=/bin\0"s, root);
    process(proc, 300, "dockerd", "TMPDIR=/other\0"s, root);
    write(proc / "self" / "comm", "containerd\n"); // not a pid: skipped

    const auto ours1 = staging(root / "var/ctd", "ctrd-checkpoint111", "m1");
    const auto ours2 = staging(root / "tmp", "ctrd-checkpoint222", "m1");
    const auto other_migration = staging(root / "tmp", "ctrd-checkpoint333", "m2");
    const auto not_containerds = staging(root / "tmp", "other-checkpoint", "m1");
    const auto not_watched = staging(root / "other", "ctrd-checkpoint444", "m1");
    write(root / "tmp/ctrd-checkpoint555/ferry-restore.json", "{not json");
    write(root / "tmp/ctrd-checkpoint666/core-1.img", "docker's own checkpoint, no request");

    CHECK(remove_containerd_staging("m1", proc) == 2);
    CHECK_FALSE(fs::exists(ours1));
    CHECK_FALSE(fs::exists(ours2));
    CHECK(fs::exists(other_migration));
    CHECK(fs::exists(not_containerds));
    CHECK(fs::exists(not_watched));
    CHECK(fs::exists(root / "tmp/ctrd-checkpoint555"));
    CHECK(fs::exists(root / "tmp/ctrd-checkpoint666"));

    CHECK(remove_containerd_staging("m1", proc) == 0);
    CHECK(remove_containerd_staging("", proc) == 0);
    CHECK(fs::exists(other_migration));
}

TEST_CASE("XDG_RUNTIME_DIR wins over TMPDIR, and a missing /proc is no error", "[containerd]") {
    ferry::test::temp_dir t;
    const auto proc = t.path / "proc", root = t.path / "root";
    process(proc, 7, "containerd", "TMPDIR=/t\0XDG_RUNTIME_DIR=/run/u\0"s, root);
    const auto in_xdg = staging(root / "run/u", "ctrd-checkpoint1", "m");
    const auto in_tmpdir = staging(root / "t", "ctrd-checkpoint2", "m");
    CHECK(remove_containerd_staging("m", proc) == 1);
    CHECK_FALSE(fs::exists(in_xdg));
    CHECK(fs::exists(in_tmpdir));
    CHECK(remove_containerd_staging("m", t.path / "no-proc") == 0);
}
