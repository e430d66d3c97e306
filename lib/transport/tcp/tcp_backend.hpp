// The tcp backend: page requests and replies over the channel's own TCP
// connection. Client: tcp_channel.hpp. Server: the shared request loop
// (transport/request_loop.hpp), nothing of its own.
#pragma once

#include "transport/backend.hpp"

namespace ferry::transport::tcp {

class tcp_backend final : public backend {
  public:
    const char* name() const noexcept override { return "tcp"; }
    std::unique_ptr<page_channel> open(std::unique_ptr<net::stream> handshake,
                                       const FerryControl__PageChannelAccepted& accepted,
                                       const fabric_spec& spec, FerryControl__ChannelKind kind,
                                       uint32_t max_pages) const override;
};

extern const tcp_backend backend_instance;

} // namespace ferry::transport::tcp
