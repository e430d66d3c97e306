#include "rootfs_diff.hpp"

#include "error.hpp"
#include "tar_writer.hpp"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>

#include <set>

namespace ferry::migrator {

namespace {

namespace fs = std::filesystem;

// Paths engines create in every container (mount points, the files they
// bind-mount, /etc/mtab -> /proc/mounts); their own diffs leave them out,
// and podman's restore refuses a symlink that points out of the rootfs.
bool engine_init_path(const std::string& rel) {
    static const std::set<std::string> paths = {
        "dev",         "dev/shm",          "etc/hostname",      "etc/hosts",
        "etc/mtab",    "etc/resolv.conf",  "proc",              "run",
        "run/notify",  "run/secrets",      "run/.containerenv", "run/podman-init",
        "sys",         ".dockerenv"};
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

struct stat lstat_or_throw(const fs::path& p) {
    struct stat st {};
    if (::lstat(p.c_str(), &st))
        throw sys_error("lstat " + p.string());
    return st;
}

bool same_time(const timespec& a, const timespec& b) {
    return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

bool differs(const fs::path& a, const struct stat& sa, const fs::path& b, const struct stat& sb) {
    if ((sa.st_mode & S_IFMT) != (sb.st_mode & S_IFMT) || sa.st_mode != sb.st_mode ||
        sa.st_uid != sb.st_uid || sa.st_gid != sb.st_gid)
        return true;
    if (S_ISDIR(sa.st_mode))
        return false; // its mtime moves with every entry added or removed
    if (S_ISLNK(sa.st_mode))
        return fs::read_symlink(a) != fs::read_symlink(b);
    if (S_ISCHR(sa.st_mode) || S_ISBLK(sa.st_mode))
        return sa.st_rdev != sb.st_rdev;
    return sa.st_size != sb.st_size || !same_time(sa.st_mtim, sb.st_mtim);
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
                  const fs::path& tar_out, std::vector<std::string>& deleted) {
    tar_writer tar(tar_out);
    for (auto it = fs::recursive_directory_iterator(upper); it != fs::recursive_directory_iterator();
         ++it) {
        const auto rel = it->path().lexically_relative(upper).string();
        if (engine_init_path(rel))
            continue;
        const auto st = lstat_or_throw(it->path());
        if (is_whiteout(st)) {
            deleted.push_back("/" + rel);
            continue;
        }
        if (S_ISSOCK(st.st_mode))
            continue; // the process that bound it recreates it (CRIU rebinds)
        if (S_ISDIR(st.st_mode) && is_opaque(it->path())) {
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
                if (!fs::exists(fs::symlink_status(it->path() / h)))
                    deleted.push_back("/" + rel + "/" + h);
        }
        tar.add_path(rel, it->path());
    }
    tar.close();
}

void tree_diff(const fs::path& layer, const fs::path& base, const fs::path& tar_out,
               std::vector<std::string>& deleted) {
    tar_writer tar(tar_out);
    for (auto it = fs::recursive_directory_iterator(layer); it != fs::recursive_directory_iterator();
         ++it) {
        const auto rel = it->path().lexically_relative(layer).string();
        if (engine_init_path(rel)) {
            it.disable_recursion_pending();
            continue;
        }
        const auto st = lstat_or_throw(it->path());
        if (S_ISSOCK(st.st_mode))
            continue;
        struct stat old {};
        if (::lstat((base / rel).c_str(), &old) == 0 && !differs(it->path(), st, base / rel, old))
            continue;
        tar.add_path(rel, it->path());
    }
    tar.close();
    for (auto it = fs::recursive_directory_iterator(base); it != fs::recursive_directory_iterator();
         ++it) {
        const auto rel = it->path().lexically_relative(base).string();
        if (engine_init_path(rel)) {
            it.disable_recursion_pending();
            continue;
        }
        struct stat now {};
        if (::lstat((layer / rel).c_str(), &now) == 0)
            continue;
        if (errno != ENOENT)
            throw sys_error("lstat " + (layer / rel).string());
        deleted.push_back("/" + rel);
        it.disable_recursion_pending(); // the directory went with everything in it
    }
}

} // namespace ferry::migrator
