// Telling a segment that an address has moved: gratuitous ARP from the link
// that now has it, so neighbours and switches send to it at once rather
// than after their caches expire. Run inside the namespace (in_netns).
#pragma once

#include "netlink/link_identity.hpp"

namespace ferry::netlink {

// Broadcasts `rounds` gratuitous ARP requests for each IPv4 address of
// `link` from its MAC (what `arping -U` sends). Throws if none could be sent.
void announce_ipv4(const link_identity& link, int rounds = 2);

} // namespace ferry::netlink
