#include "rootfs_diff.hpp"

#include "core/error.hpp"
#include "tar_writer.hpp"

#include <fmt/format.h>
#include <fts.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <set>
#include <unordered_set>

namespace ferry::engines {

namespace {

namespace fs = std::filesystem;

// Paths engines create in every container (mount points, the files they
// bind-mount, /etc/mtab -> /proc/mounts); their own diffs leave them out,
// and podman's restore refuses a symlink that points out of the rootfs.
bool engine_init_path(const std::string& rel) {
    static const std::set<std::string> paths = {
        "dev",  "dev/shm",   "etc/hostname", "etc/hosts",   "etc/mtab",          "etc/resolv.conf",
        "proc", "run",       "run/notify",   "run/secrets", "run/.containerenv", "run/podman-init",
        "sys",  ".dockerenv"};
    return paths.count(rel) != 0;
}

bool is_whiteout(const struct stat& st) {
    return S_ISCHR(st.st_mode) && major(st.st_rdev) == 0 && minor(st.st_rdev) == 0;
}

bool is_opaque(const fs::path& dir) {
    char v[4] = {};
    for (const char* name : {"trusted.overlay.opaque", "user.overlay.opaque"})
        if (::lgetxattr(dir.c_str(), name, v, sizeof v) > 0 && v[0] == 'y')
            return true;
    return false;
}

bool same_time(const timespec& a, const timespec& b) {
    return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

std::string link_target(const char* path, const struct stat& st) {
    std::string target(size_t(st.st_size > 0 ? st.st_size : 4095) + 1, '\0');
    const ssize_t n = ::readlink(path, target.data(), target.size());
    if (n < 0)
        throw sys_error(fmt::format("readlink {}", path));
    target.resize(size_t(n));
    return target;
}

bool differs(const char* path, const struct stat& now, const tree_index::entry& was) {
    if (now.st_mode != was.mode || now.st_uid != was.uid || now.st_gid != was.gid)
        return true;
    if (S_ISDIR(now.st_mode))
        return false; // its mtime moves with every entry added or removed
    if (S_ISLNK(now.st_mode))
        return link_target(path, now) != was.link_target;
    if (S_ISCHR(now.st_mode) || S_ISBLK(now.st_mode))
        return now.st_rdev != was.rdev;
    return now.st_size != was.size || !same_time(now.st_mtim, was.mtime);
}

// Walks `root` without following symlinks (fts: one lstat per entry, far
// cheaper than std::filesystem's iterator); `visit(rel, path, st)` returns
// false to skip a directory's contents.
template <typename Visit>
void walk(const fs::path& root, Visit visit) {
    char* roots[] = {const_cast<char*>(root.c_str()), nullptr};
    std::unique_ptr<FTS, decltype(&fts_close)> fts(
        ::fts_open(roots, FTS_PHYSICAL | FTS_NOCHDIR, nullptr), fts_close);
    if (!fts)
        throw sys_error("fts_open " + root.string());
    const size_t skip = root.string().size() + 1;
    errno = 0;
    while (FTSENT* e = ::fts_read(fts.get())) {
        switch (e->fts_info) {
        case FTS_DP:
            continue; // a directory again, after its contents
        case FTS_DNR:
        case FTS_ERR:
        case FTS_NS:
            throw error(fmt::format("walking {}: {}: {}", root.string(), e->fts_path,
                                    std::strerror(e->fts_errno)));
        default:
            break;
        }
        if (e->fts_level == 0)
            continue;
        const std::string rel(e->fts_path + skip);
        if (!visit(rel, e->fts_path, *e->fts_statp))
            ::fts_set(fts.get(), e, FTS_SKIP);
    }
    if (errno)
        throw sys_error("fts_read " + root.string());
}

} // namespace

std::vector<fs::path> split_lower_dirs(const std::string& s) {
    std::vector<fs::path> out;
    size_t start = 0;
    while (start <= s.size()) {
        const size_t end = s.find(':', start);
        const auto part =
            s.substr(start, end == std::string::npos ? std::string::npos : end - start);
        if (!part.empty())
            out.emplace_back(part);
        if (end == std::string::npos)
            break;
        start = end + 1;
    }
    return out;
}

void overlay_diff(const fs::path& upper, const std::vector<fs::path>& lowers,
                  const fs::path& tar_out, std::vector<std::string>& deleted,
                  const std::function<void()>& progress) {
    tar_writer tar(tar_out);
    tar.on_progress(progress);
    walk(upper, [&](const std::string& rel, const char* path, const struct stat& st) {
        if (engine_init_path(rel))
            return true; // the entry is the engine's; what is below it is not
        if (is_whiteout(st)) {
            deleted.push_back("/" + rel);
            return true;
        }
        if (S_ISSOCK(st.st_mode))
            return true; // the process that bound it recreates it (CRIU rebinds)
        if (S_ISDIR(st.st_mode) && is_opaque(path)) {
            // An opaque directory hides everything below it in the image.
            std::set<std::string> hidden;
            for (const auto& lower : lowers) {
                std::error_code ec;
                for (const auto& e : fs::directory_iterator(lower / rel, ec))
                    hidden.insert(e.path().filename().string());
                if (is_opaque(lower / rel))
                    break;
            }
            for (const auto& h : hidden)
                if (!fs::exists(fs::symlink_status(fs::path(path) / h)))
                    deleted.push_back("/" + rel + "/" + h);
        }
        tar.add_path(rel, path);
        return true;
    });
    tar.close();
}

tree_index tree_index::scan(const fs::path& root) {
    tree_index index;
    walk(root, [&](const std::string& rel, const char* path, const struct stat& st) {
        entry e{st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtim, st.st_rdev, {}};
        if (S_ISLNK(st.st_mode))
            e.link_target = link_target(path, st);
        index._entries.emplace(rel, std::move(e));
        return true;
    });
    return index;
}

const tree_index::entry* tree_index::find(const std::string& rel) const {
    auto it = _entries.find(rel);
    return it == _entries.end() ? nullptr : &it->second;
}

void tree_diff(const fs::path& layer, const tree_index& base, const fs::path& tar_out,
               std::vector<std::string>& deleted, const std::function<void()>& progress) {
    tar_writer tar(tar_out);
    tar.on_progress(progress);
    std::unordered_set<std::string> present;
    present.reserve(base.entries().size());
    walk(layer, [&](const std::string& rel, const char* path, const struct stat& st) {
        if (engine_init_path(rel))
            return false;
        const auto* was = base.find(rel);
        if (was)
            present.insert(rel);
        if (S_ISSOCK(st.st_mode))
            return true; // the process that bound it recreates it (CRIU rebinds)
        if (!was || differs(path, st, *was))
            tar.add_path(rel, path);
        return true;
    });
    tar.close();
    // Deleted: in the base, not in the layer, and not below a deleted directory.
    std::vector<std::string> gone;
    for (const auto& [rel, e] : base.entries())
        if (!present.count(rel) && !engine_init_path(rel))
            gone.push_back(rel);
    std::sort(gone.begin(), gone.end());
    std::unordered_set<std::string> gone_dirs;
    for (const auto& rel : gone) {
        bool under_gone = false;
        for (size_t slash = rel.find('/'); slash != std::string::npos && !under_gone;
             slash = rel.find('/', slash + 1))
            under_gone = gone_dirs.count(rel.substr(0, slash)) != 0;
        if (under_gone)
            continue;
        gone_dirs.insert(rel);
        deleted.push_back("/" + rel);
    }
}

} // namespace ferry::engines
