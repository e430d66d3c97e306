#include "transport/page_channel.hpp"

#include "core/error.hpp"
#include "core/page.hpp"
#include "transport/backend.hpp"
#include "wire/control.hpp"

namespace ferry {

std::unique_ptr<page_channel> open_page_channel(const fabric_spec& spec,
                                                const net::endpoint& source,
                                                const std::string& migration_id,
                                                FerryControl__ChannelKind kind, uint32_t max_pages,
                                                std::chrono::milliseconds timeout) {
    // The handshake goes over TCP whatever the fabric, as RDMA's connection
    // manager does: it names the migration and the fabric, and the source's
    // acceptance says what the backend needs (shm: its region).
    const auto& backend = transport::find(spec.name);
    unique_fd fd = net::tcp_connect(source, timeout);
    FerryControl__PageChannelOpen open = FERRY_CONTROL__PAGE_CHANNEL_OPEN__INIT;
    open.migration_id = const_cast<char*>(migration_id.c_str());
    open.kind = kind;
    open.fabric = const_cast<char*>(spec.name.c_str());
    control::send_message(fd.get(), open, net::after(timeout));
    auto reply = control::receive(fd.get(), net::after(timeout));
    control::expect(reply.get(), FERRY_CONTROL__ENVELOPE__BODY_PAGE_CHANNEL_ACCEPTED,
                    "source " + source.to_string());
    const auto& accepted = *reply->page_channel_accepted;
    if (accepted.page_size != page_size)
        throw error("the source uses a different page size");
    max_pages = std::min(max_pages, accepted.max_pages_per_request);
    return backend.open(std::move(fd), accepted, spec, kind, max_pages);
}

} // namespace ferry
