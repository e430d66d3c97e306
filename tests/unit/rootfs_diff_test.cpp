// The writable-layer diff of a container (migrator/rootfs_diff.cpp) and its
// unpacking on the destination (lib/tar_extract.cpp): a layer changed in
// every way a container can change it, diffed against its base, must come
// out identical when the diff is applied to a copy of the base.
#include "rootfs_diff.hpp"
#include "tar_extract.hpp"
#include "tar_writer.hpp"

#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>

namespace fs = std::filesystem;
using namespace ferry;

namespace {

struct temp_dir {
    fs::path path;
    temp_dir() {
        char tmpl[] = "/tmp/ferry-diff-test.XXXXXX";
        path = ::mkdtemp(tmpl);
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

void write(const fs::path& p, const std::string& s) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << s;
}

// Every entry of a tree: type, mode, and contents or link target.
std::map<std::string, std::string> snapshot(const fs::path& root) {
    std::map<std::string, std::string> out;
    for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
         ++it) {
        struct stat st {};
        REQUIRE(::lstat(it->path().c_str(), &st) == 0);
        std::string v = std::to_string(st.st_mode);
        if (S_ISREG(st.st_mode)) {
            std::ifstream in(it->path());
            v += ":" + std::string(std::istreambuf_iterator<char>(in), {});
        } else if (S_ISLNK(st.st_mode)) {
            v += "->" + fs::read_symlink(it->path()).string();
        }
        out[it->path().lexically_relative(root).string()] = v;
    }
    return out;
}

void apply(const fs::path& root, const fs::path& tar, const std::vector<std::string>& deleted) {
    for (const auto& d : deleted)
        fs::remove_all(path_below(root, d));
    extract_tar(tar, root);
}

} // namespace

TEST_CASE("a vfs layer's diff, applied to its base, gives the layer back") {
    temp_dir t;
    const auto base = t.path / "base", layer = t.path / "layer", copy = t.path / "copy";
    write(base / "etc/issue.net", "Debian\n");
    write(base / "etc/keep", "unchanged\n");
    write(base / "etc/motd", "old motd\n");
    write(base / "usr/share/doc/apt/README", "apt\n");
    write(base / "usr/share/doc/apt/changelog", "log\n");
    write(base / "usr/share/doc/dpkg/README", "dpkg\n");
    write(base / "bin/tool", "#!/bin/sh\n");
    fs::create_symlink("tool", base / "bin/alias");
    fs::create_directories(base / "proc"); // an engine mount point: never diffed
    fs::copy(base, layer, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
    fs::copy(base, copy, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
    const auto index = engines::tree_index::scan(base);

    fs::remove(layer / "etc/issue.net");                       // deleted file
    fs::remove_all(layer / "usr/share/doc/apt");               // deleted directory
    write(layer / "etc/motd", "new motd, longer\n");           // changed contents
    write(layer / "etc/ferry-marker", "migrated\n");           // added file
    write(layer / "srv/data/deep/file", "nested\n");           // added directories
    fs::permissions(layer / "bin/tool", fs::perms::owner_all); // changed mode only
    fs::remove(layer / "bin/alias");
    fs::create_symlink("/elsewhere", layer / "bin/alias"); // changed link target
    write(layer / "proc/ignored", "x\n");

    std::vector<std::string> deleted;
    engines::tree_diff(layer, index, t.path / "diff.tar", deleted);
    CHECK(deleted == std::vector<std::string>{"/etc/issue.net", "/usr/share/doc/apt"});

    apply(copy, t.path / "diff.tar", deleted);
    auto want = snapshot(layer), got = snapshot(copy);
    want.erase("proc/ignored"); // engine paths stay the destination's own
    CHECK(got == want);
}

TEST_CASE("an unchanged layer has an empty diff") {
    temp_dir t;
    write(t.path / "base/a/b", "x");
    fs::copy(t.path / "base", t.path / "layer", fs::copy_options::recursive);
    // Same contents and mode, but copies get their own mtime: set it back.
    const auto mtime = fs::last_write_time(t.path / "base/a/b");
    fs::last_write_time(t.path / "layer/a/b", mtime);
    std::vector<std::string> deleted;
    engines::tree_diff(t.path / "layer", engines::tree_index::scan(t.path / "base"),
                       t.path / "diff.tar", deleted);
    CHECK(deleted.empty());
    fs::create_directories(t.path / "out");
    extract_tar(t.path / "diff.tar", t.path / "out");
    CHECK(fs::is_empty(t.path / "out"));
}

TEST_CASE("container paths and tar entries never leave the container") {
    temp_dir t;
    CHECK(path_below("/r", "/etc/x") == fs::path("/r/etc/x"));
    CHECK(path_below("/r", "/etc/./x") == fs::path("/r/etc/x"));
    CHECK_THROWS(path_below("/r", "/etc/../../x"));
    CHECK_THROWS(path_below("/r", "etc/x"));
    CHECK_THROWS(path_below("/r", "/"));

    fs::create_directories(t.path / "root");
    {
        tar_writer tar(t.path / "evil.tar");
        tar.add_bytes("../escaped", std::vector<uint8_t>{'x'});
        tar.close();
    }
    CHECK_THROWS(extract_tar(t.path / "evil.tar", t.path / "root"));
    CHECK(!fs::exists(t.path / "escaped"));

    // A symlink in the tar may not become a way out for a later entry:
    // libarchive either refuses the entry or replaces the link with a
    // directory; nothing lands outside.
    fs::create_directories(t.path / "outside");
    {
        fs::create_directories(t.path / "src");
        fs::create_symlink(t.path / "outside", t.path / "src/link");
        tar_writer tar(t.path / "link.tar");
        tar.add_path("link", t.path / "src/link");
        tar.add_bytes("link/file", std::vector<uint8_t>{'x'});
        tar.close();
    }
    try {
        extract_tar(t.path / "link.tar", t.path / "root");
    } catch (const std::exception&) {
    }
    CHECK(!fs::exists(t.path / "outside/file"));
    CHECK(fs::is_empty(t.path / "outside"));

    std::ofstream(t.path / "garbage.tar") << "this is not a tar archive at all";
    CHECK_THROWS(extract_tar(t.path / "garbage.tar", t.path / "root"));
}

TEST_CASE("an overlay upper dir: whiteouts are deletions, the rest is the tar") {
    temp_dir t;
    const auto upper = t.path / "upper", lower = t.path / "lower", out = t.path / "out";
    write(lower / "etc/issue.net", "Debian\n");
    write(upper / "etc/ferry-marker", "migrated\n");
    write(upper / "run/app/state", "kept\n");    // below an engine path: the user's
    write(upper / "etc/hostname", "engine's\n"); // an engine path: never diffed
    REQUIRE(::mknod((upper / "etc/issue.net").c_str(), S_IFCHR | 0000, makedev(0, 0)) == 0);
    std::vector<std::string> deleted;
    engines::overlay_diff(upper, {lower}, t.path / "diff.tar", deleted);
    CHECK(deleted == std::vector<std::string>{"/etc/issue.net"});
    fs::create_directories(out);
    extract_tar(t.path / "diff.tar", out);
    const auto got = snapshot(out);
    CHECK(got.count("etc/ferry-marker") == 1);
    CHECK(got.count("run/app/state") == 1);
    CHECK(got.count("etc/hostname") == 0);
    CHECK(got.count("etc/issue.net") == 0);
}

TEST_CASE("an overlay diff says it is alive as its tar grows, per entry and per MiB") {
    // The migrator's heartbeat goes from this while the container is frozen:
    // a layer that takes longer than the source daemon's patience must not
    // look like a migrator that hangs.
    temp_dir t;
    const auto upper = t.path / "upper", lower = t.path / "lower";
    fs::create_directories(lower);
    write(upper / "a/small", "x\n");
    write(upper / "a/big", std::string(3u << 20, 'b'));
    std::vector<std::string> deleted;
    size_t calls = 0;
    engines::overlay_diff(upper, {lower}, t.path / "diff.tar", deleted, [&] { calls++; });
    // Headers of a/, a/small and a/big, then a/big's 3 MiB a MiB at a time.
    CHECK(calls >= 3 + 3);
}

TEST_CASE("deleting a container path resolves its symlinks inside the container") {
    temp_dir t;
    const auto root = t.path / "root";
    fs::create_directories(root / "usr/lib/tree/deep");
    std::ofstream(root / "usr/lib/tree/deep/f") << "x";
    std::ofstream(root / "usr/lib/gone") << "x";
    fs::create_symlink("usr/lib", root / "lib"); // a merged-/usr image's link
    // A container's own absolute symlink: on the host it would lead out.
    fs::create_directories(t.path / "outside");
    std::ofstream(t.path / "outside/precious") << "x";
    fs::create_symlink(t.path / "outside", root / "escape");

    remove_below(root, "/lib/gone"); // through the relative link
    CHECK(!fs::exists(root / "usr/lib/gone"));
    remove_below(root, "/usr/lib/tree"); // a whole tree
    CHECK(!fs::exists(root / "usr/lib/tree"));
    CHECK(fs::exists(root / "usr/lib"));
    // "/escape/precious" is <root>/<t>/outside/precious inside the
    // container, which does not exist: nothing outside is touched.
    remove_below(root, "/escape/precious");
    CHECK(fs::exists(t.path / "outside/precious"));
    // The link itself goes, not what it points to.
    remove_below(root, "/escape");
    CHECK(!fs::is_symlink(root / "escape"));
    CHECK(fs::exists(t.path / "outside/precious"));
    remove_below(root, "/not/there"); // already gone: fine
    CHECK_THROWS(remove_below(root, "/../outside/precious"));
    CHECK(fs::exists(t.path / "outside/precious"));
}
