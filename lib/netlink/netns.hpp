// Work inside another network namespace without moving the caller: the work
// runs on a thread of its own, which joins the namespace (setns affects only
// the calling thread for network namespaces). Sockets it opens stay in that
// namespace after it returns.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <functional>

namespace ferry::netlink {

// Runs `work` in the network namespace `netns` (a /proc/PID/ns/net or a
// bind mount such as /run/netns/NAME); rethrows what it throws.
void in_netns(const std::filesystem::path& netns, const std::function<void()>& work);

// /proc/PID/ns/net.
std::filesystem::path netns_of(pid_t pid);

// Whether `pid` has a network namespace of its own (not this process's).
bool has_own_netns(pid_t pid);

} // namespace ferry::netlink
