#include "transport/tcp/tcp_backend.hpp"

#include "transport/tcp/tcp_channel.hpp"

namespace ferry::transport::tcp {

const tcp_backend backend_instance;

std::unique_ptr<page_channel> tcp_backend::open(std::unique_ptr<net::stream> handshake,
                                                const FerryControl__PageChannelAccepted&,
                                                const fabric_spec&, FerryControl__ChannelKind kind,
                                                uint32_t max_pages) const {
    return std::make_unique<tcp_channel>(std::move(handshake), max_pages,
                                         kind == FERRY_CONTROL__CHANNEL_KIND__FAULT);
}

} // namespace ferry::transport::tcp
