// The engines Ferry knows, each from its own folder. Adding one is a folder
// and a line here.
#include "engine.hpp"

#include "core/error.hpp"
#include "docker/docker_engine.hpp"
#include "podman/podman_engine.hpp"

#include <fmt/format.h>

namespace ferry::engines {

namespace {

// The first is the default.
const engine* const known[] = {
    &podman::engine,
    &docker::engine,
};

} // namespace

const engine& find(const std::string& name) {
    std::string names;
    for (const engine* e : known) {
        if (name == e->name)
            return *e;
        names += fmt::format("{}{}", names.empty() ? "" : " and ", e->name);
    }
    throw error(fmt::format("engine '{}' is not supported ({} are)", name, names));
}

std::vector<std::string> names() {
    std::vector<std::string> out;
    for (const engine* e : known)
        out.emplace_back(e->name);
    return out;
}

} // namespace ferry::engines
