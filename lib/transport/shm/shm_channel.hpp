// The shm backend of page_channel: pages are read one-sided from the
// source's registered region (shm_region.hpp), paying the link model's cost;
// pages the source has not staged yet are asked for through the region's
// request ring. Replies point straight into the region, so UFFDIO_COPY takes
// its source from shared memory with no copy in between.
#pragma once

#include "core/mapping.hpp"
#include "criu/lazy_page_index.hpp"
#include "sys/stream.hpp"
#include "transport/page_channel.hpp"
#include "transport/staging/region.hpp"

#include <array>
#include <vector>

namespace ferry::transport::shm {

using staging::region_view;
using staging::stage_request;

class shm_channel final : public page_channel {
  public:
    // Maps the region named in the handshake reply. `control` stays open:
    // "done" goes over it, and the source treats its closing as our end.
    // A fault channel asks the source to stage missing pages at once; a
    // background channel waits for the source's own staging, so it never
    // queues ahead of a fault.
    shm_channel(std::unique_ptr<net::stream> control,
                const FerryControl__PageChannelAccepted& accepted, link_model model,
                uint32_t max_pages, bool urgent);
    shm_channel(const shm_channel&) = delete;
    shm_channel& operator=(const shm_channel&) = delete;
    ~shm_channel() override = default;

    [[nodiscard]] channel_capabilities capabilities() const noexcept override {
        return {.one_sided = true, .zero_copy_replies = true};
    }
    void send(const wire::page_request& r) override;
    incoming_reply* pump(size_t budget) override;
    void finish_reply() noexcept override;
    [[nodiscard]] int wait_fd() const noexcept override { return -1; }
    [[nodiscard]] uint32_t max_pages() const noexcept override { return _max_pages; }
    [[nodiscard]] uint64_t bytes_received() const noexcept override { return _bytes_read; }

  private:
    struct pending {
        wire::page_request request;
        uint64_t first_page;
        uint32_t reported; // pages already handed out (and paid for)
    };
    // The region page holding image address `vaddr` of `pid`; throws if none.
    [[nodiscard]] uint64_t page_index(uint32_t pid, uint64_t vaddr, uint32_t nr_pages) const;
    void post(const stage_request& r);

    std::unique_ptr<net::stream> _control;
    link_model _model;
    uint32_t _max_pages;
    bool _urgent;
    mapping _map;
    region_view _region;
    criu::lazy_page_index _index; // as the source numbered the region
    std::array<pending, 512> _queue{};
    size_t _head = 0, _count = 0;
    incoming_reply _reply;
    uint64_t _bytes_read = 0;
};

} // namespace ferry::transport::shm
