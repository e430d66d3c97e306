#include "criu/criu_config.hpp"

#include "core/error.hpp"

#include <fmt/format.h>

#include <fstream>

namespace ferry::criu {

std::filesystem::path write_config(const std::filesystem::path& file, const std::string& extra,
                                   const std::optional<std::filesystem::path>& plugin_dir) {
    std::ofstream out(file, std::ios::trunc);
    out << "# Ferry: CRIU options for one migration\n";
    if (plugin_dir)
        out << "libdir " << plugin_dir->string() << "\n";
    out << extra;
    if (!out)
        throw error(fmt::format("cannot write {}", file.string()));
    return file;
}

} // namespace ferry::criu
