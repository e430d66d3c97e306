// The links of the calling thread's network namespace, through libnl
// (rtnetlink): what they are, and the two changes a moving network needs.
// Run these inside the namespace (netns.hpp's in_netns).
#pragma once

#include "netlink/link_identity.hpp"

#include <string>
#include <vector>

namespace ferry::netlink {

// Every link but loopback, with its MAC and IPv4 addresses, in ifindex order.
std::vector<link_identity> read_links();

// The link's IPv4 arp_ignore (net.ipv4.conf.LINK.arp_ignore). 8: answer no
// ARP request at all, which a copy of an address still in use elsewhere
// needs until it takes the address over.
int arp_ignore(const std::string& link);
void set_arp_ignore(const std::string& link, int value);

// Gives the link this IPv4 address (no-op if it has it). With arp_ignore
// 8 set first, nobody on the segment learns of it.
void add_ipv4(const std::string& link, const ipv4_address& address);

// Gives the link this MAC (no-op if it has it).
void set_mac(const std::string& link, const mac_address& mac);

} // namespace ferry::netlink
