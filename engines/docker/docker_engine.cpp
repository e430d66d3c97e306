#include "docker/docker_engine.hpp"

#include "docker/containerd_staging.hpp"

namespace ferry::engines::docker {

const engines::engine engine = {
    .name = "docker",
    .open_source = open_source,
    .make_restore = make_restore,
    .remove_if_never_started = remove_if_never_started,
    .remove_restore_leftovers =
        [](const std::string& migration_id) { (void)remove_containerd_staging(migration_id); },
};

} // namespace ferry::engines::docker
