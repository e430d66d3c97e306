#include "netlink/links.hpp"

#include "core/error.hpp"

#include <fmt/format.h>
#include <linux/ip.h>
#include <net/if.h>
#include <netlink/addr.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/link/inet.h>
#include <netlink/route/link/macvlan.h>
#include <netlink/route/route.h>

#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <memory>

namespace ferry::netlink {

namespace {

struct sock_free {
    void operator()(nl_sock* s) const { nl_socket_free(s); }
};
struct cache_free {
    void operator()(nl_cache* c) const { nl_cache_free(c); }
};
struct link_put {
    void operator()(rtnl_link* l) const { rtnl_link_put(l); }
};
struct addr_put {
    void operator()(nl_addr* a) const { nl_addr_put(a); }
};
using sock_ptr = std::unique_ptr<nl_sock, sock_free>;
using cache_ptr = std::unique_ptr<nl_cache, cache_free>;
using link_ptr = std::unique_ptr<rtnl_link, link_put>;

std::string nl_error(int err) {
    return nl_geterror(err);
}

sock_ptr route_socket() {
    sock_ptr s(nl_socket_alloc());
    if (!s)
        throw error("cannot allocate a netlink socket");
    if (const int err = nl_connect(s.get(), NETLINK_ROUTE); err < 0)
        throw error(fmt::format("cannot open rtnetlink: {}", nl_error(err)));
    return s;
}

cache_ptr link_cache(nl_sock* s) {
    nl_cache* c = nullptr;
    if (const int err = rtnl_link_alloc_cache(s, AF_UNSPEC, &c); err < 0)
        throw error(fmt::format("cannot list links: {}", nl_error(err)));
    return cache_ptr(c);
}

// The link called `name`, with its current attributes.
link_ptr find_link(nl_sock* s, const std::string& name) {
    rtnl_link* l = nullptr;
    if (const int err = rtnl_link_get_kernel(s, 0, name.c_str(), &l); err < 0)
        throw error(fmt::format("no link {}: {}", name, nl_error(err)));
    return link_ptr(l);
}

void change_link(nl_sock* s, rtnl_link* current, rtnl_link* change, const std::string& what) {
    if (const int err = rtnl_link_change(s, current, change, 0); err < 0)
        throw error(fmt::format("cannot {}: {}", what, nl_error(err)));
}

} // namespace

link_control::link_control() : _sock(route_socket().release()) {}

link_control::~link_control() {
    nl_socket_free(_sock);
}

std::vector<link_identity> link_control::read_links() {
    nl_sock* s = _sock;
    auto links = link_cache(s);
    nl_cache* addrs_raw = nullptr;
    if (const int err = rtnl_addr_alloc_cache(s, &addrs_raw); err < 0)
        throw error(fmt::format("cannot list addresses: {}", nl_error(err)));
    cache_ptr addrs(addrs_raw);
    std::vector<std::pair<int, link_identity>> found;
    for (nl_object* o = nl_cache_get_first(links.get()); o; o = nl_cache_get_next(o)) {
        auto* l = reinterpret_cast<rtnl_link*>(o);
        if (rtnl_link_get_flags(l) & IFF_LOOPBACK)
            continue;
        link_identity id;
        id.name = rtnl_link_get_name(l);
        if (nl_addr* mac = rtnl_link_get_addr(l); mac && nl_addr_get_len(mac) == id.mac.size())
            std::memcpy(id.mac.data(), nl_addr_get_binary_addr(mac), id.mac.size());
        if (const char* kind = rtnl_link_get_type(l))
            id.kind = kind;
        id.mtu = rtnl_link_get_mtu(l);
        id.parent_index = rtnl_link_get_link(l);
        if (rtnl_link_is_macvlan(l)) {
            char mode[32];
            id.macvlan_mode =
                rtnl_link_macvlan_mode2str(int(rtnl_link_macvlan_get_mode(l)), mode, sizeof mode);
        }
        const int index = rtnl_link_get_ifindex(l);
        for (nl_object* a = nl_cache_get_first(addrs.get()); a; a = nl_cache_get_next(a)) {
            auto* addr = reinterpret_cast<rtnl_addr*>(a);
            if (rtnl_addr_get_ifindex(addr) != index || rtnl_addr_get_family(addr) != AF_INET)
                continue;
            nl_addr* local = rtnl_addr_get_local(addr);
            if (!local || nl_addr_get_len(local) != 4)
                continue;
            ipv4_address v4;
            std::memcpy(&v4.addr, nl_addr_get_binary_addr(local), 4);
            v4.prefix = uint8_t(rtnl_addr_get_prefixlen(addr));
            id.ipv4.push_back(v4);
            if (const char* label = rtnl_addr_get_label(addr);
                label && label == id.name + moved_in_suffix)
                id.moved_in.push_back(v4);
        }
        found.emplace_back(index, std::move(id));
    }
    std::sort(found.begin(), found.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<link_identity> out;
    for (auto& f : found)
        out.push_back(std::move(f.second));
    return out;
}

std::vector<ipv4_route> link_control::read_routes() {
    nl_cache* routes_raw = nullptr;
    if (const int err = rtnl_route_alloc_cache(_sock, AF_INET, 0, &routes_raw); err < 0)
        throw error(fmt::format("cannot list routes: {}", nl_error(err)));
    cache_ptr routes(routes_raw);
    auto links = link_cache(_sock);
    std::vector<ipv4_route> out;
    for (nl_object* o = nl_cache_get_first(routes.get()); o; o = nl_cache_get_next(o)) {
        auto* r = reinterpret_cast<rtnl_route*>(o);
        if (rtnl_route_get_table(r) != RT_TABLE_MAIN || rtnl_route_get_type(r) != RTN_UNICAST ||
            rtnl_route_get_protocol(r) == RTPROT_KERNEL || rtnl_route_get_nnexthops(r) != 1)
            continue;
        ipv4_route route;
        if (nl_addr* dst = rtnl_route_get_dst(r)) {
            if (nl_addr_get_len(dst) == 4)
                std::memcpy(&route.destination.addr, nl_addr_get_binary_addr(dst), 4);
            route.destination.prefix = uint8_t(nl_addr_get_prefixlen(dst));
        } else {
            route.destination.prefix = 0;
        }
        rtnl_nexthop* nh = rtnl_route_nexthop_n(r, 0);
        if (nl_addr* gw = rtnl_route_nh_get_gateway(nh); gw && nl_addr_get_len(gw) == 4)
            std::memcpy(&route.gateway, nl_addr_get_binary_addr(gw), 4);
        char name[IFNAMSIZ];
        if (!rtnl_link_i2name(links.get(), rtnl_route_nh_get_ifindex(nh), name, sizeof name))
            continue;
        route.link = name;
        route.metric = rtnl_route_get_priority(r);
        out.push_back(std::move(route));
    }
    return out;
}

void link_control::add_route(const ipv4_route& route) {
    auto link = find_link(_sock, route.link);
    std::unique_ptr<rtnl_route, void (*)(rtnl_route*)> r(rtnl_route_alloc(), rtnl_route_put);
    std::unique_ptr<nl_addr, addr_put> dst(nl_addr_build(AF_INET, &route.destination.addr, 4));
    rtnl_nexthop* nh = rtnl_route_nh_alloc();
    if (!r || !dst || !nh) {
        if (nh)
            rtnl_route_nh_free(nh);
        throw error("cannot allocate a route");
    }
    nl_addr_set_prefixlen(dst.get(), route.destination.prefix);
    rtnl_route_set_family(r.get(), AF_INET);
    rtnl_route_set_table(r.get(), RT_TABLE_MAIN);
    rtnl_route_set_dst(r.get(), dst.get());
    rtnl_route_set_priority(r.get(), route.metric);
    rtnl_route_set_scope(r.get(), route.gateway ? RT_SCOPE_UNIVERSE : RT_SCOPE_LINK);
    rtnl_route_nh_set_ifindex(nh, rtnl_link_get_ifindex(link.get()));
    if (route.gateway) {
        std::unique_ptr<nl_addr, addr_put> gw(nl_addr_build(AF_INET, &route.gateway, 4));
        if (!gw) {
            rtnl_route_nh_free(nh);
            throw error("cannot allocate a route's gateway");
        }
        rtnl_route_nh_set_gateway(nh, gw.get());
    }
    rtnl_route_add_nexthop(r.get(), nh); // the route owns it now
    if (const int err = rtnl_route_add(_sock, r.get(), NLM_F_CREATE); err < 0 && err != -NLE_EXIST)
        throw error(fmt::format("cannot add the route {}: {}", to_string(route), nl_error(err)));
}

int link_control::arp_ignore(const std::string& name) {
    return ipv4_conf(name, IPV4_DEVCONF_ARP_IGNORE, "arp_ignore");
}

void link_control::set_arp_ignore(const std::string& name, int value) {
    set_ipv4_conf(name, IPV4_DEVCONF_ARP_IGNORE, "arp_ignore", value);
}

int link_control::arp_notify(const std::string& name) {
    return ipv4_conf(name, IPV4_DEVCONF_ARP_NOTIFY, "arp_notify");
}

void link_control::set_arp_notify(const std::string& name, int value) {
    set_ipv4_conf(name, IPV4_DEVCONF_ARP_NOTIFY, "arp_notify", value);
}

int link_control::ipv4_conf(const std::string& name, int id, const char* what) {
    auto l = find_link(_sock, name);
    uint32_t value = 0;
    if (const int err = rtnl_link_inet_get_conf(l.get(), id, &value); err < 0)
        throw error(fmt::format("cannot read {} of {}: {}", what, name, nl_error(err)));
    return int(value);
}

void link_control::set_ipv4_conf(const std::string& name, int id, const char* what, int value) {
    auto current = find_link(_sock, name);
    link_ptr change(rtnl_link_alloc());
    if (!change)
        throw error("cannot allocate a link change");
    if (const int err = rtnl_link_inet_set_conf(change.get(), id, uint32_t(value)); err < 0)
        throw error(fmt::format("cannot set {} of {}: {}", what, name, nl_error(err)));
    change_link(_sock, current.get(), change.get(),
                fmt::format("set {} {} on {}", what, value, name));
}

void link_control::add_ipv4(const std::string& name, const ipv4_address& address, bool moved_in) {
    auto link = find_link(_sock, name);
    std::unique_ptr<rtnl_addr, void (*)(rtnl_addr*)> a(rtnl_addr_alloc(), rtnl_addr_put);
    std::unique_ptr<nl_addr, addr_put> local(nl_addr_build(AF_INET, &address.addr, 4));
    if (!a || !local)
        throw error("cannot allocate an address");
    nl_addr_set_prefixlen(local.get(), address.prefix);
    rtnl_addr_set_ifindex(a.get(), rtnl_link_get_ifindex(link.get()));
    rtnl_addr_set_family(a.get(), AF_INET);
    if (const int err = rtnl_addr_set_local(a.get(), local.get()); err < 0)
        throw error(fmt::format("cannot set address {}: {}", to_string(address), nl_error(err)));
    // A label must fit a link name; a longer one goes unlabelled (a later
    // move then takes every address along).
    if (const std::string label = name + moved_in_suffix; moved_in && label.size() < IFNAMSIZ)
        if (const int err = rtnl_addr_set_label(a.get(), label.c_str()); err < 0)
            throw error(fmt::format("cannot label {}: {}", to_string(address), nl_error(err)));
    if (const int err = rtnl_addr_add(_sock, a.get(), 0); err < 0 && err != -NLE_EXIST)
        throw error(fmt::format("cannot give {} the address {}: {}", name, to_string(address),
                                nl_error(err)));
}

void link_control::set_mac(const std::string& name, const mac_address& mac) {
    auto current = find_link(_sock, name);
    if (nl_addr* now = rtnl_link_get_addr(current.get());
        now && nl_addr_get_len(now) == mac.size() &&
        std::memcmp(nl_addr_get_binary_addr(now), mac.data(), mac.size()) == 0)
        return;
    link_ptr change(rtnl_link_alloc());
    std::unique_ptr<nl_addr, addr_put> lladdr(nl_addr_build(AF_LLC, mac.data(), mac.size()));
    if (!change || !lladdr)
        throw error("cannot allocate a link change");
    rtnl_link_set_addr(change.get(), lladdr.get());
    change_link(_sock, current.get(), change.get(),
                fmt::format("give {} the MAC {}", name, to_string(mac)));
}

void link_control::make_macvlan(int netns, const link_identity& source, const std::string& parent) {
    if (source.kind != "macvlan")
        throw error(fmt::format("{} is a {} link: only macvlan links are made anew", source.name,
                                source.kind.empty() ? "physical" : source.kind));
    link_ptr host_link;
    try {
        host_link = find_link(_sock, parent);
    } catch (const error& e) {
        throw error(fmt::format("this host has no link {} to put {} on ({})", parent, source.name,
                                e.what()));
    }
    link_ptr link(rtnl_link_macvlan_alloc());
    if (!link)
        throw error("cannot allocate a macvlan link");
    rtnl_link_set_name(link.get(), source.name.c_str());
    rtnl_link_set_link(link.get(), rtnl_link_get_ifindex(host_link.get()));
    if (source.mtu)
        rtnl_link_set_mtu(link.get(), source.mtu);
    if (!source.macvlan_mode.empty()) {
        const int mode = rtnl_link_macvlan_str2mode(source.macvlan_mode.c_str());
        if (mode < 0)
            throw error(
                fmt::format("{}: unknown macvlan mode '{}'", source.name, source.macvlan_mode));
        rtnl_link_macvlan_set_mode(link.get(), uint32_t(mode));
    }
    rtnl_link_set_ns_fd(link.get(), netns);
    if (const int err = rtnl_link_add(_sock, link.get(), NLM_F_CREATE | NLM_F_EXCL); err < 0)
        throw error(
            fmt::format("cannot make {} (macvlan on {}): {}", source.name, parent, nl_error(err)));
}

void link_control::set_up(const std::string& name) {
    auto current = find_link(_sock, name);
    if (rtnl_link_get_flags(current.get()) & IFF_UP)
        return;
    link_ptr change(rtnl_link_alloc());
    if (!change)
        throw error("cannot allocate a link change");
    rtnl_link_set_flags(change.get(), IFF_UP);
    change_link(_sock, current.get(), change.get(), fmt::format("bring {} up", name));
}

void link_control::delete_link(const std::string& name) {
    auto current = find_link(_sock, name);
    if (const int err = rtnl_link_delete(_sock, current.get()); err < 0)
        throw error(fmt::format("cannot delete {}: {}", name, nl_error(err)));
}

} // namespace ferry::netlink
