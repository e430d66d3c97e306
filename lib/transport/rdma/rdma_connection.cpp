#include "transport/rdma/rdma_connection.hpp"

#include "core/error.hpp"
#include "sys/stream.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <cstring>
#include <optional>

namespace ferry::transport::rdma {

namespace {

constexpr int resolve_ms = 2000;
// RNR 7 would retry forever.
constexpr uint8_t rnr_retry_count = 6;
// 4.096 us * 2^20 = 4.3 s per try: past that a peer is gone, whatever the scale.
constexpr uint8_t most_patient_exponent = 20;
constexpr uint8_t read_depth = 16; // READs in flight per QP (rxe allows 128)

std::string endpoint_text(const sockaddr* sa) {
    if (!sa || sa->sa_family != AF_INET)
        return "an RDMA peer";
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
    return fmt::format("{}:{}", ip, ntohs(in->sin_port));
}

// The CM puts the ACK timeout into the QP at its move to RTS; both sides
// set it, so each side's sends wait as long.
void set_ack_timeout(rdma_cm_id* id, patience wait) {
    uint8_t t = wait.ack_timeout_exponent;
    check_verbs(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, sizeof t),
                "rdma_set_option (ACK timeout)");
}

} // namespace

patience patience::scaled(double scale) noexcept {
    patience p;
    while (scale > 1.0 && p.ack_timeout_exponent < most_patient_exponent) {
        p.ack_timeout_exponent++;
        scale /= 2;
    }
    return p;
}

std::chrono::milliseconds patience::silence() const noexcept {
    const uint64_t per_try_ns = 4096ULL << ack_timeout_exponent;
    return std::chrono::milliseconds(per_try_ns * (uint64_t(retries) + 1) / 1'000'000);
}

rdma_connection::rdma_connection(event_channel_ptr ec, cm_id_ptr id, ibv_pd* pd, queue_sizes sizes)
    : _ec(std::move(ec)), _id(std::move(id)), _pd(pd), _sizes(sizes) {
    if (!_pd) {
        _own_pd = make_pd(_id->verbs);
        _pd = _own_pd.get();
    }
}

rdma_connection::~rdma_connection() {
    if (_id) {
        rdma_disconnect(_id.get());
        if (_id->qp)
            rdma_destroy_qp(_id.get()); // before its CQ and PD go
    }
}

// The QP, its CQ and completion channel, and the receive and send buffers
// (one registration), with every receive posted: the peer may send the
// moment the connection is up.
void rdma_connection::create_qp() {
    _cch = make_comp_channel(_id->verbs);
    const int cq_entries = int(_sizes.send + _sizes.recv);
    _cq = make_cq(_id->verbs, cq_entries, _cch.get());
    ibv_qp_init_attr qa{};
    qa.send_cq = qa.recv_cq = _cq.get();
    qa.qp_type = IBV_QPT_RC;
    qa.sq_sig_all = 0;
    qa.cap.max_send_wr = _sizes.send;
    qa.cap.max_recv_wr = _sizes.recv;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    qa.cap.max_inline_data = _sizes.message_bytes;
    if (rdma_create_qp(_id.get(), _pd, &qa)) {
        qa.cap.max_inline_data = 0; // the device inlines nothing: copy into a registered buffer
        check_verbs(rdma_create_qp(_id.get(), _pd, &qa), "rdma_create_qp");
    }
    _max_inline = qa.cap.max_inline_data;
    _msg_bufs.resize(size_t(_sizes.recv + _sizes.send) * _sizes.message_bytes);
    _bufs_mr = register_memory(_pd, _msg_bufs.data(), _msg_bufs.size(), IBV_ACCESS_LOCAL_WRITE,
                               "RDMA message buffers");
    for (uint32_t i = 0; i < _sizes.recv; i++)
        post_recv(i);
    arm();
}

void rdma_connection::post_recv(uint32_t slot) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(_msg_bufs.data() + size_t(slot) * _sizes.message_bytes),
                _sizes.message_bytes, _bufs_mr->lkey};
    ibv_recv_wr wr{};
    ibv_recv_wr* bad = nullptr;
    wr.wr_id = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    check_verbs(ibv_post_recv(_id->qp, &wr, &bad), "ibv_post_recv");
}

// One signalled work request of one buffer; `remote` and `rkey` only for
// the one-sided ones.
void rdma_connection::post_one(ibv_sge sge, ibv_wr_opcode op, unsigned flags, uint64_t wr_id,
                               uint64_t remote, uint32_t rkey, const char* what) {
    ibv_send_wr wr{};
    ibv_send_wr* bad = nullptr;
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED | flags;
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = rkey;
    check_verbs(ibv_post_send(_id->qp, &wr, &bad), what);
}

void rdma_connection::post_read(void* local, const ibv_mr* local_mr, uint64_t remote, uint32_t rkey,
                                uint32_t len, uint64_t wr_id) {
    post_one({reinterpret_cast<uintptr_t>(local), len, local_mr->lkey}, IBV_WR_RDMA_READ, 0, wr_id,
             remote, rkey, "post RDMA READ");
}

void rdma_connection::post_send(std::span<const std::byte> msg, uint64_t wr_id) {
    if (msg.size() > _sizes.message_bytes)
        throw error(
            fmt::format("RDMA message of {} bytes exceeds {}", msg.size(), _sizes.message_bytes));
    // Without inline data the bytes must stay put until the send completes:
    // a registered slot per send in flight, reused in turn.
    std::byte* slot =
        _msg_bufs.data() + size_t(_sizes.recv + _next_send_slot) * _sizes.message_bytes;
    _next_send_slot = (_next_send_slot + 1) % _sizes.send;
    std::memcpy(slot, msg.data(), msg.size());
    post_one({reinterpret_cast<uintptr_t>(slot), uint32_t(msg.size()), _bufs_mr->lkey}, IBV_WR_SEND,
             msg.size() <= _max_inline ? IBV_SEND_INLINE : 0, wr_id, 0, 0, "post RDMA SEND");
}

size_t rdma_connection::poll(std::span<ibv_wc> out) {
    const int n = ibv_poll_cq(_cq.get(), int(out.size()), out.data());
    if (n < 0)
        throw error(
            fmt::format("polling the completions of the RDMA connection to {} failed", _peer));
    for (int i = 0; i < n; i++) {
        const ibv_wc& wc = out[size_t(i)];
        if (wc.status != IBV_WC_SUCCESS)
            throw error(fmt::format("RDMA connection to {} failed: {} (work request {})", _peer,
                                    ibv_wc_status_str(wc.status), wc.wr_id));
    }
    return size_t(n);
}

// A receive's slot is posted again at once: its bytes stay readable until
// the peer sends that many more messages, which the caller's protocol
// (one request, one answer) keeps from happening before it has read them.
std::span<const std::byte> rdma_connection::received(const ibv_wc& wc) {
    const auto* data = _msg_bufs.data() + size_t(wc.wr_id) * _sizes.message_bytes;
    post_recv(uint32_t(wc.wr_id));
    return {data, wc.byte_len};
}

size_t rdma_connection::poll_or_arm(std::span<ibv_wc> out) {
    if (const size_t n = poll(out))
        return n;
    if (consume_wakeup())
        _armed = false; // an armed CQ raises one event, then is disarmed
    if (_armed)
        return 0;
    arm();
    return poll(out); // what came before the arm raised no event
}

void rdma_connection::arm() {
    check_verbs(ibv_req_notify_cq(_cq.get(), 0), "ibv_req_notify_cq");
    _armed = true;
}

bool rdma_connection::consume_wakeup() {
    ibv_cq* cq = nullptr;
    void* ctx = nullptr;
    if (ibv_get_cq_event(_cch.get(), &cq, &ctx) != 0)
        return false; // EAGAIN: the fd is non-blocking
    ibv_ack_cq_events(cq, 1);
    return true;
}

bool rdma_connection::disconnected() {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(_ec.get(), &ev))
        return false;
    const bool gone = ev->event == RDMA_CM_EVENT_DISCONNECTED ||
                      ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL ||
                      ev->event == RDMA_CM_EVENT_TIMEWAIT_EXIT;
    rdma_ack_cm_event(ev);
    return gone;
}

std::unique_ptr<rdma_connection>
rdma_connection::connect(const net::endpoint& peer, std::span<const std::byte> hello,
                         std::vector<std::byte>& reply, queue_sizes sizes,
                         std::chrono::milliseconds timeout, patience wait) {
    const std::string who = peer.to_string();
    if (hello.size() > 56) // RDMA_PS_TCP's limit for a connect's private data
        throw error("RDMA connect: private data over 56 bytes");
    auto ec = make_event_channel();
    auto id = make_cm_id(ec.get(), nullptr);
    sockaddr_in addr = peer.addr;
    check_verbs(
        rdma_resolve_addr(id.get(), nullptr, reinterpret_cast<sockaddr*>(&addr), resolve_ms),
        "rdma_resolve_addr");
    rdma_ack_cm_event(await_cm_event(ec.get(), RDMA_CM_EVENT_ADDR_RESOLVED,
                                     std::chrono::milliseconds(resolve_ms + 500),
                                     "RDMA address of " + who));
    set_ack_timeout(id.get(), wait);
    check_verbs(rdma_resolve_route(id.get(), resolve_ms), "rdma_resolve_route");
    rdma_ack_cm_event(await_cm_event(ec.get(), RDMA_CM_EVENT_ROUTE_RESOLVED,
                                     std::chrono::milliseconds(resolve_ms + 500),
                                     "RDMA route to " + who));
    auto* idp = id.get();
    std::unique_ptr<rdma_connection> c(
        new rdma_connection(std::move(ec), std::move(id), nullptr, sizes));
    c->_peer = who;
    c->create_qp();
    rdma_conn_param cp{};
    cp.private_data = hello.data();
    cp.private_data_len = uint8_t(hello.size());
    cp.initiator_depth = read_depth;
    cp.responder_resources = 0; // nobody reads from this side
    cp.retry_count = wait.retries;
    cp.rnr_retry_count = rnr_retry_count;
    check_verbs(rdma_connect(idp, &cp), "rdma_connect");
    rdma_cm_event* ev = await_cm_event(c->_ec.get(), RDMA_CM_EVENT_ESTABLISHED, timeout,
                                       "RDMA connection to " + who);
    const auto* pd = static_cast<const std::byte*>(ev->param.conn.private_data);
    reply.assign(pd, pd + ev->param.conn.private_data_len);
    rdma_ack_cm_event(ev);
    return c;
}

std::unique_ptr<rdma_listener> rdma_listener::bind(const net::endpoint& local) {
    auto l = std::make_unique<rdma_listener>();
    l->_ec = make_event_channel();
    l->_id = make_cm_id(l->_ec.get(), nullptr);
    sockaddr_in addr = local.addr;
    check_verbs(rdma_bind_addr(l->_id.get(), reinterpret_cast<sockaddr*>(&addr)),
                "rdma_bind_addr (no RDMA device on that address?)");
    ibv_context* device = l->_id->verbs;
    if (!device && addr.sin_addr.s_addr == htonl(INADDR_ANY)) {
        // Bound to every address: the PD goes on the first device, and a
        // request arriving on another is refused (accept).
        int n = 0;
        ibv_context** devices = rdma_get_devices(&n);
        if (devices && n > 0)
            device = devices[0];
        if (devices)
            rdma_free_devices(devices);
        if (!device)
            throw error("this host has no RDMA device (is rdma_rxe or a NIC's driver loaded?)");
    }
    if (!device)
        throw error(fmt::format("{} is not the address of an RDMA device", local.to_string()));
    check_verbs(rdma_listen(l->_id.get(), 16), "rdma_listen");
    l->_pd = make_pd(device);
    return l;
}

std::unique_ptr<rdma_listener> rdma_listener::bind_any() {
    net::endpoint any;
    any.addr.sin_family = AF_INET;
    return bind(any);
}

uint16_t rdma_listener::port() const {
    return ntohs(rdma_get_src_port(_id.get()));
}

std::unique_ptr<rdma_connection> rdma_listener::accept(const admission& admit, queue_sizes sizes,
                                                       std::chrono::milliseconds timeout,
                                                       patience wait) {
    rdma_cm_event* ev =
        await_cm_event(_ec.get(), RDMA_CM_EVENT_CONNECT_REQUEST, timeout, "RDMA accept");
    rdma_cm_id* child = ev->id;
    const std::string who = endpoint_text(rdma_get_peer_addr(child));
    const auto* data = static_cast<const std::byte*>(ev->param.conn.private_data);
    const auto answer = admit({data, ev->param.conn.private_data_len});
    if (answer && answer->size() > 196)
        throw error("RDMA accept: private data over 196 bytes");
    const uint8_t peer_depth = ev->param.conn.initiator_depth;
    rdma_ack_cm_event(ev);
    if (answer && child->verbs != _pd->context) {
        rdma_reject(child, nullptr, 0);
        rdma_destroy_id(child);
        throw error(fmt::format("RDMA connection from {} came on another device", who));
    }
    if (!answer) {
        rdma_reject(child, nullptr, 0);
        rdma_destroy_id(child);
        return nullptr;
    }
    // The child gets an event channel of its own, for its DISCONNECTED.
    auto ec = make_event_channel();
    if (rdma_migrate_id(child, ec.get())) {
        rdma_reject(child, nullptr, 0);
        rdma_destroy_id(child);
        throw sys_error("rdma_migrate_id");
    }
    std::unique_ptr<rdma_connection> c(
        new rdma_connection(std::move(ec), cm_id_ptr(child), _pd.get(), sizes));
    c->_peer = who;
    set_ack_timeout(child, wait);
    c->create_qp();
    rdma_conn_param cp{};
    cp.private_data = answer->data();
    cp.private_data_len = uint8_t(answer->size());
    // What lets the peer READ from us: as many READs in flight as it asked
    // for, up to what rxe allows.
    cp.responder_resources = std::min<uint8_t>(peer_depth ? peer_depth : 1, 128);
    cp.initiator_depth = 0;
    cp.retry_count = wait.retries;
    cp.rnr_retry_count = rnr_retry_count;
    check_verbs(rdma_accept(child, &cp), "rdma_accept");
    rdma_ack_cm_event(await_cm_event(c->_ec.get(), RDMA_CM_EVENT_ESTABLISHED, timeout,
                                     "RDMA connection from " + who));
    return c;
}

} // namespace ferry::transport::rdma
