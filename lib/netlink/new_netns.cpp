#include "netlink/new_netns.hpp"

#include "core/error.hpp"
#include "netlink/links.hpp"
#include "netlink/netns.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <netlink/netlink.h>
#include <netlink/route/link.h>
#include <netlink/route/link/macvlan.h>
#include <sched.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <memory>
#include <thread>

namespace ferry::netlink {

unique_fd make_netns() {
    unique_fd fd;
    std::exception_ptr failed;
    // A thread of its own: unsharing moves only the calling thread.
    std::thread worker([&] {
        try {
            if (::unshare(CLONE_NEWNET) != 0)
                throw error(
                    fmt::format("cannot make a network namespace: {}", std::strerror(errno)));
            fd.reset(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
            if (!fd)
                throw sys_error("open the new network namespace");
            link_control().set_up("lo");
        } catch (...) {
            failed = std::current_exception();
        }
    });
    worker.join();
    if (failed)
        std::rethrow_exception(failed);
    return fd;
}

std::filesystem::path netns_path(int netns) {
    return fmt::format("/proc/self/fd/{}", netns);
}

void add_macvlan(int netns, const link_identity& source, const std::string& parent) {
    if (source.kind != "macvlan")
        throw error(fmt::format("{} is a {} link: only macvlan links are made anew", source.name,
                                source.kind.empty() ? "physical" : source.kind));
    std::unique_ptr<nl_sock, void (*)(nl_sock*)> sock(nl_socket_alloc(), nl_socket_free);
    if (!sock)
        throw error("cannot allocate a netlink socket");
    if (const int err = nl_connect(sock.get(), NETLINK_ROUTE); err < 0)
        throw error(fmt::format("cannot open rtnetlink: {}", nl_geterror(err)));
    rtnl_link* host_link = nullptr;
    if (const int err = rtnl_link_get_kernel(sock.get(), 0, parent.c_str(), &host_link); err < 0)
        throw error(fmt::format("this host has no link {} to put {} on: {}", parent, source.name,
                                nl_geterror(err)));
    const int parent_index = rtnl_link_get_ifindex(host_link);
    rtnl_link_put(host_link);
    std::unique_ptr<rtnl_link, void (*)(rtnl_link*)> link(rtnl_link_macvlan_alloc(), rtnl_link_put);
    if (!link)
        throw error("cannot allocate a macvlan link");
    rtnl_link_set_name(link.get(), source.name.c_str());
    rtnl_link_set_link(link.get(), parent_index);
    if (source.mtu)
        rtnl_link_set_mtu(link.get(), source.mtu);
    if (!source.macvlan_mode.empty()) {
        const int mode = rtnl_link_macvlan_str2mode(source.macvlan_mode.c_str());
        if (mode < 0)
            throw error(
                fmt::format("{}: unknown macvlan mode '{}'", source.name, source.macvlan_mode));
        rtnl_link_macvlan_set_mode(link.get(), uint32_t(mode));
    }
    // Made straight inside the namespace: its name never meets the host's.
    rtnl_link_set_ns_fd(link.get(), netns);
    if (const int err = rtnl_link_add(sock.get(), link.get(), NLM_F_CREATE | NLM_F_EXCL); err < 0)
        throw error(fmt::format("cannot make {} (macvlan on {}): {}", source.name, parent,
                                nl_geterror(err)));
    in_netns(netns_path(netns), [&] { link_control().set_up(source.name); });
}

} // namespace ferry::netlink
