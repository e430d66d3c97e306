#include "docker/containerd_staging.hpp"

#include "engine_request.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <iterator>
#include <set>
#include <string_view>

namespace ferry::engines::docker {

namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Where a containerd makes its temporary directories (Go's os.MkdirTemp
// with XDG_RUNTIME_DIR, which is os.TempDir() when empty: TMPDIR, else
// /tmp), seen through its own root.
fs::path staging_parent(const fs::path& process) {
    std::string xdg, tmpdir;
    const auto environ = read_file(process / "environ");
    for (size_t at = 0; at < environ.size();) {
        const auto end = std::min(environ.find('\0', at), environ.size());
        const std::string_view entry(environ.data() + at, end - at);
        if (entry.starts_with("XDG_RUNTIME_DIR="))
            xdg = entry.substr(16);
        else if (entry.starts_with("TMPDIR="))
            tmpdir = entry.substr(7);
        at = end + 1;
    }
    const fs::path dir = !xdg.empty() ? xdg : !tmpdir.empty() ? tmpdir : "/tmp";
    return process / "root" / dir.relative_path();
}

bool holds_request_of(const fs::path& staging, const std::string& migration_id) {
    const auto request = staging / restore_request_file;
    std::error_code ec;
    if (!fs::is_regular_file(request, ec))
        return false;
    const auto j = nlohmann::json::parse(read_file(request), nullptr, false);
    return j.is_object() && j.value("migration_id", "") == migration_id;
}

} // namespace

int remove_containerd_staging(const std::string& migration_id, const fs::path& proc) noexcept {
    if (migration_id.empty())
        return 0;
    int removed = 0;
    try {
        std::set<fs::path> parents;
        std::error_code ec;
        for (const auto& entry : fs::directory_iterator(proc, ec)) {
            const auto name = entry.path().filename().string();
            if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos)
                continue;
            if (read_file(entry.path() / "comm") != "containerd\n")
                continue;
            parents.insert(staging_parent(entry.path()));
        }
        for (const auto& parent : parents) {
            std::error_code dir_ec;
            for (const auto& entry : fs::directory_iterator(parent, dir_ec)) {
                if (!entry.path().filename().string().starts_with("ctrd-checkpoint") ||
                    !entry.is_directory(dir_ec) || entry.is_symlink(dir_ec))
                    continue;
                if (!holds_request_of(entry.path(), migration_id))
                    continue;
                std::error_code rm_ec;
                if (fs::remove_all(entry.path(), rm_ec) != static_cast<std::uintmax_t>(-1) &&
                    !rm_ec)
                    ++removed;
            }
        }
    } catch (const std::exception&) {
        // A process or a directory that went away mid-walk: what was found
        // so far is done.
    }
    return removed;
}

} // namespace ferry::engines::docker
