#include "transport/page_channel.hpp"

#include "core/error.hpp"
#include "core/page.hpp"
#include "tls/tls_stream.hpp"
#include "transport/backend.hpp"
#include "wire/control.hpp"

namespace ferry {

std::unique_ptr<page_channel>
open_page_channel(const fabric_spec& spec, const net::endpoint& source,
                  const tls::credentials_ptr& creds, const std::string& migration_id,
                  FerryControl__ChannelKind kind, uint32_t max_pages,
                  std::chrono::milliseconds timeout, std::chrono::milliseconds acceptance_wait) {
    // The handshake goes over TCP whatever the fabric, as RDMA's connection
    // manager does: it names the migration and the fabric, and the source's
    // acceptance says what the backend needs (shm: its region).
    const auto& backend = transport::find(spec.name);
    auto conn = tls::connect(source, creds, timeout);
    FerryControl__PageChannelOpen open = FERRY_CONTROL__PAGE_CHANNEL_OPEN__INIT;
    open.migration_id = const_cast<char*>(migration_id.c_str());
    open.kind = kind;
    open.fabric = const_cast<char*>(spec.name.c_str());
    control::send_message(*conn, open, net::after(timeout));
    auto reply = control::receive(*conn, net::after(std::max(timeout, acceptance_wait)));
    control::expect(reply.get(), FERRY_CONTROL__ENVELOPE__BODY_PAGE_CHANNEL_ACCEPTED,
                    "source " + source.to_string());
    const auto& accepted = *reply->page_channel_accepted;
    if (accepted.page_size != page_size)
        throw error("the source uses a different page size");
    max_pages = std::min(max_pages, accepted.max_pages_per_request);
    std::unique_ptr<net::stream> channel = std::move(conn);
    if (accepted.has_plaintext_pages && accepted.plaintext_pages)
        channel = tls::leave_tls(*channel, net::after(timeout));
    return backend.open(std::move(channel), accepted, spec, kind, max_pages);
}

} // namespace ferry
