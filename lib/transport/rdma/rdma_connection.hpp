// One reliable-connected queue pair to a peer, set up through the RDMA CM
// over the peers' IP addresses, and the listener that accepts them. What
// the rdma backend builds on: one-sided READs of a peer's registered memory,
// and small SENDs into receives posted ahead of time.
//
// Completions are polled; when there are none, the completion channel's fd
// (wait_fd) becomes readable once arm() was called and a completion came.
// Any completion in error fails the connection: a dead peer shows as a
// retry-exceeded error once its patience runs out, a bad rkey as a remote
// access error.
#pragma once

#include "sys/net.hpp"
#include "transport/rdma/verbs.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ferry::transport::rdma {

struct queue_sizes {
    uint32_t send = 128;          // work requests in flight, READs included
    uint32_t recv = 32;           // receives posted at all times
    uint32_t message_bytes = 256; // the largest SEND either side makes
};

// How long a silent peer is waited for. A packet without an ACK is sent
// again `retries` times, each after 4.096 us * 2^ack_timeout_exponent; then
// the work request fails (retry exceeded). A dead peer is an error, never a
// hang; a peer that stalls for a moment (a busy or emulated host) is not: a
// failed channel after the destination resumed loses the workload.
struct patience {
    uint8_t ack_timeout_exponent = 16; // 268 ms
    uint8_t retries = 6;               // rxe takes 7 for "forever", as the spec does RNR's 7

    // At least `scale` times as long (a migration's --deadline-scale); never
    // shorter than the default.
    [[nodiscard]] static patience scaled(double scale) noexcept;
    // How long a silent peer takes to fail a work request.
    [[nodiscard]] std::chrono::milliseconds silence() const noexcept;
};

class rdma_connection {
  public:
    // Dials `peer` (its IP and RDMA CM port), presenting `hello` (at most 56
    // bytes) as the connection's private data. `reply` gets the private data
    // the peer accepted with. Throws ferry::error naming the step that
    // failed (no route, rejected, no answer within `timeout`).
    static std::unique_ptr<rdma_connection>
    connect(const net::endpoint& peer, std::span<const std::byte> hello,
            std::vector<std::byte>& reply, queue_sizes sizes, std::chrono::milliseconds timeout,
            patience wait = {});
    rdma_connection(const rdma_connection&) = delete;
    rdma_connection& operator=(const rdma_connection&) = delete;
    ~rdma_connection();

    [[nodiscard]] ibv_pd* pd() const noexcept { return _pd; }
    [[nodiscard]] const std::string& peer() const noexcept { return _peer; }

    // One-sided read of `len` bytes at the peer's `remote` (its MR `rkey`)
    // into local memory registered as `local_mr`. Signalled: poll() reports it.
    void post_read(void* local, const ibv_mr* local_mr, uint64_t remote, uint32_t rkey,
                   uint32_t len, uint64_t wr_id);
    // A message of at most sizes.message_bytes, copied (inline when the
    // device allows). Signalled.
    void post_send(std::span<const std::byte> msg, uint64_t wr_id);

    // Completions so far, at most out.size(); a receive's data is
    // received(wc) until the next poll. Throws ferry::error on a completion
    // in error. Receives are posted again as they are consumed.
    size_t poll(std::span<ibv_wc> out);
    [[nodiscard]] std::span<const std::byte> received(const ibv_wc& wc);

    // poll(), and when there is nothing: takes the completion channel's
    // pending wake-up (so a level-triggered epoll stops reporting it), arms
    // the CQ unless it still is, and looks once more. After it returns 0,
    // wait_fd() becomes readable when the next completion comes.
    size_t poll_or_arm(std::span<ibv_wc> out);
    [[nodiscard]] int wait_fd() const noexcept { return _cch->fd; }
    // The CM's event fd: readable when the peer disconnects.
    [[nodiscard]] int cm_fd() const noexcept { return _ec->fd; }
    [[nodiscard]] bool disconnected();

  private:
    friend class rdma_listener;
    rdma_connection(event_channel_ptr ec, cm_id_ptr id, ibv_pd* pd, queue_sizes sizes);
    void create_qp();
    void post_recv(uint32_t slot);
    void arm();
    bool consume_wakeup();
    void post_one(ibv_sge sge, ibv_wr_opcode op, unsigned flags, uint64_t wr_id, uint64_t remote,
                  uint32_t rkey, const char* what);

    // In creation order; the destructor takes the QP down first.
    event_channel_ptr _ec;
    cm_id_ptr _id;
    pd_ptr _own_pd; // the active side's; an accepted connection uses its listener's
    ibv_pd* _pd = nullptr;
    comp_channel_ptr _cch;
    cq_ptr _cq;
    queue_sizes _sizes;
    std::vector<std::byte> _msg_bufs; // receive slots, then one per send in flight
    mr_ptr _bufs_mr;
    uint32_t _next_send_slot = 0;
    uint32_t _max_inline = 0;
    bool _armed = false; // the CQ will raise one event on wait_fd
    std::string _peer;
};

// A passive RDMA CM endpoint bound to one local address, with the
// protection domain every accepted connection shares, so memory registered
// before a connection comes can be read through it.
class rdma_listener {
  public:
    // Binds to `local` (an address of an RDMA-capable interface; port 0
    // picks one) and listens.
    static std::unique_ptr<rdma_listener> bind(const net::endpoint& local);
    // Every local address, any port; the PD on the first device.
    static std::unique_ptr<rdma_listener> bind_any();
    [[nodiscard]] ibv_pd* pd() const noexcept { return _pd.get(); }
    [[nodiscard]] uint16_t port() const;
    [[nodiscard]] int fd() const noexcept { return _ec->fd; }

    // The next connection request within `timeout`: `admit` sees its
    // private data and returns the private data to accept with (at most
    // 196 bytes), or nullopt to reject it. Returns nullptr for a rejected
    // request; throws on a timeout or a CM failure. The connection waits
    // for a silent peer as `wait` says.
    using admission =
        std::function<std::optional<std::vector<std::byte>>(std::span<const std::byte> hello)>;
    std::unique_ptr<rdma_connection> accept(const admission& admit, queue_sizes sizes,
                                            std::chrono::milliseconds timeout, patience wait = {});

  private:
    event_channel_ptr _ec;
    cm_id_ptr _id;
    pd_ptr _pd;
};

} // namespace ferry::transport::rdma
