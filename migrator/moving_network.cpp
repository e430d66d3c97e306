// A workload whose network moves with it, on the source side (the
// destination's part is pagesrv/moving_network.cpp):
//   - its links, and for a process tree its routes, for the destination to
//     give the copy (a process tree's macvlan links are made anew there, on
//     the host link of the same name);
//   - from before the freeze, the packets that arrive for its addresses are
//     held (CRIU's network lock drops them here during the freeze) and,
//     once the copy runs, handed to the destination, which delivers them:
//     their senders need not wait out a retransmission timeout;
//   - at the commit its links stop answering ARP: the copy is about to
//     take over their MACs and addresses, and the segment must learn one
//     place for them. An abort that resumes the source undoes it;
//   - a process tree's links are removed once it is gone: a namespace that
//     outlives it (a named one) must not keep the MAC on the segment.
#include "migration.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "netlink/announce.hpp"
#include "netlink/links.hpp"
#include "netlink/netns.hpp"
#include "netlink/new_netns.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <net/if.h>
#include <sys/stat.h>

#include <algorithm>

namespace ferry::migrator {

namespace {

// Packets held this long before the freeze may not have reached the
// dumped socket state yet; delivering one twice is harmless to TCP.
constexpr uint64_t held_before_freeze_ns = 2'000'000;

} // namespace

void migration::read_moving_links() {
    const auto netns = netlink::netns_of(_opt.pid);
    netlink::in_netns(netns, [&] {
        netlink::link_control links;
        _r.moving_links = links.read_links();
        if (!_container)
            _r.moving_routes = links.read_routes();
        for (const auto& l : _r.moving_links)
            _source_arp_silence.emplace_back(netlink::conf_file("ipv4", l.name, "arp_ignore"),
                                             netlink::arp_ignore_all);
    });
    // The addresses an earlier move brought in are the workload's; the one
    // the engine gave the copy on arrival stays behind, or each move would
    // add one (and this host's IPAM may hand an old one out again).
    for (auto& l : _r.moving_links)
        if (!l.moved_in.empty())
            l.ipv4 = l.moved_in;
    if (_container)
        return;
    for (auto& l : _r.moving_links) {
        if (l.kind != "macvlan")
            throw error(fmt::format(
                "pid {}'s network namespace has {}, a {} link: Ferry moves a process tree's "
                "macvlan links only (with --tcp-close the connections close instead)",
                _opt.pid, l.name, l.kind.empty() ? "physical" : l.kind));
        // The parent is in the namespace the link was made in: the host's,
        // where the migrator runs.
        char parent[IF_NAMESIZE];
        if (l.parent_index <= 0 || !::if_indextoname(unsigned(l.parent_index), parent))
            throw error(fmt::format("cannot find the host link that {} of pid {} sits on", l.name,
                                    _opt.pid));
        l.parent = parent;
    }
    _source_netns.reset(::open(netns.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st {};
    if (!_source_netns || ::fstat(_source_netns.get(), &st) != 0)
        throw sys_error("open " + netns.string());
    _source_netns_inode = st.st_ino;
}

void migration::hold_packets() {
    if (!_r.connections_move || _r.moving_links.empty())
        return;
    try {
        _held =
            std::make_unique<netlink::held_packets>(netlink::netns_of(_opt.pid), _r.moving_links);
    } catch (const std::exception& e) {
        _log->warn("packets arriving during the freeze will not be handed over: {}", e.what());
    }
}

// `last`: once the copy runs, what came after the first batch; the hold
// ends. The last batch goes even when empty: the destination waits for it.
// (A batch takes every packet held so far: only the first finds any from
// before the freeze.)
void migration::hand_over_packets(bool last) {
    if (!_held)
        return;
    const uint64_t since =
        _r.t_freeze > held_before_freeze_ns ? _r.t_freeze - held_before_freeze_ns : 0;
    if (last)
        _held->stop();
    const auto held = _held->take(since);
    _r.held_packets += held.size();
    if (last) {
        _r.held_packets_overflowed = _held->overflowed();
        _held.reset();
    }
    if (held.empty() && !last)
        return;
    std::vector<ProtobufCBinaryData> packets;
    for (const auto& h : held)
        packets.push_back({h.ipv4.size(), const_cast<uint8_t*>(h.ipv4.data())});
    FerryControl__HeldPackets m = FERRY_CONTROL__HELD_PACKETS__INIT;
    m.n_ipv4 = packets.size();
    m.ipv4 = packets.data();
    m.has_last = true;
    m.last = last;
    if (!control::try_send_message(*_dest, m, net::after(control_timeout)))
        _log->warn("cannot hand the {} packets held during the freeze to the destination",
                   held.size());
}

void migration::silence_source_links() noexcept {
    if (!_r.connections_move)
        return;
    try {
        for (auto& link : _source_arp_silence)
            link.apply();
    } catch (const std::exception& e) {
        _log->warn("the source's links still answer ARP: {}", e.what());
    }
}

void migration::unsilence_source_links() noexcept {
    // The copy takes the source's MACs once it asks to resume (pagesrv's
    // begin_taking_macs). It sends nothing from them, but a switch that saw
    // them there anyway would keep the source's clients away.
    const bool copy_had_macs =
        _r.t_ready_to_resume != 0 && _r.connections_move && !_r.moving_links.empty();
    const bool silenced = std::any_of(_source_arp_silence.begin(), _source_arp_silence.end(),
                                      [](const auto& link) { return link.applied(); });
    if (!silenced && !copy_had_macs)
        return;
    try {
        for (auto& link : _source_arp_silence)
            link.restore();
        netlink::in_netns(netlink::netns_of(_opt.pid), [&] {
            // It says where it is.
            netlink::announcer announce;
            for (const auto& l : _r.moving_links)
                announce.announce(l);
        });
    } catch (const std::exception& e) {
        _log->error("the source's links may not be where its clients look: {}", e.what());
    }
}

void migration::remove_source_links() noexcept {
    if (!_source_netns)
        return;
    try {
        netlink::in_netns(netlink::netns_path(_source_netns.get()), [&] {
            netlink::link_control links;
            for (const auto& l : _r.moving_links)
                links.delete_link(l.name);
        });
    } catch (const std::exception& e) {
        _log->warn("the source's links stay behind (they answer no ARP): {}", e.what());
    }
    _source_netns.reset();
}

} // namespace ferry::migrator
