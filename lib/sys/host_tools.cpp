#include "sys/host_tools.hpp"

#include "core/error.hpp"
#include "sys/proc.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <sstream>
#include <string_view>

namespace ferry {

namespace {

namespace fs = std::filesystem;

std::optional<std::string> env(const char* name) {
    const char* v = std::getenv(name);
    if (!v || !*v)
        return std::nullopt;
    return std::string(v);
}

// The first of `candidates` that exists, canonical; empty if none.
std::string first_existing(const std::vector<fs::path>& candidates) {
    for (const auto& c : candidates) {
        std::error_code ec;
        if (fs::exists(c, ec))
            return fs::canonical(c, ec).string();
    }
    return {};
}

} // namespace

host_tools host_tools::from_environment() {
    host_tools t;
    const fs::path self = proc::self_dir();
    t.criu = env("FERRY_CRIU").value_or("criu");
    if (const auto level = env("FERRY_CRIU_LOG_LEVEL")) {
        if (level->size() != 1 || (*level)[0] < '0' || (*level)[0] > '4')
            throw error(
                fmt::format("FERRY_CRIU_LOG_LEVEL={} is not one of CRIU's levels, 0 to 4", *level));
        t.criu_log_level = (*level)[0] - '0';
    }
    t.podman = env("FERRY_PODMAN").value_or("podman");
    t.docker = env("FERRY_DOCKER").value_or("docker");
    if (const auto host = env("DOCKER_HOST")) {
        const std::string scheme = "unix://";
        if (host->rfind(scheme, 0) != 0)
            throw error(fmt::format(
                "DOCKER_HOST={} is not a unix socket; Ferry talks to the local dockerd only",
                *host));
        t.docker_socket = host->substr(scheme.size());
    }
    std::vector<fs::path> plugin_dirs;
    if (const auto dir = env("FERRY_CRIU_PLUGIN_DIR"))
        plugin_dirs.emplace_back(*dir);
    plugin_dirs.push_back(self / ".." / "criu-plugin");
    for (const char* lib : {"lib", "lib64", "lib/x86_64-linux-gnu"})
        plugin_dirs.push_back(self / ".." / lib / "ferry" / "criu");
    for (auto& d : plugin_dirs)
        d /= "ferry_criu.so";
    if (const auto so = first_existing(plugin_dirs); !so.empty())
        t.criu_plugin_dir = fs::path(so).parent_path();
    t.runc_shim = env("FERRY_RUNC_SHIM")
                      .value_or(first_existing(
                          {self / "ferry-runc", self / ".." / "engines" / "ferry-runc"}));
    t.lazy_pages = env("FERRY_LAZY_PAGES")
                       .value_or(first_existing(
                           {self / "lazy-pages", self / ".." / "lazy-pages" / "lazy-pages"}));
    if (const auto extra = env("FERRY_LAZY_PAGES_ARGS")) {
        std::istringstream words(*extra);
        for (std::string w; words >> w;)
            t.lazy_pages_args.push_back(w);
    }
    t.criu_fault = env("CRIU_FAULT");
    return t;
}

bool switch_from_environment(const char* name) noexcept {
    const char* v = std::getenv(name);
    return v && std::string_view(v) == "1";
}

const char* log_level_from_environment() noexcept {
    const char* v = std::getenv("FERRY_LOG");
    return v && *v ? v : "info";
}

} // namespace ferry
