// Owners of the verbs and RDMA CM objects the rdma backend uses, each made
// by a named factory and destroyed by its destructor, and the errors they
// raise. A connection declares them in creation order, so they are
// destroyed in reverse (rdma-core's rule: the QP before its CQ and PD, the
// CQ before its completion channel, MRs before the PD, the cm_id last).
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <chrono>
#include <memory>
#include <string>

namespace ferry::transport::rdma {

// Throws std::system_error naming `what` when rc is non-zero (verbs return
// an errno or -1 with errno set).
void check_verbs(int rc, const char* what);

struct event_channel_deleter {
    void operator()(rdma_event_channel* c) const noexcept { rdma_destroy_event_channel(c); }
};
struct cm_id_deleter {
    void operator()(rdma_cm_id* id) const noexcept;
};
struct pd_deleter {
    void operator()(ibv_pd* pd) const noexcept { ibv_dealloc_pd(pd); }
};
struct mr_deleter {
    void operator()(ibv_mr* mr) const noexcept { ibv_dereg_mr(mr); }
};
struct comp_channel_deleter {
    void operator()(ibv_comp_channel* c) const noexcept { ibv_destroy_comp_channel(c); }
};
struct cq_deleter {
    void operator()(ibv_cq* cq) const noexcept { ibv_destroy_cq(cq); }
};

using event_channel_ptr = std::unique_ptr<rdma_event_channel, event_channel_deleter>;
using cm_id_ptr = std::unique_ptr<rdma_cm_id, cm_id_deleter>; // destroys its QP first
using pd_ptr = std::unique_ptr<ibv_pd, pd_deleter>;
using mr_ptr = std::unique_ptr<ibv_mr, mr_deleter>;
using comp_channel_ptr = std::unique_ptr<ibv_comp_channel, comp_channel_deleter>;
// ibv_destroy_cq waits until every CQ event was acknowledged: acknowledge
// each as it is taken.
using cq_ptr = std::unique_ptr<ibv_cq, cq_deleter>;

// A non-blocking event channel (its fd is polled with a deadline).
event_channel_ptr make_event_channel();
cm_id_ptr make_cm_id(rdma_event_channel* ec, void* context);
pd_ptr make_pd(ibv_context* verbs);
mr_ptr register_memory(ibv_pd* pd, void* addr, size_t len, int access, const char* what);
comp_channel_ptr make_comp_channel(ibv_context* verbs);
cq_ptr make_cq(ibv_context* verbs, int entries, ibv_comp_channel* channel);

// Adds `fd` (a completion channel's, a CM event channel's, an eventfd) to
// `epoll` for reading, with `tag` as its event data.
void epoll_watch(int epoll, int fd, uint64_t tag);

// The next CM event on `ec` within `timeout`; it must be `want`, else a
// ferry::error names what came instead ("REJECTED", "UNREACHABLE", ...).
// The caller acknowledges it (rdma_ack_cm_event) once done with its data.
rdma_cm_event* await_cm_event(rdma_event_channel* ec, rdma_cm_event_type want,
                              std::chrono::milliseconds timeout, const std::string& what);

} // namespace ferry::transport::rdma
