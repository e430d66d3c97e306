#include "transport/rdma/verbs.hpp"

#include "core/error.hpp"
#include "sys/net.hpp"
#include "sys/stream.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/epoll.h>

namespace ferry::transport::rdma {

void check_verbs(int rc, const char* what) {
    if (rc == 0)
        return;
    throw sys_error(what, rc > 0 ? rc : errno);
}

// The QP an id carries goes first (rdma_destroy_id refuses an id with one).
void cm_id_deleter::operator()(rdma_cm_id* id) const noexcept {
    if (id->qp)
        rdma_destroy_qp(id);
    rdma_destroy_id(id);
}

void epoll_watch(int epoll, int fd, uint64_t tag) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    if (::epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &ev))
        throw sys_error("epoll_ctl ADD");
}

event_channel_ptr make_event_channel() {
    event_channel_ptr ec(rdma_create_event_channel());
    if (!ec)
        throw sys_error("rdma_create_event_channel (is rdma_ucm loaded?)");
    net::set_nonblocking(ec->fd, true);
    return ec;
}

cm_id_ptr make_cm_id(rdma_event_channel* ec, void* context) {
    rdma_cm_id* id = nullptr;
    check_verbs(rdma_create_id(ec, &id, context, RDMA_PS_TCP), "rdma_create_id");
    return cm_id_ptr(id);
}

pd_ptr make_pd(ibv_context* verbs) {
    pd_ptr pd(ibv_alloc_pd(verbs));
    if (!pd)
        throw sys_error("ibv_alloc_pd");
    return pd;
}

mr_ptr register_memory(ibv_pd* pd, void* addr, size_t len, int access, const char* what) {
    mr_ptr mr(ibv_reg_mr(pd, addr, len, access));
    if (!mr)
        throw sys_error(fmt::format("register {} ({} bytes) with the RDMA device", what, len));
    return mr;
}

comp_channel_ptr make_comp_channel(ibv_context* verbs) {
    comp_channel_ptr c(ibv_create_comp_channel(verbs));
    if (!c)
        throw sys_error("ibv_create_comp_channel");
    net::set_nonblocking(c->fd, true);
    return c;
}

cq_ptr make_cq(ibv_context* verbs, int entries, ibv_comp_channel* channel) {
    cq_ptr cq(ibv_create_cq(verbs, entries, nullptr, channel, 0));
    if (!cq)
        throw sys_error("ibv_create_cq");
    return cq;
}

rdma_cm_event* await_cm_event(rdma_event_channel* ec, rdma_cm_event_type want,
                              std::chrono::milliseconds timeout, const std::string& what) {
    const auto until = net::after(timeout);
    for (;;) {
        rdma_cm_event* ev = nullptr;
        if (rdma_get_cm_event(ec, &ev) == 0) {
            if (ev->event == want)
                return ev;
            const std::string got = rdma_event_str(ev->event);
            const int status = ev->status;
            rdma_ack_cm_event(ev);
            throw error(fmt::format("{}: {} (status {})", what, got, status));
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            throw sys_error(fmt::format("{}: rdma_get_cm_event", what));
        if (!net::wait_fd(ec->fd, POLLIN, until))
            throw error(
                fmt::format("{}: no {} within {} ms", what, rdma_event_str(want), timeout.count()));
    }
}

} // namespace ferry::transport::rdma
