#include "tar_extract.hpp"

#include "core/error.hpp"
#include "core/unique_fd.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <memory>

namespace ferry {

namespace {

using archive_ptr = std::unique_ptr<archive, decltype(&archive_free)>;

void copy_data(archive* in, archive* out, const std::filesystem::path& tar) {
    const void* buf = nullptr;
    size_t size = 0;
    la_int64_t offset = 0;
    for (;;) {
        const int r = archive_read_data_block(in, &buf, &size, &offset);
        if (r == ARCHIVE_EOF)
            return;
        if (r != ARCHIVE_OK)
            throw error(fmt::format("{}: {}", tar.string(), archive_error_string(in)));
        if (archive_write_data_block(out, buf, size, offset) != ARCHIVE_OK)
            throw error(fmt::format("{}: {}", tar.string(), archive_error_string(out)));
    }
}

// Removes directory `name` in `dirfd` and everything in it, never following
// a symlink.
void remove_tree_at(int dirfd, const std::string& name, const std::string& shown) {
    const int fd = ::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        throw sys_error("open " + shown);
    DIR* d = ::fdopendir(fd);
    if (!d) {
        ::close(fd);
        throw sys_error("fdopendir " + shown);
    }
    struct dir_closer {
        void operator()(DIR* dir) const noexcept { ::closedir(dir); }
    };
    std::unique_ptr<DIR, dir_closer> guard(d);
    while (const dirent* e = ::readdir(d)) {
        const std::string entry = e->d_name;
        if (entry == "." || entry == "..")
            continue;
        if (::unlinkat(fd, entry.c_str(), 0) == 0)
            continue;
        if (errno != EISDIR)
            throw sys_error("unlink " + shown + "/" + entry);
        remove_tree_at(fd, entry, shown + "/" + entry);
    }
    guard.reset();
    if (::unlinkat(dirfd, name.c_str(), AT_REMOVEDIR))
        throw sys_error("rmdir " + shown);
}

} // namespace

void extract_tar(const std::filesystem::path& tar, const std::filesystem::path& dest) {
    archive_ptr in(archive_read_new(), archive_free);
    archive_ptr out(archive_write_disk_new(), archive_free);
    if (!in || !out)
        throw error("libarchive: out of memory");
    archive_read_support_format_tar(in.get());
    // Owners, modes, times and xattrs as archived; entries may not climb out
    // of dest (path_below) or be written through a symlink. Entries are
    // given absolute paths below dest, canonical so that the symlink check
    // does not trip over dest's own path.
    const auto root = std::filesystem::canonical(dest);
    const int flags = ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME |
                      ARCHIVE_EXTRACT_XATTR | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                      ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_UNLINK;
    archive_write_disk_set_options(out.get(), flags);
    if (archive_read_open_filename(in.get(), tar.c_str(), 1 << 16) != ARCHIVE_OK)
        throw error(
            fmt::format("cannot open {}: {}", tar.string(), archive_error_string(in.get())));
    for (;;) {
        archive_entry* e = nullptr;
        const int r = archive_read_next_header(in.get(), &e);
        if (r == ARCHIVE_EOF)
            break;
        if (r != ARCHIVE_OK)
            throw error(
                fmt::format("{} is malformed: {}", tar.string(), archive_error_string(in.get())));
        const std::string name = archive_entry_pathname(e);
        if (name.find_first_not_of("./") == std::string::npos)
            continue; // the archive's own top directory: dest is already there
        // Refuses ".." before anything is written.
        const auto full = path_below(root, "/" + name).string();
        archive_entry_set_pathname(e, full.c_str());
        if (const char* link = archive_entry_hardlink(e)) {
            const auto target = path_below(root, "/" + std::string(link)).string();
            archive_entry_set_hardlink(e, target.c_str());
        }
        if (archive_write_header(out.get(), e) != ARCHIVE_OK)
            throw error(fmt::format("{}: extracting {}: {}", tar.string(), name,
                                    archive_error_string(out.get())));
        if (archive_entry_size(e) > 0)
            copy_data(in.get(), out.get(), tar);
        if (archive_write_finish_entry(out.get()) != ARCHIVE_OK)
            throw error(fmt::format("{}: extracting {}: {}", tar.string(), name,
                                    archive_error_string(out.get())));
    }
}

std::filesystem::path path_below(const std::filesystem::path& root, const std::string& path) {
    const std::filesystem::path p(path);
    if (!p.is_absolute())
        throw error(fmt::format("'{}' is not an absolute container path", path));
    std::filesystem::path out = root;
    for (const auto& part : p.relative_path()) {
        if (part == "..")
            throw error(fmt::format("'{}' climbs out of the container", path));
        if (part.empty() || part == ".")
            continue;
        out /= part;
    }
    if (out == root)
        throw error(fmt::format("'{}' names the container's root", path));
    return out;
}

} // namespace ferry

namespace ferry {

void remove_below(const std::filesystem::path& root, const std::string& path) {
    const auto full = path_below(root, path); // refuses ".." and the root itself
    const auto rel = full.lexically_relative(root);
    unique_fd root_fd(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!root_fd)
        throw sys_error("open " + root.string());
    unique_fd parent;
    if (rel.parent_path().empty()) {
        parent.reset(::dup(root_fd.get()));
    } else {
        open_how how{};
        how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
        how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
        parent.reset(int(
            ::syscall(SYS_openat2, root_fd.get(), rel.parent_path().c_str(), &how, sizeof how)));
    }
    if (!parent) {
        if (errno == ENOENT || errno == ENOTDIR)
            return; // its directory is gone already
        throw sys_error("open " + full.parent_path().string());
    }
    const auto name = rel.filename().string();
    if (::unlinkat(parent.get(), name.c_str(), 0) == 0 || errno == ENOENT)
        return;
    if (errno != EISDIR)
        throw sys_error("unlink " + full.string());
    remove_tree_at(parent.get(), name, full.string());
}

} // namespace ferry
