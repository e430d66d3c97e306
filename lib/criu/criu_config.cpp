#include "criu/criu_config.hpp"

#include "core/error.hpp"
#include "sys/proc.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <vector>

namespace ferry::criu {

std::optional<std::filesystem::path> plugin_dir() {
    namespace fs = std::filesystem;
    std::vector<fs::path> candidates;
    if (const char* env = std::getenv("FERRY_CRIU_PLUGIN_DIR"); env && *env)
        candidates.emplace_back(env);
    const auto self = proc::self_dir();
    candidates.push_back(self / ".." / "criu-plugin");
    for (const char* lib : {"lib", "lib64", "lib/x86_64-linux-gnu"})
        candidates.push_back(self / ".." / lib / "ferry" / "criu");
    for (const auto& c : candidates) {
        std::error_code ec;
        if (fs::exists(c / "ferry_criu.so", ec))
            return fs::canonical(c, ec);
    }
    return std::nullopt;
}

std::filesystem::path write_config(const std::filesystem::path& file, const std::string& extra) {
    std::ofstream out(file, std::ios::trunc);
    out << "# Ferry: CRIU options for one migration\n";
    if (auto dir = plugin_dir())
        out << "libdir " << dir->string() << "\n";
    out << extra;
    if (!out)
        throw error(fmt::format("cannot write {}", file.string()));
    return file;
}

} // namespace ferry::criu
