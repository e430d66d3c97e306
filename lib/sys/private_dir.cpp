#include "sys/private_dir.hpp"

#include "core/error.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ferry {

void make_private_dir(const std::filesystem::path& dir) {
    std::error_code ec;
    if (dir.has_parent_path())
        std::filesystem::create_directories(dir.parent_path(), ec); // checked below, via dir
    const bool made = ::mkdir(dir.c_str(), 0700) == 0;
    if (!made && errno != EEXIST)
        throw sys_error("mkdir " + dir.string());
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0)
        throw sys_error("lstat " + dir.string());
    if (S_ISLNK(st.st_mode))
        throw error(fmt::format("{} is a symlink, not a directory of Ferry's own", dir.string()));
    if (!S_ISDIR(st.st_mode))
        throw error(fmt::format("{} exists and is not a directory", dir.string()));
    if (st.st_uid != ::geteuid())
        throw error(fmt::format("{} belongs to uid {}, not to this user ({}): refusing to keep "
                                "images there",
                                dir.string(), st.st_uid, ::geteuid()));
    // A directory that was there is never changed: --work-dir /tmp must
    // not close /tmp to everyone else.
    if (!made && (st.st_mode & (S_IWGRP | S_IWOTH)))
        throw error(fmt::format("{} is writable by other users: give Ferry a directory of its "
                                "own",
                                dir.string()));
}

} // namespace ferry
