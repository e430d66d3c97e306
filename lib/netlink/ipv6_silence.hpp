// A link's IPv6 kept off while a copy of a workload must stay silent. A link
// that is up sends duplicate address detection, MLD reports and router
// solicitations on its own, up to a second or more after it came up, from
// whatever MAC it has then. A copy that already has the source's MAC would
// teach the segment's switches that the MAC lives here: the source's
// clients' packets then reach a copy whose kernel resets their connections
// if the migration is called off. Off (disable_ipv6 1) until the copy takes
// over; then back as it was, and IPv6 starts anew from the source's MAC.
#pragma once

#include "netlink/conf_file.hpp"

#include <string>

namespace ferry::netlink {

// net.ipv6.conf.LINK.disable_ipv6 of the calling thread's namespace, to be
// held at 1. A kernel without IPv6 has nothing to silence: the override
// then does nothing. Throws if the link has no such file otherwise.
conf_override ipv6_silence(const std::string& link);

} // namespace ferry::netlink
