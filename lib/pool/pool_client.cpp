#include "pool/pool_client_state.hpp"

#include "core/checksum.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/page.hpp"
#include "tls/tls_stream.hpp"
#include "wire/control.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>

namespace ferry::pool {

// --- construction ----------------------------------------------------------

pool_client::pool_client(const pool_spec& spec, uint64_t object,
                         std::shared_ptr<pool_health> health, options opt)
    : _layout(spec.layout()), _codec(_layout.geo), _object(object), _health(std::move(health)),
      _opt(std::move(opt)) {
    const uint32_t n = _layout.members();
    _links.resize(n);
    for (uint32_t s = 0; s < n; s++) {
        _links[s] = std::make_unique<link>();
        _links[s]->ring.resize(1u << 15);
    }
    _health_version = _health->version();
    for (uint32_t s = 0; s < n; s++)
        if (!_health->dead(s))
            connect_slot(s);

    const uint32_t pps = _layout.pages_per_stripe;
    const uint32_t max_stripes = (_opt.max_read_pages + pps - 1) / pps + 1;
    for (uint32_t i = 0; i < _opt.read_slots; i++) {
        auto op = std::make_unique<read_op>();
        op->index = int32_t(i);
        const size_t data_bytes = size_t(max_stripes) * pps * page_size;
        const size_t parity_bytes = size_t(max_stripes) * _layout.geo.parity * _layout.member_len;
        // Touched only as far as reads reach: reserve address space, not memory.
        op->buffer = mapping::anonymous(data_bytes + parity_bytes + page_size, "pool read buffer",
                                        MAP_NORESERVE);
        op->data = op->buffer.data();
        op->parity = op->data + data_bytes;
        op->sums.resize(size_t(max_stripes) * pps);
        op->states.resize(size_t(max_stripes) * raid::max_members);
        op->done.resize(max_stripes);
        _reads.push_back(std::move(op));
    }
    _scratch.resize(max_data_len + max_meta_len);
}

pool_client::~pool_client() = default;

void pool_client::connect_slot(uint32_t slot) {
    auto& l = *_links[slot];
    auto ring = std::move(l.ring);
    l = link{};
    l.ep = _health->endpoint(slot);
    l.ring = std::move(ring);
    try {
        if (!_health->credentials())
            throw error("no credentials to authenticate to the pool with");
        auto conn = tls::connect(l.ep, _health->credentials(), _opt.connect_timeout);
        FerryControl__PoolOpen open = FERRY_CONTROL__POOL_OPEN__INIT;
        open.client = const_cast<char*>(_opt.name.c_str());
        control::send_message(*conn, open, net::after(_opt.connect_timeout));
        auto reply = control::receive(*conn, net::after(_opt.connect_timeout));
        control::expect(reply.get(), FERRY_CONTROL__ENVELOPE__BODY_POOL_ACCEPTED,
                        "pool node " + l.ep.to_string());
        if (reply->pool_accepted->chunk_size < _layout.member_len)
            throw error(fmt::format("it stores chunks of at most {} bytes; this layout needs {}",
                                    reply->pool_accepted->chunk_size, _layout.member_len));
        net::set_nodelay(conn->fd());
        l.conn = std::move(conn);
        l.last_reply_ns = monotonic_ns();
        l.heard(l.last_reply_ns);
        if (reply->pool_accepted->rdma && _opt.read_slots > 0)
            connect_one_sided(slot, *reply->pool_accepted);
    } catch (const std::exception& e) {
        _health->declare_dead(slot, fmt::format("unreachable: {}", e.what()));
    }
}

// The node is gone for this client: every reply still owed by it fails.
void pool_client::lose(uint32_t slot, const std::string& reason) {
    _health->declare_dead(slot, reason);
    auto& l = *_links[slot];
    l.conn.reset();
    l.at = link::stage::header;
    l.have = 0;
    std::vector<expectation> owed;
    while (l.count) {
        owed.push_back(l.front());
        l.pop();
    }
    if (l.rdma) {
        std::vector<bool> idle(one_sided::slots);
        for (uint32_t i : l.rdma->free_ops)
            idle[i] = true;
        for (uint32_t i = 0; i < one_sided::slots; i++)
            if (!idle[i])
                owed.push_back(l.rdma->ops[i].e);
        l.rdma.reset();
    }
    for (const auto& e : owed)
        member_failed(e, failed);
}

void pool_client::sync_with_health() {
    const uint32_t v = _health->version();
    if (v == _health_version)
        return;
    _health_version = v;
    for (uint32_t s = 0; s < _links.size(); s++) {
        if (_health->dead(s) && _links[s]->live())
            lose(s, "declared dead");
        else if (!_health->dead(s) && !_links[s]->live())
            connect_slot(s); // rebuilt onto a spare
    }
}

// --- sending ---------------------------------------------------------------

bool pool_client::post(uint32_t slot, const request& r, const void* meta, const void* data,
                       const expectation& e) {
    auto& l = *_links[slot];
    if (!l.live() || _health->dead(slot))
        return false;
    auto hdr = encode(r);
    iovec iov[3] = {{hdr.data(), hdr.size()},
                    {const_cast<void*>(meta), r.meta_len},
                    {const_cast<void*>(data), r.data_len}};
    try {
        net::writev_full(*l.conn, iov, r.data_len ? 3 : (r.meta_len ? 2 : 1),
                         net::after(std::chrono::milliseconds(
                             std::max<int64_t>(1, _opt.max_deadline.count() / 1000))),
                         "send to pool node");
    } catch (const std::exception& ex) {
        // Not lost here (callers may be iterating this link): the next
        // sync_with_health closes it and fails what it still owes.
        _health->declare_dead(slot, ex.what());
        return false;
    }
    l.push(e);
    _stats.bytes_written += header_size + r.meta_len + r.data_len;
    return true;
}

// --- receiving -------------------------------------------------------------

void pool_client::progress(std::chrono::microseconds wait) {
    sync_with_health();
    // Per node: its TCP link, and its RDMA completions if it has any.
    std::array<pollfd, 2 * raid::max_members> fds{};
    std::array<uint32_t, 2 * raid::max_members> slots{};
    nfds_t n = 0;
    for (uint32_t s = 0; s < _links.size(); s++)
        if (_links[s]->live() && pump_one_sided(s))
            wait = std::chrono::microseconds(0); // replies delivered: let the caller look
    for (uint32_t s = 0; s < _links.size(); s++)
        if (_links[s]->live()) {
            fds[n] = {_links[s]->conn->fd(), POLLIN, 0};
            if (_links[s]->conn->buffered())
                wait = std::chrono::microseconds(0); // decrypted, waiting above the socket
            slots[n++] = s;
            if (_links[s]->rdma && _links[s]->rdma->busy()) {
                fds[n] = {_links[s]->rdma->conn->wait_fd(), POLLIN, 0};
                slots[n++] = s;
            }
        }
    if (n == 0)
        return;
    const int timeout_ms = int((wait.count() + 999) / 1000);
    if (::poll(fds.data(), n, timeout_ms) < 0 && errno != EINTR)
        throw sys_error("poll pool nodes");
    for (nfds_t i = 0; i < n; i++) {
        if (!fds[i].revents)
            continue;
        if (_links[slots[i]]->live() && fds[i].fd != _links[slots[i]]->conn->fd())
            (void)pump_one_sided(slots[i]);
        else
            read_link(slots[i]);
    }
    check_deadlines();
}

void pool_client::read_link(uint32_t slot) {
    auto& l = *_links[slot];
    for (;;) {
        if (!l.live())
            return;
        std::byte* dst = nullptr;
        size_t want = 0;
        switch (l.at) {
        case link::stage::header:
            dst = l.header.data();
            want = header_size;
            break;
        case link::stage::meta:
            dst = l.meta_dst;
            want = l.current.meta_len;
            break;
        case link::stage::data:
            dst = l.data_dst;
            want = l.current.data_len;
            break;
        }
        ssize_t got;
        try {
            got = l.conn->read_some(dst + l.have, want - l.have);
        } catch (const std::exception& e) {
            lose(slot, fmt::format("read: {}", e.what()));
            return;
        }
        if (got == 0) {
            lose(slot, "connection closed");
            return;
        }
        if (got < 0)
            return; // would block
        l.have += size_t(got);
        if (l.have < want)
            continue;
        l.have = 0;
        if (l.at == link::stage::header) {
            reply r;
            if (auto err = decode(l.header, r); err != decode_error::none) {
                lose(slot, fmt::format("malformed reply: {}", to_string(err)));
                return;
            }
            if (l.count == 0 || l.front().request_id != r.request_id) {
                lose(slot, "a reply nobody asked for");
                return;
            }
            const auto& e = l.front();
            l.current = r;
            // Where the payload goes: the waiting read's buffers if it still
            // wants this member, else scratch.
            l.meta_dst = _scratch.data() + max_data_len;
            l.data_dst = _scratch.data();
            if (e.operation == op::get && r.result == status::ok) {
                if (r.meta_len != _layout.meta_len() || r.data_len != _layout.member_len) {
                    lose(slot, fmt::format("a chunk of {}+{} bytes, expected {}+{}", r.meta_len,
                                           r.data_len, _layout.meta_len(), _layout.member_len));
                    return;
                }
                auto& op = *_reads[size_t(e.read_slot)];
                if (op.active && op.gen == e.read_gen && !op.done[e.stripe_index]) {
                    l.meta_dst = reinterpret_cast<std::byte*>(
                        &op.sums[size_t(e.stripe_index) * _layout.pages_per_stripe]);
                    l.data_dst = member_buffer(op, e.stripe_index, e.member);
                }
            }
            l.at = r.meta_len ? link::stage::meta
                              : (r.data_len ? link::stage::data : link::stage::header);
        } else if (l.at == link::stage::meta) {
            l.at = l.current.data_len ? link::stage::data : link::stage::header;
        } else {
            l.at = link::stage::header;
        }
        if (l.at != link::stage::header)
            continue;
        // A whole reply is in.
        const uint64_t now = monotonic_ns();
        const expectation e = l.front();
        l.pop();
        l.sample(now - std::max(e.sent_ns, l.last_reply_ns));
        l.last_reply_ns = now;
        l.heard(now);
        l.strikes = 0;
        deliver(slot, e, l.current);
    }
}

void pool_client::deliver(uint32_t slot, const expectation& e, const reply& r) {
    switch (e.operation) {
    case op::put:
    case op::drop:
    case op::grant:
        _puts_outstanding--;
        if (r.result != status::ok) {
            _put_failures++;
            make_logger("pool")->warn("pool node {}: {} failed: {}", _links[slot]->ep.to_string(),
                                      to_string(e.operation), to_string(r.result));
        }
        return;
    case op::stats:
        _stats_reply = r.result == status::ok
                           ? std::string(reinterpret_cast<const char*>(_scratch.data()), r.data_len)
                           : std::string("error: ") + std::string(to_string(r.result));
        _stats_done = true;
        return;
    case op::ping:
        return;
    case op::get:
        break;
    }
    auto& op = *_reads[size_t(e.read_slot)];
    if (!op.active || op.gen != e.read_gen)
        return;
    uint8_t& st = op.states[size_t(e.stripe_index) * raid::max_members + e.member];
    if (r.result == status::ok) {
        st = arrived;
        _stats.bytes_read += r.data_len;
    } else {
        st = r.result == status::not_found   ? missing
             : r.result == status::forbidden ? refused
                                             : failed;
    }
    plan_stripe(op, e.stripe_index);
}

void pool_client::member_failed(const expectation& e, uint8_t state) {
    if (e.operation != op::get) {
        if (e.operation == op::stats) {
            _stats_reply = "error: node lost";
            _stats_done = true;
        } else if (e.operation != op::ping) {
            _puts_outstanding--;
            _put_failures++;
        }
        return;
    }
    auto& op = *_reads[size_t(e.read_slot)];
    if (!op.active || op.gen != e.read_gen)
        return;
    uint8_t& st = op.states[size_t(e.stripe_index) * raid::max_members + e.member];
    if (st == requested || st == slow)
        st = state;
    plan_stripe(op, e.stripe_index);
}

bool pool_client::unsurvivable_loss() const noexcept {
    return uint32_t(std::popcount(_health->dead_mask())) >= _layout.geo.tolerates();
}

// A node that owes a reply for longer than its adaptive deadline gets a
// strike, and the reads waiting on it go degraded at once; enough strikes in
// a row, and it is dead.
void pool_client::check_deadlines() {
    const uint64_t now = monotonic_ns();
    const uint64_t lo = uint64_t(_opt.min_deadline.count()) * 1000;
    const uint64_t hi = uint64_t(_opt.max_deadline.count()) * 1000;
    for (uint32_t s = 0; s < _links.size(); s++) {
        auto& l = *_links[s];
        if (!l.live() || l.count == 0)
            continue;
        if (now - std::max(l.front().sent_ns, l.last_reply_ns) <= l.deadline_ns(lo, hi))
            continue;
        _stats.missed_deadlines++;
        l.last_reply_ns = now; // the next strike needs another full deadline
        // Late is not dead: a busy node (a disk-tier backlog) still answers.
        // Death needs several deadlines in a row and a long silence; a
        // longer one when the pool cannot survive the loss.
        const bool last_node = unsurvivable_loss();
        const auto silence = last_node ? _opt.last_node_silence : _opt.dead_silence;
        const uint64_t silent_ns = now - l.last_heard_ns;
        if (++l.strikes >= _opt.strikes_to_dead) {
            if (silent_ns >= uint64_t(silence.count()) * 1000) {
                lose(s, fmt::format(
                            "no reply within {} deadlines{}", l.strikes,
                            last_node ? fmt::format(" and {} s of silence", double(silent_ns) / 1e9)
                                      : std::string()));
                continue;
            }
            if (last_node && silent_ns >= uint64_t(_opt.dead_silence.count()) * 1000 &&
                !l.told_last_node_wait) {
                l.told_last_node_wait = true;
                make_logger("pool")->warn(
                    "pool node {}: silent for {} ms, but the pool cannot lose another node "
                    "({} lost of {} tolerated); waiting up to {} s for it",
                    l.ep.to_string(), silent_ns / 1'000'000, std::popcount(_health->dead_mask()),
                    _layout.geo.tolerates(), double(_opt.last_node_silence.count()) / 1e6);
            }
        }
        std::vector<expectation> late;
        for (size_t i = 0; i < l.count; i++) {
            const auto& e = l.ring[(l.head + i) % l.ring.size()];
            if (e.operation == op::get)
                late.push_back(e);
        }
        for (const auto& e : late) {
            auto& op = *_reads[size_t(e.read_slot)];
            if (!op.active || op.gen != e.read_gen)
                continue;
            uint8_t& st = op.states[size_t(e.stripe_index) * raid::max_members + e.member];
            if (st == requested) {
                st = slow;
                _stats.hedged_members++;
                plan_stripe(op, e.stripe_index);
            }
        }
    }
}

} // namespace ferry::pool
