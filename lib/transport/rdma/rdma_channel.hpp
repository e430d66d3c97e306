// The rdma backend of page_channel, destination side. A request's pages are
// READ one-sided from the source's registered staging region: their state
// bytes, checksums and data in three READs posted together (the source's
// NIC serves READs of one queue pair in order, so data read after a state
// byte that says "staged" is that staged data). Pages found unstaged cost
// one SEND to the source's CPU and its answer once they are staged, then
// another READ. A bad copy is restaged by the source before it is read
// again. Reads land in registered slots that replies point into, so
// UFFDIO_COPY takes pages from where the NIC wrote them.
#pragma once

#include "core/mapping.hpp"
#include "criu/lazy_page_index.hpp"
#include "sys/stream.hpp"
#include "transport/page_channel.hpp"
#include "transport/rdma/rdma_connection.hpp"
#include "transport/rdma/rdma_messages.hpp"

#include <array>
#include <memory>
#include <vector>

namespace ferry::transport::rdma {

// What one channel did, for the transport's report: what a fault costs in
// round trips, bytes and the source's attention.
struct channel_traffic {
    uint64_t requests = 0;
    uint64_t read_batches = 0; // round trips of READs (3 READs each)
    uint64_t stage_asks = 0;   // round trips through the source's CPU
    uint64_t bytes_read = 0;   // READ payloads
    uint64_t messages_bytes = 0;
};

class rdma_channel final : public page_channel {
  public:
    // Connects to the source's RDMA CM port on `source`'s address with the
    // acceptance's token. `control` stays open: "done" goes over it, and
    // the source treats its closing as our end. A fault channel asks the
    // source to stage missing pages at once; a background channel waits for
    // the source's own order. A silent source fails it after `wait`.
    rdma_channel(std::unique_ptr<net::stream> control,
                 const FerryControl__PageChannelAccepted& accepted, uint32_t max_pages, bool urgent,
                 std::chrono::milliseconds timeout, patience wait = {});
    rdma_channel(const rdma_channel&) = delete;
    rdma_channel& operator=(const rdma_channel&) = delete;
    ~rdma_channel() override;

    [[nodiscard]] channel_capabilities capabilities() const noexcept override {
        return {.one_sided = false, .zero_copy_replies = true};
    }
    void send(const wire::page_request& r) override;
    incoming_reply* pump(size_t budget) override;
    void finish_reply() noexcept override;
    [[nodiscard]] int wait_fd() const noexcept override { return _conn->wait_fd(); }
    [[nodiscard]] uint32_t max_pages() const noexcept override { return _max_pages; }
    [[nodiscard]] uint64_t bytes_received() const noexcept override { return _traffic.bytes_read; }
    [[nodiscard]] const channel_traffic& traffic() const noexcept { return _traffic; }

  private:
    // queued: waits for a slot; reading: READs in flight; asking: waits for
    // the source's answer; read: every page is in.
    enum class phase : uint8_t { queued, reading, asking, read };
    struct pending {
        wire::page_request request;
        uint64_t first_page;
        uint32_t slot;
        phase at;
        uint32_t read_from; // first page of the READ in flight
        uint32_t ready;     // pages read and staged, from the start
        uint32_t reported;  // pages handed out
    };
    // A landing slot: state bytes, checksums and pages of one request.
    struct slot_view {
        uint8_t* states;
        uint64_t* checksums;
        std::byte* pages;
    };
    [[nodiscard]] slot_view slot(uint32_t i) const noexcept;
    void start(pending& p);
    void post_reads(pending& p, uint32_t from);
    void ask(pending& p, stage_ask what, uint32_t from);
    void completed(const ibv_wc& wc);
    void reads_done(pending& p);
    void answered(const staged_message& a);
    [[nodiscard]] pending* find_slot(uint32_t slot) noexcept;
    void check_peer();

    std::unique_ptr<net::stream> _control;
    uint32_t _max_pages;
    bool _urgent;
    criu::lazy_page_index _index; // as the source numbered the region
    uint64_t _remote_base = 0, _remote_pages = 0;
    uint32_t _rkey = 0;
    uint64_t _states_offset = 0, _checksums_offset = 0, _data_offset = 0;
    std::unique_ptr<rdma_connection> _conn;
    uint32_t _slots = 0;
    size_t _slot_bytes = 0;
    mapping _landing;
    mr_ptr _landing_mr;
    std::vector<uint32_t> _free_slots;
    std::array<pending, 512> _queue{};
    size_t _head = 0, _count = 0;
    incoming_reply _reply;
    uint64_t _next_peer_check_ns = 0;
    channel_traffic _traffic;
};

} // namespace ferry::transport::rdma
