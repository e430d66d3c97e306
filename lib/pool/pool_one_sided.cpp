// pool_client's one-sided reads over RDMA (pool_client_state.hpp: one_sided).
#include "pool/pool_client_state.hpp"

#include "core/clock.hpp"
#include "core/log.hpp"
#include "transport/rdma/rdma_messages.hpp"

#include <cstring>

namespace ferry::pool {

namespace rdma = transport::rdma;

namespace {

enum member_read : uint64_t { window_part, member_data_part, meta_part };

uint64_t member_wr_id(uint32_t i, member_read part) {
    return uint64_t(i) << 2 | part;
}

} // namespace

// The node's acceptance offered its arena: connect with the token it gave.
// Any failure leaves this link two-sided (said once, in the log).
void pool_client::connect_one_sided(uint32_t slot, const FerryControl__PoolAccepted& accepted) {
    auto& l = *_links[slot];
    const auto& region = *accepted.rdma;
    // Up to three READs per member in flight; no messages.
    const rdma::queue_sizes queues{.send = 3 * one_sided::slots, .recv = 4, .message_bytes = 64};
    try {
        if (region.token.len != sizeof(rdma::channel_token) || region.port == 0 ||
            region.port > 65535 || region.directory_buckets == 0 ||
            (region.directory_buckets & (region.directory_buckets - 1)))
            throw error("a malformed RDMA offer");
        auto o = std::make_unique<one_sided>();
        o->directory_addr = region.directory_addr;
        o->directory_rkey = region.directory_rkey;
        o->directory_buckets = region.directory_buckets;
        o->arena_addr = region.arena_addr;
        o->arena_rkey = region.arena_rkey;
        o->meta_addr = region.meta_addr;
        o->meta_rkey = region.meta_rkey;
        o->meta_stride = region.meta_stride;
        o->chunk_size = accepted.chunk_size;
        rdma::connect_hello hello;
        std::memcpy(hello.token.data(), region.token.data, hello.token.size());
        net::endpoint ep = l.ep;
        ep.addr.sin_port = htons(uint16_t(region.port));
        std::vector<std::byte> reply;
        o->conn = rdma::rdma_connection::connect(ep, rdma::as_bytes(hello), reply, queues,
                                                 _opt.connect_timeout, _opt.rdma_wait);
        o->slot_bytes = one_sided::header_bytes + (_layout.member_len + 63) / 64 * 64;
        o->landing = mapping::anonymous(one_sided::slots * o->slot_bytes, "pool RDMA landing");
        o->landing_mr = rdma::register_memory(o->conn->pd(), o->landing.data(), o->landing.size(),
                                              IBV_ACCESS_LOCAL_WRITE, "the pool RDMA landing");
        for (uint32_t i = one_sided::slots; i-- > 0;)
            o->free_ops.push_back(i);
        l.rdma = std::move(o);
    } catch (const std::exception& e) {
        make_logger("pool")->warn("pool node {}: no one-sided reads ({}); reading two-sided",
                                  l.ep.to_string(), e.what());
    }
}

// Starts a member's read with a READ of its directory window; false when
// every landing slot is busy (the caller asks two-sided).
bool pool_client::post_one_sided(uint32_t slot, const expectation& e) {
    auto& o = *_links[slot]->rdma;
    if (o.free_ops.empty())
        return false;
    const auto& op = *_reads[size_t(e.read_slot)];
    const uint32_t i = o.free_ops.back();
    auto& f = o.ops[i];
    f.e = e;
    f.chunk = chunk_of(op.first_stripe + e.stripe_index, e.member);
    const uint64_t home = directory_home(_object, f.chunk, o.directory_buckets);
    try {
        o.conn->post_read(o.window(i), o.landing_mr.get(),
                          o.directory_addr + home * sizeof(directory_bucket), o.directory_rkey,
                          directory_window * sizeof(directory_bucket),
                          member_wr_id(i, window_part));
    } catch (const std::exception& ex) {
        _health->declare_dead(slot, fmt::format("RDMA: {}", ex.what()));
        return false;
    }
    o.free_ops.pop_back();
    return true;
}

// The member goes two-sided: a get on the TCP link, with the same
// expectation.
void pool_client::ask_two_sided(uint32_t slot, const expectation& e) {
    _stats.one_sided_fallbacks++;
    const auto& op = *_reads[size_t(e.read_slot)];
    request r{op::get, _object, chunk_of(op.first_stripe + e.stripe_index, e.member),
              0,       0,       e.request_id};
    if (!post(slot, r, nullptr, nullptr, e))
        member_failed(e, failed);
}

void pool_client::one_sided_done(uint32_t slot, const ibv_wc& wc) {
    auto& o = *_links[slot]->rdma;
    const uint32_t i = uint32_t(wc.wr_id >> 2);
    const auto part = member_read(wc.wr_id & 3);
    if (i >= one_sided::slots || part == member_data_part)
        return; // the metadata's READ, posted after it, completes after it
    auto& f = o.ops[i];
    const expectation e = f.e;
    const auto& op = *_reads[size_t(e.read_slot)];
    const bool wanted = op.active && op.gen == e.read_gen && !op.done[e.stripe_index];
    if (part == window_part) {
        const auto found = find_in_window(
            {reinterpret_cast<const directory_bucket*>(o.window(i)), directory_window}, _object,
            f.chunk);
        if (!wanted || !found || found->data_len != _layout.member_len ||
            found->meta_len != _layout.meta_len() || found->slot_plus_one == 0) {
            o.free_ops.push_back(i);
            if (wanted)
                ask_two_sided(slot, e); // not in the arena (yet, or any more)
            return;
        }
        f.found = *found;
        const uint64_t s = found->slot_plus_one - 1;
        o.conn->post_read(o.data(i), o.landing_mr.get(), o.arena_addr + s * o.chunk_size,
                          o.arena_rkey, found->data_len, member_wr_id(i, member_data_part));
        o.conn->post_read(o.meta(i), o.landing_mr.get(), o.meta_addr + s * o.meta_stride,
                          o.meta_rkey, found->meta_len, member_wr_id(i, meta_part));
        return;
    }
    // Data and metadata are in: install them only if they are what the
    // bucket described (the slot may have been reused meanwhile).
    const auto& b = f.found;
    const bool intact = chunk_checksum(o.data(i), b.data_len, o.meta(i), b.meta_len) == b.checksum;
    o.free_ops.push_back(i);
    if (!wanted)
        return;
    if (!intact) {
        ask_two_sided(slot, e);
        return;
    }
    auto& rop = *_reads[size_t(e.read_slot)];
    std::memcpy(&rop.sums[size_t(e.stripe_index) * _layout.pages_per_stripe], o.meta(i),
                b.meta_len);
    std::memcpy(member_buffer(rop, e.stripe_index, e.member), o.data(i), b.data_len);
    // The node is alive (a dead daemon's MRs are gone with it), but this
    // round trip says nothing of its TCP replies: the link's deadline
    // estimate stays theirs alone.
    _links[slot]->heard(monotonic_ns());
    _stats.one_sided_reads++;
    deliver(
        slot, e,
        reply{status::ok, tier::memory, _object, f.chunk, b.meta_len, b.data_len, e.request_id});
}

// Takes every completion of the link's RDMA connection; arms its
// completion channel when idle. An error completion loses the node.
size_t pool_client::pump_one_sided(uint32_t slot) {
    auto& l = *_links[slot];
    if (!l.rdma)
        return 0;
    size_t total = 0;
    try {
        ibv_wc wcs[16];
        // one_sided_done may lose the node (and the connection) midway.
        for (size_t n; l.rdma && (n = l.rdma->conn->poll_or_arm(wcs)) > 0;) {
            for (size_t k = 0; k < n && l.rdma; k++)
                one_sided_done(slot, wcs[k]);
            total += n;
        }
    } catch (const std::exception& e) {
        lose(slot, fmt::format("RDMA: {}", e.what()));
    }
    return total;
}

} // namespace ferry::pool
