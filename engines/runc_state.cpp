#include "runc_state.hpp"

#include "core/error.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>

namespace ferry::engines {

std::string runc_external_descriptors(const std::filesystem::path& root, const std::string& id) {
    const auto file = root / id / "state.json";
    std::ifstream in(file);
    if (!in)
        throw error(fmt::format("cannot read runc's {}", file.string()));
    try {
        return nlohmann::json::parse(in).at("external_descriptors").dump();
    } catch (const std::exception& e) {
        throw error(fmt::format("runc's {} has no readable external_descriptors: {}", file.string(),
                                e.what()));
    }
}

} // namespace ferry::engines
