// Podman underneath a migration.
//
// Source: Ferry runs podman's own `container checkpoint --export`, so podman
// writes the container's configuration (config.dump, spec.dump) and drives
// runc as usual. Ferry's runc shim (ferry-runc, podman's "runc" runtime) finds
// Ferry's request in the container's bundle and adds --lazy-pages,
// --page-server and --status-fd to runc's checkpoint. CRIU then keeps the
// tasks frozen until Ferry's daemon sends CLOSE, so podman's command lasts the
// whole migration; Ferry takes the images and podman's files as soon as CRIU's
// page server is up, and builds the writable layer's diff itself.
//
// Podman writes config.dump and spec.dump before it runs runc: the shim holds
// there so that the destination can start its restore from them first (a
// warm restore, engines/README.md).
//
// Destination (podman_restore.cpp): `podman container restore
// --import` of a tar in podman's export format, made lazy by the shim too.
#pragma once

#include "engine.hpp"

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace ferry::engines::podman {

// How long one podman query (inspect, info, exists) may take.
inline constexpr auto query_timeout = std::chrono::seconds(30);

struct container : container_info {
    std::filesystem::path bundle; // runc's --work-path: podman's config.dump lands here
    std::filesystem::path upper_dir;
    std::vector<std::filesystem::path> lower_dirs; // topmost first
};

// Throws a clear error when there is no such container.
container inspect(const std::string& name, const host_tools& tools);

// Throws unless podman's "runc" runtime is Ferry's shim.
void require_ferry_runtime(const host_tools& tools);

// The engine: podman_engine.cpp.
extern const engines::engine engine;

std::unique_ptr<source_container> open_source(const std::string& name, const host_tools& tools);
std::unique_ptr<engine_restore> make_restore(const std::string& name, const host_tools& tools);
// A warm restore's container (named `name`) that never ran: removed.
void remove_if_never_started(const std::string& name, const host_tools& tools);

} // namespace ferry::engines::podman
