#include "sys/kept_logs.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace ferry {

namespace fs = std::filesystem;

namespace {

bool is_migration_id(const std::string& name) {
    return name.size() == 32 && std::all_of(name.begin(), name.end(), [](char c) {
               return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
           });
}

// Only regular *.log files, and at least one.
bool holds_only_logs(const fs::path& dir) {
    std::error_code ec;
    size_t logs = 0;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        if (!e.is_regular_file(ec) || e.is_symlink(ec) || e.path().extension() != ".log")
            return false;
        logs++;
    }
    return !ec && logs > 0;
}

} // namespace

size_t prune_kept_logs(const fs::path& work_root, size_t keep) {
    struct kept {
        fs::path dir;
        fs::file_time_type mtime;
    };
    std::vector<kept> dirs;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(work_root, ec)) {
        if (!e.is_directory(ec) || e.is_symlink(ec) ||
            !is_migration_id(e.path().filename().string()) || !holds_only_logs(e.path()))
            continue;
        const auto t = fs::last_write_time(e.path(), ec);
        if (!ec)
            dirs.push_back({e.path(), t});
    }
    if (dirs.size() <= keep)
        return 0;
    std::sort(dirs.begin(), dirs.end(),
              [](const kept& a, const kept& b) { return a.mtime > b.mtime; });
    size_t removed = 0;
    for (size_t i = keep; i < dirs.size(); i++) {
        // Checked again: a migration may have started writing there since.
        if (!holds_only_logs(dirs[i].dir))
            continue;
        fs::remove_all(dirs[i].dir, ec);
        if (!ec)
            removed++;
    }
    return removed;
}

} // namespace ferry
