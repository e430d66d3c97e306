// The rdma backend: pages READ one-sided over RDMA verbs (libibverbs and
// librdmacm, rdma-core) from the source's staging region. Source:
// rdma_server.hpp (the region registered, the RDMA CM listener, the stage
// RPC). Destination: rdma_channel.hpp. The TLS handshake carries the
// region's bounds, its rkey and a one-time connect token.
#pragma once

#include "transport/backend.hpp"

namespace ferry::transport::rdma {

class rdma_backend final : public backend {
  public:
    const char* name() const noexcept override { return "rdma"; }
    std::unique_ptr<page_channel> open(std::unique_ptr<net::stream> handshake,
                                       const FerryControl__PageChannelAccepted& accepted,
                                       const fabric_spec& spec, FerryControl__ChannelKind kind,
                                       uint32_t max_pages) const override;
    std::unique_ptr<source_state> prepare(pid_t root, const std::string& id) const override;
    std::unique_ptr<source_state> start(page_source& src,
                                        std::unique_ptr<source_state> prepared) const override;
    std::unique_ptr<accept_storage> accept(FerryControl__PageChannelAccepted& ok,
                                           source_state* state) const override;
};

extern const rdma_backend backend_instance;

} // namespace ferry::transport::rdma
