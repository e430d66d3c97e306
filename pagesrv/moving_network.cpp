// A workload whose network moves with it (issue 18). A container's engine
// gives the copy links of its own (addresses and MACs,
// engines/engine_restore.hpp); for a process tree the daemon makes its
// namespace before the freeze: the source's macvlan links anew on this
// host's link, with MACs of their own, and its routes.
// Before CRIU restores a socket, the daemon adds the source's addresses to
// them, for CRIU to restore the sockets on, but the links ignore ARP until the
// resume: answering for the addresses would draw the clients' traffic to a
// copy with no sockets yet, whose kernel would reset their connections. Nor
// does IPv6 send from them (ipv6_silence.hpp): its frames would draw the
// same traffic once the copy has the source's MACs, which it takes while
// the migrator decides (the change waits for an RCU grace period). At the
// resume it answers again and tells the segment where they are now.
// Packets the source's lock dropped during the freeze come from the
// migrator afterwards, and go in as if they had just arrived.
#include "incoming_session.hpp"

#include "core/clock.hpp"
#include "netlink/announce.hpp"
#include "netlink/links.hpp"
#include "netlink/netns.hpp"
#include "netlink/new_netns.hpp"
#include "netlink/packet_inject.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <future>

namespace ferry::pagesrv {

namespace {

// From the gate's answer to CRIU's report that the tasks run.
constexpr auto resumed_report_limit = std::chrono::seconds(2);
// How long the gate's answer waits for the copy's MAC change (4-8 ms here).
constexpr auto mac_change_limit = std::chrono::milliseconds(2000);
// How long the host's grace periods stay expedited for it, at most.
constexpr auto expedited_rcu_limit = std::chrono::milliseconds(2000);

// The network namespace runc's bundle puts the container in; empty when
// runc makes a new one (docker's, which libnetwork's hook configures at
// CRIU's setup-namespaces).
std::filesystem::path bundle_netns(const std::filesystem::path& bundle) {
    std::ifstream in(bundle / "config.json");
    const auto config = nlohmann::json::parse(in);
    for (const auto& ns : config.at("linux").at("namespaces"))
        if (ns.value("type", "") == "network")
            return ns.value("path", "");
    throw error(fmt::format("{}/config.json gives the container no network namespace of its own",
                            bundle.string()));
}

} // namespace

void incoming_session::quiet_copy_network(const std::filesystem::path& bundle) {
    if (_moving_links.empty() || _copy_quiet)
        return;
    const auto netns = bundle_netns(bundle);
    if (netns.empty()) {
        // Made as CRIU restores (docker): at setup-namespaces, once runc's
        // hooks have configured it.
        _log->info("the copy's network namespace is made during the restore");
        return;
    }
    quiet_netns(netns);
}

// CRIU restores the tree into this namespace (an external one: restore_criu.cpp).
void incoming_session::make_copy_netns() {
    _copy_netns = netlink::make_netns();
    const auto& parent = _d.config().macvlan_parent;
    for (const auto& l : _moving_links) {
        if (parent.empty() && l.parent.empty())
            throw error(fmt::format("the source did not say which link {} sits on; start this "
                                    "daemon with --macvlan-parent",
                                    l.name));
        netlink::add_macvlan(_copy_netns.get(), l, parent.empty() ? l.parent : parent);
    }
    quiet_netns(netlink::netns_path(_copy_netns.get()));
    // Routes need their links' addresses, which the quiet step gave.
    for (const auto& r : _moving_routes)
        _copy_links->add_route(r);
    _log->info("made the process tree's network namespace: {}{}",
               _moving_links.empty() ? "loopback only" : netlink::describe(_moving_links),
               _moving_routes.empty() ? "" : fmt::format(" ({} routes)", _moving_routes.size()));
}

// Sockets opened inside stay there: the takeover then needs no trip into
// the namespace, and no packet socket closes in its way.
void incoming_session::open_copy_sockets(const std::filesystem::path& netns) {
    netlink::in_netns(netns, [&] {
        _copy_links = std::make_unique<netlink::link_control>();
        _copy_announcer = std::make_unique<netlink::announcer>();
        _copy_injector = netlink::open_injector();
        for (const auto& l : _moving_links)
            _copy_ipv6.push_back(netlink::ipv6_silence(l.name));
    });
}

void incoming_session::quiet_netns(const std::filesystem::path& netns) {
    if (_moving_links.empty() || _copy_quiet)
        return;
    open_copy_sockets(netns);
    // The engine's network plugin announced the copy's first addresses:
    // one of the source's among them has drawn its clients here already.
    for (const auto& copy : _copy_links->read_links())
        for (const auto& l : _moving_links)
            for (const auto& a : l.ipv4)
                if (copy.name == l.name &&
                    std::find(copy.ipv4.begin(), copy.ipv4.end(), a) != copy.ipv4.end())
                    throw error(fmt::format(
                        "the copy got the container's own address {} from this host's IPAM, "
                        "which announced it: the hosts' address pools overlap",
                        netlink::address_only(a)));
    // IPv6 off, and arp_notify off: the MAC change ahead must not announce
    // anything, and no frame may leave from the source's MAC until the
    // takeover (netlink/ipv6_silence.hpp says why).
    const uint64_t t0 = monotonic_ns();
    try {
        for (auto& v6 : _copy_ipv6)
            v6.apply();
    } catch (const std::exception& e) {
        _ipv6_loud = true;
        _log->warn("the copy's IPv6 stays on ({}): it takes the source's MACs only at the resume",
                   e.what());
    }
    const uint64_t t_ipv6 = monotonic_ns();
    for (const auto& l : _moving_links) {
        _arp_before[l.name] = {_copy_links->arp_ignore(l.name), _copy_links->arp_notify(l.name)};
        _copy_links->set_arp_ignore(l.name, netlink::arp_ignore_all);
        _copy_links->set_arp_notify(l.name, 0);
        for (const auto& a : l.ipv4)
            _copy_links->add_ipv4(l.name, a, true);
    }
    _copy_quiet = true;
    _log->info("the copy has the source's addresses, and answers no ARP until the resume: {} "
               "(IPv6 off in {:.2f} ms)",
               netlink::describe(_moving_links), ns_to_ms(t_ipv6 - t0));
}

// The copy is quiet (arp_ignore 8, arp_notify 0, IPv6 off) and its tasks
// cannot run before the gate's answer, so it may take the MACs before the
// decision: the kernel sends nothing for the change itself, nor from the
// links after it. Not before its sockets are restored: with the MACs and no
// sockets, it would take in and reset what a switch floods to them (one
// whose entry for a MAC aged out). If the migrator refuses, the copy is
// killed with them.
void incoming_session::begin_taking_macs() noexcept {
    if (!_copy_quiet || _ipv6_loud || _taking_macs.valid())
        return;
    try {
        _taking_macs = std::async(std::launch::async, [this] {
            // Each change waits for an RCU grace period (macvlan rehashes
            // the link): expedited, ~20 µs instead of 4-20 ms here.
            std::optional<expedited_rcu::hold> fast;
            if (!_d.config().no_expedited_rcu)
                fast.emplace(_d.rcu_knob(), expedited_rcu_limit);
            for (const auto& l : _moving_links)
                _copy_links->set_mac(l.name, l.mac);
            if (fast)
                _mac_change_rcu = fast->state();
        });
    } catch (const std::exception& e) {
        _log->warn("cannot start the early MAC change ({}): it happens at the takeover", e.what());
    }
}

// Once the migrator said resume, before the copy's tasks may run: the
// links have the source's MACs. A task that sent first would make the copy
// ask ARP from its own MAC with the source's address, and a client takes no
// newer ARP answer within a second of that (neigh locktime): it would send
// to a MAC no one has for a second. Seen with docker: the echo server's
// first reply, queued behind that ARP, was lost in the MAC change and went
// again only after TCP's 1 s timeout. Usually done by then (it began with
// the request to resume).
//
// Bounded before the gate's answer: a change stuck in the kernel (RTNL held
// elsewhere) must not hold the workload, which then runs with the stall risk
// above; the takeover, after the answer, joins it whatever it takes.
void incoming_session::finish_taking_macs(bool before_resume) noexcept {
    if (!_taking_macs.valid())
        return;
    const uint64_t t0 = monotonic_ns();
    if (before_resume && _taking_macs.wait_for(mac_change_limit) != std::future_status::ready) {
        _mac_wait_ns = monotonic_ns() - t0;
        _log->warn("the copy's MAC change did not end within {} ms: it resumes before it",
                   mac_change_limit.count());
        return;
    }
    try {
        _taking_macs.get();
        if (before_resume)
            _mac_wait_ns = monotonic_ns() - t0;
        return;
    } catch (const std::exception& e) {
        _log->warn("the early MAC change failed ({}); changing them now", e.what());
    }
    try {
        for (const auto& l : _moving_links)
            _copy_links->set_mac(l.name, l.mac);
    } catch (const std::exception& e) {
        _log->error("the copy cannot take the source's MACs: {}", e.what());
    }
}

// After the gate said resume: errors are logged, the copy runs on (its
// clients then wait for their ARP entries to expire).
void incoming_session::take_over_network(pid_t root) noexcept {
    if (_moving_links.empty())
        return;
    const uint64_t t0 = monotonic_ns();
    uint64_t t_mac = 0, t_arp = 0;
    try {
        if (!_copy_links) // never quieted (its restore did not ask): open them now
            open_copy_sockets(netlink::netns_of(root));
        finish_taking_macs(false);
        const uint64_t t_open = monotonic_ns();
        for (const auto& l : _moving_links) {
            _copy_links->set_mac(l.name, l.mac); // done already, unless the early change failed
            t_mac = monotonic_ns();
            const auto found = _arp_before.find(l.name);
            const arp_settings before = found != _arp_before.end() ? found->second : arp_settings{};
            if (_copy_links->arp_ignore(l.name) != before.ignore)
                _copy_links->set_arp_ignore(l.name, before.ignore);
            if (before.notify != 0)
                _copy_links->set_arp_notify(l.name, before.notify);
            t_arp = monotonic_ns();
            _copy_announcer->announce(l);
        }
        const uint64_t t1 = monotonic_ns();
        // IPv6 last: it starts anew from the source's MAC, and IPv4's
        // clients need none of it.
        for (auto& v6 : _copy_ipv6)
            v6.restore();
        const uint64_t t2 = monotonic_ns();
        _log->info("took over {} in {:.2f} ms (opening and the early MAC change {:.2f}, MAC "
                   "{:.2f}, arp_ignore and arp_notify {:.2f}, announcing {:.2f}), IPv6 back in "
                   "{:.2f} ms; the resume waited {:.2f} ms for the early MAC change "
                   "(expedited grace periods: {})",
                   netlink::describe(_moving_links), ns_to_ms(t1 - t0), ns_to_ms(t_open - t0),
                   ns_to_ms(t_mac - t_open), ns_to_ms(t_arp - t_mac), ns_to_ms(t1 - t_arp),
                   ns_to_ms(t2 - t1), ns_to_ms(_mac_wait_ns),
                   _mac_change_rcu.empty() ? "off" : _mac_change_rcu);
    } catch (const std::exception& e) {
        _log->error("the copy could not take over its network: {}", e.what());
    }
}

void incoming_session::deliver_held_packets(const FerryControl__HeldPackets& held) noexcept {
    if (held.has_last && held.last)
        _held_packets_done = true;
    if (_root_pid <= 0 || held.n_ipv4 == 0)
        return;
    if (!_d.criu_events().moments(_id).resumed &&
        !_d.criu_events().wait_for(_id, "resumed", resumed_report_limit).resumed)
        _log->warn("CRIU did not report the resume; delivering the held packets anyway");
    std::vector<std::vector<uint8_t>> packets;
    for (size_t i = 0; i < held.n_ipv4; i++)
        packets.emplace_back(held.ipv4[i].data, held.ipv4[i].data + held.ipv4[i].len);
    if (!_copy_injector) {
        _log->warn("no way into the copy's namespace: the {} packets the source held are lost",
                   packets.size());
        return;
    }
    const size_t delivered = netlink::inject_ipv4(_copy_injector.get(), packets);
    _log->info("delivered {} of {} packets the source held during the freeze", delivered,
               packets.size());
}

// One message from the migrator after the resume: held packets, or its
// end (_held_packets_done once nothing more is to come).
void incoming_session::receive_held_packets() noexcept {
    try {
        auto m = control::receive(_conn, net::after(control_timeout));
        if (m && m->body_case == FERRY_CONTROL__ENVELOPE__BODY_HELD_PACKETS) {
            deliver_held_packets(*m->held_packets);
            return;
        }
        if (m)
            _log->warn("unexpected message {} from the migrator after the resume",
                       int(m->body_case));
    } catch (const std::exception& ex) {
        _log->warn("the migrator's connection: {}", ex.what());
    }
    _held_packets_done = true;
}

} // namespace ferry::pagesrv
