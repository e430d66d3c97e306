// Docker underneath a migration.
//
// Source: Ferry runs `docker checkpoint create`: dockerd asks containerd,
// which pauses the container (runc pause: the shim skips it for Ferry's
// checkpoint, CRIU freezes the container itself) and has its shim run runc
// checkpoint. Docker's runtime is Ferry's runc shim (dockerd's `runtimes`),
// which makes the checkpoint lazy and writes CRIU's images into Ferry's work
// dir: docker's own checkpoint directory only fills once runc has ended,
// which a lazy dump does at the migration's end. Ferry sends the container's
// configuration (docker inspect's Config and HostConfig), its writable
// layer's diff and its /dev/shm.
//
// Before the freeze, the source also reads runc's descriptors.json, from
// which the destination starts its restore warm (engines/README.md).
//
// Destination (docker_restore.cpp): the container is created through
// dockerd's API with that configuration, and `docker start --checkpoint`
// restores it, made lazy by the shim: started before the freeze on a
// stand-in checkpoint (warm), or once the images are in its checkpoint
// directory (cold).
#pragma once

#include "docker/docker_api.hpp"
#include "engine.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace ferry::engines::docker {

struct container : container_info {
    std::string runtime; // HostConfig.Runtime, a name among dockerd's runtimes
    std::string storage_driver;
    // overlay2: the upper dir over its lower dirs; vfs: the container's full
    // tree and the tree it was copied from (the image plus docker's init layer).
    std::filesystem::path upper_dir;
    std::vector<std::filesystem::path> lower_dirs;
    std::filesystem::path layer_dir, base_dir;
    std::filesystem::path shm_dir; // the tmpfs docker mounts as its /dev/shm; may be empty
    nlohmann::json config;         // {"Name", "Config", "HostConfig"} as docker inspect says
};

// Throws a clear error when there is no such container or its storage driver
// is not supported.
container inspect(const std::string& name, const docker_api::client& api);

// Throws unless the container runs under Ferry's runc shim.
void require_ferry_runtime(const container& c, const docker_api::client& api);

// The engine: docker_engine.cpp.
extern const engines::engine engine;

std::unique_ptr<source_container> open_source(const std::string& name, const host_tools& tools);
std::unique_ptr<engine_restore> make_restore(const std::string& name, const host_tools& tools);
// Removes the container `id` if it was created and never started.
void remove_if_never_started(const std::string& id, const host_tools& tools);

} // namespace ferry::engines::docker
