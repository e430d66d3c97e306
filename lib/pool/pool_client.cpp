#include "pool/pool_client.hpp"

#include "core/checksum.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/page.hpp"
#include "wire/control.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

namespace ferry::pool {

// --- pool_health -----------------------------------------------------------

pool_health::pool_health(const pool_spec& spec) : _slots(spec.nodes), _spares(spec.spares) {
    if (_slots.size() > 32)
        throw error("at most 32 pool nodes");
}

net::endpoint pool_health::endpoint(uint32_t slot) const {
    std::lock_guard lock(_mutex);
    return _slots.at(slot);
}

void pool_health::declare_dead(uint32_t slot, const std::string& reason) {
    std::lock_guard lock(_mutex);
    if (dead(slot))
        return;
    _lost.push_back(fmt::format("{} ({})", _slots[slot].to_string(), reason));
    _dead_mask.fetch_or(1u << slot, std::memory_order_acq_rel);
    _version.fetch_add(1, std::memory_order_acq_rel);
    _changed.notify_all();
}

void pool_health::replace(uint32_t slot, const net::endpoint& ep) {
    std::lock_guard lock(_mutex);
    _slots.at(slot) = ep;
    _dead_mask.fetch_and(~(1u << slot), std::memory_order_acq_rel);
    _version.fetch_add(1, std::memory_order_acq_rel);
    _changed.notify_all();
}

std::optional<net::endpoint> pool_health::take_spare() {
    std::lock_guard lock(_mutex);
    if (_spares.empty())
        return std::nullopt;
    auto ep = _spares.front();
    _spares.erase(_spares.begin());
    return ep;
}

uint32_t pool_health::wait_for_loss(std::chrono::milliseconds timeout, uint32_t ignore) {
    std::unique_lock lock(_mutex);
    _changed.wait_for(lock, timeout, [&] { return _shut_down || (dead_mask() & ~ignore) != 0; });
    return _shut_down ? 0 : dead_mask();
}

void pool_health::shut_down() {
    std::lock_guard lock(_mutex);
    _shut_down = true;
    _changed.notify_all();
}

std::string pool_health::lost_nodes() const {
    std::lock_guard lock(_mutex);
    std::string out;
    for (const auto& l : _lost)
        out += (out.empty() ? "" : ", ") + l;
    return out;
}

std::string pool_health::members() const {
    std::lock_guard lock(_mutex);
    std::string out;
    for (const auto& ep : _slots)
        out += (out.empty() ? "" : ",") + ep.to_string();
    return out;
}

// --- the client's private state --------------------------------------------

namespace {

enum member_state : uint8_t { idle, requested, arrived, failed, slow, missing };

constexpr uint64_t initial_deadline_ns = 50'000'000;

} // namespace

struct pool_client::expectation {
    uint64_t request_id = 0;
    uint64_t sent_ns = 0;
    op operation = op::get;
    int32_t read_slot = -1;
    uint32_t read_gen = 0;
    uint32_t stripe_index = 0;
    uint8_t member = 0;
};

// One connection to one node. Replies arrive in request order, so the
// expectations form a ring; a reply is parsed incrementally, its payload
// read straight into the buffer waiting for it.
struct pool_client::link {
    net::endpoint ep;
    unique_fd fd;
    std::vector<expectation> ring;
    size_t head = 0, count = 0;

    enum class stage : uint8_t { header, meta, data } at = stage::header;
    header_bytes header{};
    size_t have = 0;
    reply current;
    std::byte* meta_dst = nullptr;
    std::byte* data_dst = nullptr;

    uint64_t last_reply_ns = 0; // or the last strike: when the deadline clock restarted
    uint64_t last_heard_ns = 0; // the last reply, for the death verdict
    double srtt_ns = 0, rttvar_ns = 0;
    bool rtt_valid = false;
    uint32_t strikes = 0;

    [[nodiscard]] bool live() const noexcept { return bool(fd); }
    [[nodiscard]] expectation& front() noexcept { return ring[head]; }
    void push(const expectation& e) {
        if (count == ring.size())
            throw error(
                fmt::format("too many requests outstanding to pool node {}", ep.to_string()));
        ring[(head + count) % ring.size()] = e;
        count++;
    }
    void pop() noexcept {
        head = (head + 1) % ring.size();
        count--;
    }
    void sample(uint64_t ns) noexcept {
        const double r = double(ns);
        if (!rtt_valid) {
            srtt_ns = r;
            rttvar_ns = r / 2;
            rtt_valid = true;
            return;
        }
        rttvar_ns = 0.75 * rttvar_ns + 0.25 * std::fabs(srtt_ns - r);
        srtt_ns = 0.875 * srtt_ns + 0.125 * r;
    }
    [[nodiscard]] uint64_t deadline_ns(uint64_t lo, uint64_t hi) const noexcept {
        if (!rtt_valid)
            return std::max(lo, initial_deadline_ns);
        return std::clamp(uint64_t(srtt_ns + 4 * rttvar_ns), lo, hi);
    }
};

struct pool_client::read_op {
    int32_t index = 0; // in _reads
    bool active = false;
    uint32_t gen = 0;
    bool distrust = false;
    bool all_members = false;
    uint64_t first_page = 0;
    uint32_t nr_pages = 0;
    uint64_t first_stripe = 0;
    uint32_t nr_stripes = 0;
    uint32_t stripes_left = 0;
    read_status status = read_status::pending;
    std::string error;
    std::byte* data = nullptr;   // whole stripes' data members, page aligned
    std::byte* parity = nullptr; // the parity members, per stripe
    size_t map_bytes = 0;
    std::vector<uint64_t> sums;
    std::vector<uint8_t> states; // stripe * max_members + member
    std::vector<uint8_t> done;
};

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
        op->map_bytes = data_bytes + parity_bytes + page_size;
        // Touched only as far as reads reach: reserve address space, not memory.
        void* m = ::mmap(nullptr, op->map_bytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED)
            throw sys_error("mmap pool read buffer");
        op->data = static_cast<std::byte*>(m);
        op->parity = op->data + data_bytes;
        op->sums.resize(size_t(max_stripes) * pps);
        op->states.resize(size_t(max_stripes) * raid::max_members);
        op->done.resize(max_stripes);
        _reads.push_back(std::move(op));
    }
    _scratch.resize(max_data_len + max_meta_len);
}

pool_client::~pool_client() {
    for (auto& op : _reads)
        if (op->data)
            ::munmap(op->data, op->map_bytes);
}

void pool_client::connect_slot(uint32_t slot) {
    auto& l = *_links[slot];
    auto ring = std::move(l.ring);
    l = link{};
    l.ep = _health->endpoint(slot);
    l.ring = std::move(ring);
    try {
        unique_fd fd = net::tcp_connect(l.ep, _opt.connect_timeout);
        FerryControl__PoolOpen open = FERRY_CONTROL__POOL_OPEN__INIT;
        open.client = const_cast<char*>(_opt.name.c_str());
        control::send_message(fd.get(), open, net::after(_opt.connect_timeout));
        auto reply = control::receive(fd.get(), net::after(_opt.connect_timeout));
        control::expect(reply.get(), FERRY_CONTROL__ENVELOPE__BODY_POOL_ACCEPTED,
                        "pool node " + l.ep.to_string());
        if (reply->pool_accepted->chunk_size < _layout.member_len)
            throw error(fmt::format("it stores chunks of at most {} bytes; this layout needs {}",
                                    reply->pool_accepted->chunk_size, _layout.member_len));
        net::set_nodelay(fd.get());
        net::set_nonblocking(fd.get(), true);
        l.fd = std::move(fd);
        l.last_reply_ns = l.last_heard_ns = monotonic_ns();
    } catch (const std::exception& e) {
        _health->declare_dead(slot, fmt::format("unreachable: {}", e.what()));
    }
}

// The node is gone for this client: every reply still owed by it fails.
void pool_client::lose(uint32_t slot, const std::string& reason) {
    _health->declare_dead(slot, reason);
    auto& l = *_links[slot];
    l.fd.reset();
    l.at = link::stage::header;
    l.have = 0;
    std::vector<expectation> owed;
    while (l.count) {
        owed.push_back(l.front());
        l.pop();
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
        net::writev_full(l.fd.get(), iov, r.data_len ? 3 : (r.meta_len ? 2 : 1),
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
    std::array<pollfd, raid::max_members> fds{};
    std::array<uint32_t, raid::max_members> slots{};
    nfds_t n = 0;
    for (uint32_t s = 0; s < _links.size(); s++)
        if (_links[s]->live()) {
            fds[n] = {_links[s]->fd.get(), POLLIN, 0};
            slots[n++] = s;
        }
    if (n == 0)
        return;
    const int timeout_ms = int((wait.count() + 999) / 1000);
    if (::poll(fds.data(), n, timeout_ms) < 0 && errno != EINTR)
        throw sys_error("poll pool nodes");
    for (nfds_t i = 0; i < n; i++)
        if (fds[i].revents)
            read_link(slots[i]);
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
        const ssize_t got = ::read(l.fd.get(), dst + l.have, want - l.have);
        if (got == 0) {
            lose(slot, "connection closed");
            return;
        }
        if (got < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return;
            lose(slot, fmt::format("read: {}", std::strerror(errno)));
            return;
        }
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
        l.last_reply_ns = l.last_heard_ns = now;
        l.strikes = 0;
        deliver(slot, e, l.current);
    }
}

void pool_client::deliver(uint32_t slot, const expectation& e, const reply& r) {
    switch (e.operation) {
    case op::put:
    case op::drop:
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
        st = r.result == status::not_found ? missing : failed;
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
        // Death needs several deadlines in a row and a long silence.
        if (++l.strikes >= _opt.strikes_to_dead &&
            now - l.last_heard_ns >= uint64_t(_opt.dead_silence.count()) * 1000) {
            lose(s, fmt::format("no reply within {} deadlines", l.strikes));
            continue;
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

// --- reads -----------------------------------------------------------------

std::byte* pool_client::member_buffer(read_op& op, uint32_t i, uint32_t member) const noexcept {
    const auto& g = _layout.geo;
    if (member < g.data)
        return op.data + size_t(i) * _layout.pages_per_stripe * page_size +
               size_t(member) * _layout.member_len;
    return op.parity + (size_t(i) * g.parity + (member - g.data)) * _layout.member_len;
}

bool pool_client::usable(const read_op& op, uint32_t i, uint32_t member) const noexcept {
    const uint64_t stripe = op.first_stripe + i;
    const uint32_t slot = _layout.node_of(stripe, member);
    const uint8_t st = op.states[size_t(i) * raid::max_members + member];
    return _links[slot]->live() && !_health->dead(slot) && st != failed && st != slow;
}

bool pool_client::request_member(read_op& op, uint32_t i, uint32_t member) {
    const uint64_t stripe = op.first_stripe + i;
    const uint32_t slot = _layout.node_of(stripe, member);
    uint8_t& st = op.states[size_t(i) * raid::max_members + member];
    request r{op::get, _object, chunk_of(stripe, member), 0, 0, _next_id++};
    const expectation e{r.request_id,   monotonic_ns(), op::get, op.index, op.gen, i,
                        uint8_t(member)};
    if (!post(slot, r, nullptr, nullptr, e)) {
        st = failed;
        return false;
    }
    st = requested;
    return true;
}

void pool_client::finish_stripe(read_op& op, uint32_t i, bool degraded) {
    op.done[i] = 1;
    if (degraded)
        _stats.degraded_stripes++;
    if (--op.stripes_left == 0)
        op.status = read_status::ok;
}

// Decides what stripe i of a read still needs: the data members holding
// the wanted pages when their nodes are fine, else any `data` members to
// rebuild them from.
void pool_client::plan_stripe(read_op& op, uint32_t i) {
    const auto& g = _layout.geo;
    const uint32_t n = g.members(), pps = _layout.pages_per_stripe;
    const uint64_t stripe = op.first_stripe + i;
    const uint64_t lo = std::max(op.first_page, stripe * pps);
    const uint64_t hi = std::min(op.first_page + op.nr_pages - 1, stripe * pps + pps - 1);
    const uint32_t m_lo = _layout.first_member_of_page(lo), m_hi = _layout.last_member_of_page(hi);
    uint8_t* st = &op.states[size_t(i) * raid::max_members];
    for (;;) {
        if (op.done[i] || op.status != read_status::pending)
            return;
        uint32_t n_arrived = 0, n_active = 0, n_slow = 0;
        for (uint32_t m = 0; m < n; m++) {
            if (st[m] == missing) {
                op.status = read_status::missing;
                op.error = fmt::format("stripe {} is not in the pool", stripe);
                return;
            }
            n_arrived += st[m] == arrived;
            n_active += st[m] == requested;
            n_slow += st[m] == slow;
        }
        if (op.all_members) {
            plan_scrub(op, i, n_arrived, n_active);
            return;
        }
        bool have_needed = true, healthy = true;
        for (uint32_t m = m_lo; m <= m_hi; m++) {
            have_needed &= st[m] == arrived;
            healthy &= st[m] == arrived || (!op.distrust && usable(op, i, m));
        }
        if (have_needed && !op.distrust)
            return finish_stripe(op, i, false);
        if (healthy) {
            bool sent_all = true;
            for (uint32_t m = m_lo; m <= m_hi; m++)
                if (st[m] == idle && !request_member(op, i, m))
                    sent_all = false;
            if (sent_all)
                return;
            continue; // a node failed as we asked it: plan again
        }
        if (n_arrived >= g.data) {
            std::array<std::byte*, raid::max_members> ptrs{};
            std::array<bool, raid::max_members> lost{};
            for (uint32_t m = 0; m < n; m++) {
                ptrs[m] = member_buffer(op, i, m);
                lost[m] = st[m] != arrived;
            }
            if (!_codec.reconstruct(std::span(ptrs.data(), n), std::span(lost.data(), n),
                                    _layout.member_len))
                break; // cannot happen with `data` survivors; reported below
            return finish_stripe(op, i, true);
        }
        // Degraded: ask for more members, data first, until `data` are coming.
        uint32_t want = g.data - n_arrived - std::min(n_active, g.data - n_arrived);
        bool retry = false;
        for (uint32_t m = 0; m < n && want > 0; m++) {
            const bool distrusted = op.distrust && m >= m_lo && m <= m_hi;
            if (st[m] != idle || distrusted || !usable(op, i, m))
                continue;
            if (request_member(op, i, m))
                want--;
            else
                retry = true;
        }
        if (retry)
            continue;
        // Enough members coming; or late ones that may still answer.
        if (want == 0 || want <= n_slow)
            return;
        break;
    }
    // Fewer usable members than the level needs: name what was lost.
    std::string what;
    for (uint32_t m = 0; m < n; m++)
        if (st[m] != arrived && st[m] != requested)
            what += fmt::format("{}member {} on {}", what.empty() ? "" : ", ", m,
                                _health->endpoint(_layout.node_of(stripe, m)).to_string());
    op.status = read_status::lost;
    op.error = fmt::format("stripe {} of pool object {:016x} cannot be read: {} unavailable, "
                           "{} tolerates {} (lost nodes: {})",
                           stripe, _object, what, raid::to_string(g.lvl), g.tolerates(),
                           _health->lost_nodes());
}

// Scrub: every member must be read and the parity must match the data.
void pool_client::plan_scrub(read_op& op, uint32_t i, uint32_t n_arrived, uint32_t n_active) {
    const auto& g = _layout.geo;
    const uint32_t n = g.members();
    const uint64_t stripe = op.first_stripe + i;
    uint8_t* st = &op.states[size_t(i) * raid::max_members];
    for (uint32_t m = 0; m < n; m++)
        if (st[m] == idle && !request_member(op, i, m))
            n_active = UINT32_MAX;
    for (uint32_t m = 0; m < n; m++)
        if (st[m] == failed) {
            op.status = read_status::lost;
            op.error = fmt::format("stripe {}: member {} on {} is unreadable", stripe, m,
                                   _health->endpoint(_layout.node_of(stripe, m)).to_string());
            return;
        }
    if (n_arrived < n)
        return;
    (void)n_active;
    std::array<std::byte*, raid::max_members> ptrs{}, scratch{};
    std::vector<std::byte> spare(size_t(g.parity + 1) * _layout.member_len + raid::alignment);
    auto* base = reinterpret_cast<std::byte*>(
        (reinterpret_cast<uintptr_t>(spare.data()) + raid::alignment - 1) &
        ~uintptr_t(raid::alignment - 1));
    for (uint32_t m = 0; m < n; m++)
        ptrs[m] = member_buffer(op, i, m);
    for (uint32_t p = 0; p < g.parity; p++)
        scratch[p] = base + size_t(p) * _layout.member_len;
    if (g.parity && !_codec.verify(std::span(ptrs.data(), n), _layout.member_len,
                                   std::span(scratch.data(), g.parity))) {
        op.status = read_status::lost;
        op.error = fmt::format("stripe {}: parity does not match the data", stripe);
        return;
    }
    finish_stripe(op, i, false);
}

int pool_client::begin_read(uint64_t first_page, uint32_t nr_pages, read_mode mode) {
    if (nr_pages == 0 || nr_pages > _opt.max_read_pages)
        throw error(
            fmt::format("pool read of {} pages (at most {})", nr_pages, _opt.max_read_pages));
    sync_with_health();
    for (size_t k = 0; k < _reads.size(); k++) {
        auto& op = *_reads[k];
        if (op.active)
            continue;
        op.active = true;
        op.gen++;
        op.distrust = mode == read_mode::distrust_data;
        op.all_members = mode == read_mode::all_members;
        op.first_page = first_page;
        op.nr_pages = nr_pages;
        op.first_stripe = _layout.stripe_of_page(first_page);
        op.nr_stripes =
            uint32_t(_layout.stripe_of_page(first_page + nr_pages - 1) - op.first_stripe + 1);
        op.stripes_left = op.nr_stripes;
        op.status = read_status::pending;
        op.error.clear();
        std::fill_n(op.states.begin(), size_t(op.nr_stripes) * raid::max_members, idle);
        std::fill_n(op.done.begin(), op.nr_stripes, 0);
        _stats.reads++;
        for (uint32_t i = 0; i < op.nr_stripes; i++)
            plan_stripe(op, i);
        return int(k);
    }
    return -1;
}

read_status pool_client::poll_read(int slot) const noexcept {
    return _reads[size_t(slot)]->status;
}

const std::byte* pool_client::read_pages(int slot) const noexcept {
    const auto& op = *_reads[size_t(slot)];
    return op.data + (op.first_page - op.first_stripe * _layout.pages_per_stripe) * page_size;
}

const uint64_t* pool_client::read_checksums(int slot) const noexcept {
    const auto& op = *_reads[size_t(slot)];
    return op.sums.data() + (op.first_page - op.first_stripe * _layout.pages_per_stripe);
}

const std::string& pool_client::read_error(int slot) const noexcept {
    return _reads[size_t(slot)]->error;
}

void pool_client::end_read(int slot) noexcept {
    _reads[size_t(slot)]->active = false;
}

std::optional<uint32_t> pool_client::first_bad_page(int slot) const noexcept {
    const std::byte* pages = read_pages(slot);
    const uint64_t* sums = read_checksums(slot);
    for (uint32_t i = 0; i < _reads[size_t(slot)]->nr_pages; i++)
        if (page_checksum(pages + size_t(i) * page_size) != sums[i])
            return i;
    return std::nullopt;
}

read_status pool_client::read_now(uint64_t first_page, uint32_t nr_pages, read_mode mode, int& slot,
                                  std::chrono::steady_clock::time_point until) {
    slot = begin_read(first_page, nr_pages, mode);
    if (slot < 0)
        throw error("no free pool read slot");
    read_status st;
    while ((st = poll_read(slot)) == read_status::pending) {
        if (std::chrono::steady_clock::now() > until) {
            end_read(slot);
            throw error(fmt::format("pool pages [{}, +{}) of object {:016x}: no answer in time",
                                    first_page, nr_pages, _object));
        }
        progress(std::chrono::milliseconds(1));
    }
    return st;
}

// --- writes ----------------------------------------------------------------

void pool_client::wait_puts() {
    while (_puts_outstanding > 0)
        progress(std::chrono::milliseconds(10));
}

uint32_t pool_client::put_members(uint64_t first_stripe, uint32_t count, int only_slot,
                                  const std::byte* pages, const uint64_t* checksums) {
    const auto& g = _layout.geo;
    const uint32_t n = g.members(), pps = _layout.pages_per_stripe, mlen = _layout.member_len;
    sync_with_health();
    // Parity of every stripe first, then the members go out node by node.
    std::vector<std::byte> parity_mem(size_t(count) * g.parity * mlen + raid::alignment);
    auto* parity = reinterpret_cast<std::byte*>(
        (reinterpret_cast<uintptr_t>(parity_mem.data()) + raid::alignment - 1) &
        ~uintptr_t(raid::alignment - 1));
    uint32_t failures = 0;
    _put_failures = 0;
    for (uint32_t i = 0; i < count; i++) {
        std::array<std::byte*, raid::max_members> ptrs{};
        for (uint32_t m = 0; m < n; m++)
            // The data is only read: encode writes the parity members alone.
            ptrs[m] = m < g.data ? const_cast<std::byte*>(pages) + (size_t(i) * pps) * page_size +
                                       size_t(m) * mlen
                                 : parity + (size_t(i) * g.parity + (m - g.data)) * mlen;
        if (g.parity)
            _codec.encode(std::span(ptrs.data(), n), mlen);
        const uint64_t stripe = first_stripe + i;
        for (uint32_t m = 0; m < n; m++) {
            const uint32_t slot = _layout.node_of(stripe, m);
            if (only_slot >= 0 && slot != uint32_t(only_slot))
                continue;
            request r{op::put, _object, chunk_of(stripe, m), _layout.meta_len(), mlen, _next_id++};
            expectation e{r.request_id, monotonic_ns(), op::put, -1, 0, 0, uint8_t(m)};
            if (post(slot, r, checksums + size_t(i) * pps, ptrs[m], e))
                _puts_outstanding++;
            else
                failures++;
        }
    }
    wait_puts();
    return failures + _put_failures;
}

uint32_t pool_client::put_stripes(uint64_t first_stripe, uint32_t count, const std::byte* pages,
                                  const uint64_t* checksums) {
    return put_members(first_stripe, count, -1, pages, checksums);
}

uint32_t pool_client::put_slot(uint64_t first_stripe, uint32_t count, uint32_t slot,
                               const std::byte* pages, const uint64_t* checksums) {
    return put_members(first_stripe, count, int(slot), pages, checksums);
}

void pool_client::drop_object() {
    sync_with_health();
    _put_failures = 0;
    for (uint32_t s = 0; s < _links.size(); s++) {
        request r{op::drop, _object, 0, 0, 0, _next_id++};
        expectation e{r.request_id, monotonic_ns(), op::drop, -1, 0, 0, 0};
        if (post(s, r, nullptr, nullptr, e))
            _puts_outstanding++;
    }
    wait_puts();
}

std::string pool_client::node_stats(uint32_t slot) {
    sync_with_health();
    _stats_done = false;
    request r{op::stats, _object, 0, 0, 0, _next_id++};
    expectation e{r.request_id, monotonic_ns(), op::stats, -1, 0, 0, 0};
    if (!post(slot, r, nullptr, nullptr, e))
        return "error: node is dead";
    while (!_stats_done)
        progress(std::chrono::milliseconds(10));
    return _stats_reply;
}

} // namespace ferry::pool
