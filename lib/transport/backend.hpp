// A transport backend, whole: both its halves live in its folder (tcp/,
// shm/, the way rdma-core keeps a provider together), and backends.cpp
// lists it once. The destination opens channels through open_page_channel
// (page_channel.hpp); the source's daemon drives the server half through
// this interface, at three moments of a migration. Nothing outside a
// backend's folder names it.
#pragma once

#include "core/unique_fd.hpp"
#include "sys/stream.hpp"
#include "transport/fabric.hpp"
#include "transport/page_channel.hpp"
#include "transport/page_source.hpp"
#include "wire/control.pb-c.h"

#include <sys/types.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::transport {

// Keeps alive what an acceptance points into until it is sent.
class accept_storage {
  public:
    virtual ~accept_storage() = default;
};

class backend {
  public:
    virtual ~backend() = default;
    // As --fabric spells it: "tcp", "shm".
    [[nodiscard]] virtual const char* name() const noexcept = 0;
    // Whether "NAME:lat=..,bw=.." is accepted: an emulated link's cost.
    [[nodiscard]] virtual bool takes_link_model() const noexcept { return false; }

    // Destination: the channel over `handshake`, the connection (TLS, or plain
    // after an agreed downgrade) on which the source accepted it with `accepted`.
    [[nodiscard]] virtual std::unique_ptr<page_channel>
    open(std::unique_ptr<net::stream> handshake, const FerryControl__PageChannelAccepted& accepted,
         const fabric_spec& spec, FerryControl__ChannelKind kind, uint32_t max_pages) const = 0;

    // Source, before the freeze while the tree still runs: what can be
    // done outside the downtime (shm allocates its region).
    [[nodiscard]] virtual std::unique_ptr<source_state> prepare(pid_t /*root*/,
                                                                const std::string& /*id*/) const {
        return nullptr;
    }
    // Source, once the migration is registered (its pages can be read):
    // shm lays out its region and starts staging. Gets what prepare made.
    [[nodiscard]] virtual std::unique_ptr<source_state>
    start(page_source& /*src*/, std::unique_ptr<source_state> prepared) const {
        return prepared;
    }
    // Source, as a channel opens: adds what the destination needs to `ok`
    // (shm: the region). The connection then carries requests and "done"
    // (transport::serve_requests).
    [[nodiscard]] virtual std::unique_ptr<accept_storage>
    accept(FerryControl__PageChannelAccepted& /*ok*/, source_state* /*state*/) const {
        return nullptr;
    }
};

// The backend named `name`; throws ferry::error naming the known ones.
const backend& find(std::string_view name);
std::vector<std::string> names();

} // namespace ferry::transport
