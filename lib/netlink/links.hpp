// The links of a network namespace, through libnl (rtnetlink): what they
// are, and the changes a moving network needs. A link_control acts in the
// namespace it was opened in (open it inside: netns.hpp's in_netns), from
// any thread.
#pragma once

#include "netlink/link_identity.hpp"

#include <string>
#include <vector>

struct nl_sock;

namespace ferry::netlink {

// arp_ignore 8: answer no ARP request at all, which a copy of an address
// still in use elsewhere needs until it takes the address over.
inline constexpr int arp_ignore_all = 8;
// The label suffix of an address a move brought in (LINK:ferry).
inline constexpr const char* moved_in_suffix = ":ferry";

class link_control {
  public:
    link_control(); // in the calling thread's namespace; throws if it cannot
    ~link_control();
    link_control(const link_control&) = delete;
    link_control& operator=(const link_control&) = delete;

    // Every link but loopback, with its MAC, IPv4 addresses, kind, MTU and
    // parent's ifindex, in ifindex order.
    std::vector<link_identity> read_links();
    // The IPv4 routes of the main table that are not the kernel's own.
    std::vector<ipv4_route> read_routes();
    void add_route(const ipv4_route& route);
    // The link's IPv4 arp_ignore (net.ipv4.conf.LINK.arp_ignore).
    int arp_ignore(const std::string& link);
    void set_arp_ignore(const std::string& link, int value);
    // Its arp_notify: 1 announces the link's addresses when its MAC changes.
    int arp_notify(const std::string& link);
    void set_arp_notify(const std::string& link, int value);
    // Gives the link this IPv4 address (no-op if it has it). With
    // arp_ignore_all set first, nobody on the segment learns of it.
    // `moved_in` labels it LINK:ferry: an address a move brought in, which
    // read_links reports as such.
    void add_ipv4(const std::string& link, const ipv4_address& address, bool moved_in = false);
    // Gives the link this MAC (no-op if it has it).
    void set_mac(const std::string& link, const mac_address& mac);
    void set_up(const std::string& link);
    void delete_link(const std::string& link);
    // Makes a macvlan called `source.name` on this namespace's link
    // `parent`, in `source`'s mode and MTU, straight inside the namespace
    // `netns` holds (its name never meets this namespace's), down, with a
    // MAC the kernel picks. new_netns.hpp's add_macvlan brings it up.
    void make_macvlan(int netns, const link_identity& source, const std::string& parent);

  private:
    int ipv4_conf(const std::string& link, int id, const char* what);
    void set_ipv4_conf(const std::string& link, int id, const char* what, int value);
    nl_sock* _sock;
};

} // namespace ferry::netlink
