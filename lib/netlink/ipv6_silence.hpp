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

class ipv6_silence {
  public:
    // Opens net.ipv6.conf.LINK.disable_ipv6 of the calling thread's
    // namespace (the file acts there from any thread). A kernel without
    // IPv6 has nothing to silence: every call is then a no-op. Throws if
    // the link has no such file otherwise.
    explicit ipv6_silence(const std::string& link);
    // Turns IPv6 off on the link, remembering the setting before.
    void silence();
    // Puts the setting back; no-op unless silence() changed it.
    void restore();
    bool silenced() const { return _silenced; }

  private:
    conf_file _conf;
    int _before = 0;
    bool _silenced = false;
};

} // namespace ferry::netlink
