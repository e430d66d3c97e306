#include "transport/rdma/rdma_channel.hpp"

#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/page.hpp"
#include "transport/staging/advertised_ranges.hpp"
#include "transport/staging/region.hpp"

#include <fmt/format.h>
#include <poll.h>

#include <algorithm>
#include <thread>

namespace ferry::transport::rdma {

namespace {

using staging::page_staged;

constexpr uint32_t fault_slots = 8;      // fault requests read at once
constexpr uint32_t background_slots = 4; // background requests read at once
// The header READ at connect, in slot space past the last slot.
constexpr size_t header_bytes = 4096;
// While a request waits, how often the CM and control connection are
// looked at for a source that went away.
constexpr uint64_t peer_check_ns = 20'000'000;

const queue_sizes channel_queues{.send = 64, .recv = 32, .message_bytes = 64};

enum channel_read : uint64_t { states_part, checksums_part, data_part, header_part };

uint64_t channel_wr_id(uint32_t slot, channel_read part) {
    return uint64_t(slot) << 2 | part;
}

} // namespace

rdma_channel::rdma_channel(std::unique_ptr<net::stream> control,
                           const FerryControl__PageChannelAccepted& accepted, uint32_t max_pages,
                           bool urgent, std::chrono::milliseconds timeout, patience wait)
    : _control(std::move(control)), _max_pages(std::min(max_pages, wire::max_pages_per_request)),
      _urgent(urgent) {
    if (!accepted.has_rdma_port || !accepted.has_rdma_region_addr ||
        !accepted.has_rdma_region_size || !accepted.has_rdma_rkey || !accepted.has_rdma_token ||
        accepted.rdma_token.len != sizeof(channel_token))
        throw error("the source offered no RDMA region (does it support the rdma fabric?)");
    if (accepted.rdma_port == 0 || accepted.rdma_port > 65535)
        throw error("the source offered an invalid RDMA port");
    _remote_base = accepted.rdma_region_addr;
    _rkey = accepted.rdma_rkey;
    // The source's RDMA CM listens on the address this handshake reached.
    net::endpoint source = net::peer_endpoint(_control->fd());
    source.addr.sin_port = htons(uint16_t(accepted.rdma_port));
    connect_hello hello;
    std::memcpy(hello.token.data(), accepted.rdma_token.data, hello.token.size());
    std::vector<std::byte> reply;
    _conn = rdma_connection::connect(source, as_bytes(hello), reply, channel_queues, timeout, wait);

    // Landing slots, each laid out as [states][checksums][pages], then the
    // header's landing place; one registration.
    _slots = urgent ? fault_slots : background_slots;
    _slot_bytes = round_up(round_up(_max_pages, 64) + _max_pages * sizeof(uint64_t), page_size) +
                  size_t(_max_pages) * page_size;
    _landing = mapping::anonymous(_slots * _slot_bytes + header_bytes, "RDMA landing slots");
    _landing_mr = register_memory(_conn->pd(), _landing.data(), _landing.size(),
                                  IBV_ACCESS_LOCAL_WRITE, "the RDMA landing slots");
    for (uint32_t i = _slots; i-- > 0;)
        _free_slots.push_back(i);

    // The region's header: its geometry, and proof that it is a region.
    std::byte* header = _landing.data() + _slots * _slot_bytes;
    _conn->post_read(header, _landing_mr.get(), _remote_base, _rkey, header_bytes,
                     channel_wr_id(0, header_part));
    const uint64_t until = monotonic_ns() + uint64_t(timeout.count()) * 1'000'000;
    ibv_wc wc;
    while (_conn->poll({&wc, 1}) == 0) {
        if (monotonic_ns() > until)
            throw error(
                fmt::format("no answer to the RDMA READ of {}'s region header", _conn->peer()));
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    staging::region_header h;
    std::memcpy(static_cast<void*>(&h), header, sizeof h);
    if (h.magic != staging::region_magic || h.version != staging::region_version ||
        h.geo.total_size > accepted.rdma_region_size ||
        h.geo.data_offset + h.geo.page_count * page_size > h.geo.total_size ||
        h.geo.states_offset + h.geo.page_count > h.geo.checksums_offset ||
        h.geo.checksums_offset + h.geo.page_count * sizeof(uint64_t) > h.geo.data_offset)
        throw error("the source's RDMA region is not a Ferry staging region of this version");
    _remote_pages = h.geo.page_count;
    _states_offset = h.geo.states_offset;
    _checksums_offset = h.geo.checksums_offset;
    _data_offset = h.geo.data_offset;
    _index = staging::advertised_index(accepted, _remote_pages);
}

rdma_channel::~rdma_channel() {
    make_logger("rdma")->info(
        "rdma {} channel: {} requests, {} READ round trips, {} stage asks, {} bytes read",
        _urgent ? "fault" : "background", _traffic.requests, _traffic.read_batches,
        _traffic.stage_asks, _traffic.bytes_read);
}

rdma_channel::slot_view rdma_channel::slot(uint32_t i) const noexcept {
    std::byte* base = _landing.data() + size_t(i) * _slot_bytes;
    const size_t checksums = round_up(_max_pages, 64);
    const size_t pages = round_up(checksums + _max_pages * sizeof(uint64_t), page_size);
    return {reinterpret_cast<uint8_t*>(base), reinterpret_cast<uint64_t*>(base + checksums),
            base + pages};
}

// Three READs, one round trip: the pages' states, checksums and data from
// page `from` of the request on.
void rdma_channel::post_reads(pending& p, uint32_t from) {
    const slot_view s = slot(p.slot);
    const uint64_t first = p.first_page + from;
    const uint32_t n = p.request.nr_pages - from;
    _conn->post_read(s.states + from, _landing_mr.get(), _remote_base + _states_offset + first,
                     _rkey, n, channel_wr_id(p.slot, states_part));
    _conn->post_read(s.checksums + from, _landing_mr.get(),
                     _remote_base + _checksums_offset + first * sizeof(uint64_t), _rkey,
                     n * uint32_t(sizeof(uint64_t)), channel_wr_id(p.slot, checksums_part));
    _conn->post_read(s.pages + size_t(from) * page_size, _landing_mr.get(),
                     _remote_base + _data_offset + first * page_size, _rkey,
                     n * uint32_t(page_size), channel_wr_id(p.slot, data_part));
    p.at = phase::reading;
    p.read_from = from;
    _traffic.read_batches++;
    _traffic.bytes_read += uint64_t(n) * (1 + sizeof(uint64_t) + page_size);
}

void rdma_channel::ask(pending& p, stage_ask what, uint32_t from) {
    stage_message m;
    m.ask = what;
    m.first_page = p.first_page + from;
    m.count = p.request.nr_pages - from;
    m.tag = p.slot;
    _conn->post_send(as_bytes(m), channel_wr_id(p.slot, header_part));
    p.at = phase::asking;
    p.read_from = from;
    _traffic.stage_asks++;
    _traffic.messages_bytes += sizeof m;
}

void rdma_channel::start(pending& p) {
    p.slot = _free_slots.back();
    _free_slots.pop_back();
    // A refetch: the copy read was bad; the source writes it again first (a
    // READ posted now could pass the SEND that asks for that).
    if (p.request.operation == wire::op::refetch)
        ask(p, stage_ask::restage, 0);
    else
        post_reads(p, 0);
}

void rdma_channel::send(const wire::page_request& r) {
    if (wire::is_notice(r.operation)) {
        auto bytes = wire::encode(r);
        net::write_full(*_control, bytes, net::after(std::chrono::seconds(10)), "send a notice");
        return;
    }
    if (_count == _queue.size())
        throw error("too many rdma requests in flight");
    if (r.nr_pages == 0 || r.nr_pages > _max_pages)
        throw error(
            fmt::format("an rdma request of {} pages (at most {})", r.nr_pages, _max_pages));
    const auto first = _index.find(r.pid, r.vaddr, r.nr_pages);
    if (!first)
        throw error(fmt::format("pid {} pages [{:#x}, +{}) are not in the source's region", r.pid,
                                r.vaddr, r.nr_pages));
    pending& p = _queue[(_head + _count) % _queue.size()];
    p = pending{r, *first, 0, phase::queued, 0, 0, 0};
    _count++;
    _traffic.requests++;
    if (!_free_slots.empty())
        start(p);
}

rdma_channel::pending* rdma_channel::find_slot(uint32_t s) noexcept {
    for (size_t i = 0; i < _count; i++) {
        pending& p = _queue[(_head + i) % _queue.size()];
        if (p.at != phase::queued && p.slot == s)
            return &p;
    }
    return nullptr;
}

// The three READs of a batch complete in order: the data READ's completion
// says all three are in.
void rdma_channel::completed(const ibv_wc& wc) {
    if (wc.opcode == IBV_WC_RECV) {
        const auto a = message_from<staged_message>(_conn->received(wc));
        if (!a)
            throw error(fmt::format("malformed answer from the source {}", _conn->peer()));
        answered(*a);
        return;
    }
    if (wc.opcode != IBV_WC_RDMA_READ || (wc.wr_id & 3) != data_part)
        return;
    if (pending* p = find_slot(uint32_t(wc.wr_id >> 2)); p && p->at == phase::reading)
        reads_done(*p);
}

void rdma_channel::reads_done(pending& p) {
    const slot_view s = slot(p.slot);
    const auto* states = reinterpret_cast<const std::atomic<uint8_t>*>(s.states);
    uint32_t i = p.read_from;
    while (i < p.request.nr_pages && states[i].load(std::memory_order_acquire) == page_staged)
        i++;
    p.ready = i;
    p.at = phase::read;
    if (i < p.request.nr_pages)
        ask(p, _urgent ? stage_ask::urgent : stage_ask::notify, i);
}

void rdma_channel::answered(const staged_message& a) {
    pending* p = a.tag < _slots ? find_slot(a.tag) : nullptr;
    if (!p || p->at != phase::asking)
        throw error(fmt::format("the source {} answered a request not asked", _conn->peer()));
    if (!a.ok)
        throw error(fmt::format("the source cannot stage pid {} pages [{:#x}, +{})", p->request.pid,
                                p->request.vaddr, p->request.nr_pages));
    post_reads(*p, p->read_from);
}

// A source that died or closed its end: the CM says DISCONNECTED, or its
// control connection reads as closed (it never sends on it after accepting).
void rdma_channel::check_peer() {
    const uint64_t now = monotonic_ns();
    if (now < _next_peer_check_ns)
        return;
    _next_peer_check_ns = now + peer_check_ns;
    if (_conn->disconnected())
        throw error(fmt::format("the source {} closed its RDMA connection", _conn->peer()));
    pollfd pfd{_control->fd(), POLLIN | POLLRDHUP, 0};
    if (::poll(&pfd, 1, 0) > 0)
        throw error(fmt::format("the source {} closed the page channel", _conn->peer()));
}

incoming_reply* rdma_channel::pump(size_t /*budget*/) {
    // Requests that waited for a slot go first.
    for (size_t i = 0; i < _count && !_free_slots.empty(); i++) {
        pending& p = _queue[(_head + i) % _queue.size()];
        if (p.at == phase::queued)
            start(p);
    }
    ibv_wc wcs[32];
    while (const size_t n = _conn->poll_or_arm(wcs))
        for (size_t i = 0; i < n; i++)
            completed(wcs[i]);
    if (_count == 0)
        return nullptr;
    pending& p = _queue[_head];
    if (p.ready <= p.reported) {
        if (p.at == phase::asking)
            check_peer();
        return p.reported ? &_reply : nullptr;
    }
    p.reported = p.ready;
    const slot_view s = slot(p.slot);
    _reply.header = wire::page_reply{wire::status::ok, p.request.pid, p.request.nr_pages,
                                     p.request.vaddr, p.request.request_id};
    _reply.checksums = s.checksums;
    _reply.pages = s.pages;
    _reply.pages_ready = p.ready;
    return &_reply;
}

void rdma_channel::finish_reply() noexcept {
    if (_count == 0)
        return;
    pending& p = _queue[_head];
    if (p.at != phase::queued)
        _free_slots.push_back(p.slot);
    _head = (_head + 1) % _queue.size();
    _count--;
}

} // namespace ferry::transport::rdma
