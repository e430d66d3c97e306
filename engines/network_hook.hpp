// Docker's container network, set up before a restore instead of inside it.
//
// Docker leaves a container's network namespace to runc (the bundle's
// config.json names no path for it) and configures it from a prestart hook,
// libnetwork-setkey, which runc runs once the namespace exists: in a
// restore, at CRIU's setup-namespaces, inside the downtime. On a
// user-defined network that hook took ~150 ms here (dockerd re-executes
// itself in the namespace to set up its DNS resolver's iptables rules).
//
// Ferry runs that hook before the freeze instead, on a namespace made for
// it, and rewrites config.json to name that namespace (docker's own
// sandbox path) with the hook taken out. runc then gives CRIU the namespace
// as an external one (inherit_fd extRootNetNS), which CRIU joins; that
// needs images that say the namespace is external, so the source's dump
// marks it so (external net[INODE]:extRootNetNS), as runc's own
// checkpoint does for a namespace with a path. Both ends decide from the
// same config.json (docker makes the destination's from the source's
// configuration), so they agree.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <string>

namespace ferry::engines {

// The key runc gives CRIU for a container's network namespace that its
// bundle names (runc's criuNsToKey(CLONE_NEWNET)).
inline constexpr const char* runc_netns_key = "extRootNetNS";

// True when an OCI spec's network namespace is made by runc (no path) and
// configured by libnetwork's prestart hook: docker's way.
bool network_set_up_by_hook(const nlohmann::json& spec);

// True when runc makes the container's network namespace inside the
// restore (the spec has one, with no path): only then is there anything to
// do to it at CRIU's setup-namespaces. After the hook above has run ahead,
// docker's bundle names a path too.
bool network_namespace_made_in_restore(const nlohmann::json& spec);

// Runs the bundle's libnetwork-setkey hook now, for a new network namespace
// held by a placeholder process, and rewrites the bundle's config.json to
// name the path dockerd bound that namespace to, without the hook. Returns
// that path. `container_id` is runc's id of the container; every wait is
// bounded by `bound`. Throws ferry::error with what went wrong (the hook's
// own message included); config.json is then unchanged.
std::filesystem::path set_up_network_before_restore(const std::filesystem::path& bundle,
                                                    const std::string& container_id,
                                                    std::chrono::milliseconds bound);

// The mount point of a network namespace bound to a path (an nsfs mount
// whose root is net:[inode]), from mountinfo's text; empty if none.
std::filesystem::path netns_mount_point(const std::string& mountinfo, uint64_t inode);

} // namespace ferry::engines
