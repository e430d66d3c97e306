#include "podman/podman_engine.hpp"

namespace ferry::engines::podman {

const engines::engine engine = {
    .name = "podman",
    .open_source = open_source,
    .make_restore = make_restore,
    .remove_if_never_started = remove_if_never_started, // a warm restore's container
    .remove_restore_leftovers = nullptr,
};

} // namespace ferry::engines::podman
