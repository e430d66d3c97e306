// The transports Ferry knows, each whole in its own folder. Adding one is a
// folder and a line here.
#include "transport/backend.hpp"

#include "core/error.hpp"
#include "transport/rdma/rdma_backend.hpp"
#include "transport/shm/shm_backend.hpp"
#include "transport/tcp/tcp_backend.hpp"

#include <fmt/format.h>

namespace ferry::transport {

namespace {

// The first is the default.
const backend* const known[] = {
    &tcp::backend_instance,
    &shm::backend_instance,
    &rdma::backend_instance,
};

} // namespace

const backend& find(std::string_view name) {
    std::string list;
    for (const backend* b : known) {
        if (name == b->name())
            return *b;
        list += fmt::format("{}{}", list.empty() ? "" : ", ", b->name());
    }
    throw error(fmt::format("unknown fabric '{}' (known: {})", name, list));
}

std::vector<std::string> names() {
    std::vector<std::string> out;
    for (const backend* b : known)
        out.emplace_back(b->name());
    return out;
}

} // namespace ferry::transport
