// The source's end of a page channel's connection, for every backend: page
// requests in (tcp's whole traffic; "done" alone on one-sided fabrics),
// replies out, until the destination closes it.
#pragma once

#include "sys/stream.hpp"
#include "transport/page_source.hpp"
#include "wire/page_wire.hpp"

namespace ferry::transport {

// Returns when the peer closes the connection or sends a malformed frame
// (logged); throws on a failed write.
void serve_requests(net::stream& conn, page_source& src);

// Writes one page reply frame (wire/page_wire.hpp): the header, then with
// status ok rep.nr_pages checksums and pages. Returns the bytes written;
// throws on a failed write or after `until`.
uint64_t send_page_reply(net::stream& conn, const wire::page_reply& rep, const uint64_t* checksums,
                         const std::byte* pages, net::deadline until);

} // namespace ferry::transport
