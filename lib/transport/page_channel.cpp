#include "transport/page_channel.hpp"

#include "core/error.hpp"
#include "core/page.hpp"
#include "tls/tls_stream.hpp"
#include "transport/backend.hpp"
#include "wire/control.hpp"

namespace ferry {

page_channel_request::page_channel_request(const fabric_spec& spec, const net::endpoint& source,
                                           const tls::credentials_ptr& creds,
                                           const std::string& migration_id,
                                           FerryControl__ChannelKind kind, uint32_t max_pages,
                                           std::chrono::milliseconds timeout)
    : _spec(spec), _source(source), _kind(kind), _max_pages(max_pages), _timeout(timeout) {
    // The handshake goes over TCP whatever the fabric, as RDMA's connection
    // manager does: it names the migration and the fabric, and the source's
    // acceptance says what the backend needs (shm: its region).
    (void)transport::find(spec.name); // an unknown fabric fails before connecting
    auto conn = tls::connect(source, creds, timeout);
    FerryControl__PageChannelOpen open = FERRY_CONTROL__PAGE_CHANNEL_OPEN__INIT;
    open.migration_id = const_cast<char*>(migration_id.c_str());
    open.kind = kind;
    open.fabric = const_cast<char*>(spec.name.c_str());
    control::send_message(*conn, open, net::after(timeout));
    _conn = std::move(conn);
}

page_channel_request::page_channel_request(page_channel_request&&) noexcept = default;
page_channel_request::~page_channel_request() = default;

std::unique_ptr<page_channel>
page_channel_request::accepted(std::chrono::milliseconds acceptance_wait) {
    if (!_conn)
        throw error("a page channel request is accepted only once");
    auto conn = std::move(_conn);
    auto reply = control::receive(*conn, net::after(std::max(_timeout, acceptance_wait)));
    control::expect(reply.get(), FERRY_CONTROL__ENVELOPE__BODY_PAGE_CHANNEL_ACCEPTED,
                    "source " + _source.to_string());
    const auto& accepted = *reply->page_channel_accepted;
    if (accepted.page_size != page_size)
        throw error("the source uses a different page size");
    const uint32_t max_pages = std::min(_max_pages, accepted.max_pages_per_request);
    std::unique_ptr<net::stream> channel = std::move(conn);
    if (accepted.has_plaintext_pages && accepted.plaintext_pages)
        channel = tls::leave_tls(*channel, net::after(_timeout));
    return transport::find(_spec.name).open(std::move(channel), accepted, _spec, _kind, max_pages);
}

std::unique_ptr<page_channel>
open_page_channel(const fabric_spec& spec, const net::endpoint& source,
                  const tls::credentials_ptr& creds, const std::string& migration_id,
                  FerryControl__ChannelKind kind, uint32_t max_pages,
                  std::chrono::milliseconds timeout, std::chrono::milliseconds acceptance_wait) {
    return page_channel_request(spec, source, creds, migration_id, kind, max_pages, timeout)
        .accepted(acceptance_wait);
}

} // namespace ferry
