// Telling a segment that an address has moved: gratuitous ARP from the link
// that now has it, so neighbours and switches send to it at once rather
// than after their caches expire.
#pragma once

#include "core/unique_fd.hpp"
#include "netlink/link_identity.hpp"

namespace ferry::netlink {

// A packet socket of the namespace it was opened in, which announces there
// from any thread. Closing one waits for an RCU grace period (10-20 ms):
// keep it until the moment has passed.
class announcer {
  public:
    announcer(); // in the calling thread's namespace
    // Broadcasts `rounds` gratuitous ARP requests for each IPv4 address of
    // `link` from its MAC (what `arping -U` sends). Throws if none went.
    void announce(const link_identity& link, int rounds = 2);

  private:
    unique_fd _sock;
};

} // namespace ferry::netlink
