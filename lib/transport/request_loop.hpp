// The source's end of a page channel's connection, for every backend: page
// requests in (tcp's whole traffic; "done" alone on one-sided fabrics),
// replies out, until the destination closes it.
#pragma once

#include "sys/stream.hpp"
#include "transport/page_source.hpp"

namespace ferry::transport {

// Returns when the peer closes the connection or sends a malformed frame
// (logged); throws on a failed write.
void serve_requests(net::stream& conn, page_source& src);

} // namespace ferry::transport
