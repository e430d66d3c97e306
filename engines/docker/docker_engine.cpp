#include "docker/docker_engine.hpp"

namespace ferry::engines::docker {

const engines::engine engine = {
    .name = "docker",
    .open_source = open_source,
    .make_restore = make_restore,
    .remove_if_never_started = remove_if_never_started,
};

} // namespace ferry::engines::docker
