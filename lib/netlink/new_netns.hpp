// A network namespace of Ferry's own making, for a process tree whose
// network moves (a container's is its engine's): the destination makes it
// before the freeze, and CRIU restores the tree into it (an external
// namespace, inherited by fd), so none of it happens in the downtime.
#pragma once

#include "core/unique_fd.hpp"
#include "netlink/link_identity.hpp"

#include <filesystem>
#include <string>

namespace ferry::netlink {

// A new network namespace with its loopback up; the fd holds it.
unique_fd make_netns();

// A path to the namespace `netns` holds, for in_netns.
std::filesystem::path netns_path(int netns);

// Makes the source's link anew in `netns`: a macvlan on this host's link
// `parent`, with the source's name, mode and MTU, up, with no address and
// a MAC of its own (the takeover gives it the source's: until then its
// frames must not teach the segment the source's MAC).
void add_macvlan(int netns, const link_identity& source, const std::string& parent);

} // namespace ferry::netlink
