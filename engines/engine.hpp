// The container engines Ferry migrates from and to. Each lives in a folder
// of its own (podman/, docker/) and is listed once, in engines.cpp; nothing
// else in Ferry names an engine.
//
// Source side: a source_container is a running container as its engine
// describes it, and how to dump it lazily (its engine's own checkpoint,
// made lazy by Ferry's runc shim: engine_dump.hpp). Destination side: an
// engine_restore turns the images and the engine's files into what that
// engine restores from (engine_restore.hpp).
#pragma once

#include "criu/dump_driver.hpp"
#include "sys/host_tools.hpp"

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace ferry::engines {

class engine_restore;

// A network the container is attached to, as its engine describes it.
struct container_network {
    std::string name;
    std::string driver; // the engine's: bridge, macvlan, ipvlan, ...
    // Its addresses belong to a segment every host reaches (macvlan or
    // ipvlan on the host's link, an overlay), so they can move with the
    // container; a bridge behind the host's NAT cannot. ("null": docker's
    // none, loopback only.)
    [[nodiscard]] bool can_move() const noexcept {
        return driver == "macvlan" || driver == "ipvlan" || driver == "overlay" || driver == "null";
    }
};

// What every engine says of a container that a migration needs.
struct container_info {
    std::string id;
    std::string name;
    pid_t pid = 0; // its init, on the host
    bool running = false;
    bool paused = false;
    std::string image;                      // its image's name, which the destination must have
    std::vector<std::string> named_volumes; // "NAME at /dest": the engine's volumes it mounts
    std::vector<container_network> networks;
};

class source_container {
  public:
    virtual ~source_container() = default;
    [[nodiscard]] virtual const container_info& info() const = 0;
    // The configuration the destination creates the container from before
    // the freeze, if this engine does that (docker); empty otherwise.
    [[nodiscard]] virtual std::vector<uint8_t> config_for_prepare() const { return {}; }
    // The lazy dump, through the engine's checkpoint command.
    virtual std::unique_ptr<criu::dump_driver>
    make_dump(const std::filesystem::path& dir, const std::string& migration_id,
              const criu::dump_settings& settings) const = 0;
};

struct engine {
    const char* name;
    // Inspects the container and checks that it runs under Ferry's runc
    // shim; throws with what to do otherwise.
    std::unique_ptr<source_container> (*open_source)(const std::string& container,
                                                     const host_tools& tools);
    // For a container of that name arriving here.
    std::unique_ptr<engine_restore> (*make_restore)(const std::string& container,
                                                    const host_tools& tools);
    // Removes container `id`, which a daemon created for a migration that
    // never ran, if it never started; nullptr if the engine creates nothing
    // before the freeze.
    void (*remove_if_never_started)(const std::string& id, const host_tools& tools);
    // Removes what a restore for `migration_id` left outside the container
    // (docker: containerd's copy of the checkpoint); nullptr if nothing.
    void (*remove_restore_leftovers)(const std::string& migration_id);
};

// The engine called `name`; throws ferry::error naming the known ones.
const engine& find(const std::string& name);
// Every engine's name, the default first.
std::vector<std::string> names();

} // namespace ferry::engines
