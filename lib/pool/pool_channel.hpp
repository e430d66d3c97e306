// The pool backend of page_channel: pages come from the memory pool's
// nodes (pool_client.hpp), rebuilt from parity when a node is lost. A page
// the pool does not hold yet (the source is still pushing) is asked of the
// source over its own channel, so faults before the hand-off are served
// from whichever has the page. After the hand-off the source may be gone;
// only a page that is in neither place stops the migration.
#pragma once

#include "criu/lazy_page_index.hpp"
#include "pool/pool_client.hpp"
#include "pool/pool_layout.hpp"
#include "transport/page_channel.hpp"

#include <array>
#include <memory>
#include <string>

namespace ferry {

struct pool_channel_stats {
    uint64_t pool_pages = 0;
    uint64_t source_pages = 0;
};

class pool_channel final : public page_channel {
  public:
    pool_channel(const pool::pool_spec& spec, uint64_t object, const criu::lazy_page_index& index,
                 std::shared_ptr<pool::pool_health> health, std::unique_ptr<page_channel> source,
                 uint32_t max_pages, std::string name, double deadline_scale = 1.0);

    void send(const wire::page_request& r) override;
    incoming_reply* pump(size_t budget) override;
    void finish_reply() noexcept override;
    // Reads from the pool complete on its own threads: polled, like a
    // one-sided fabric.
    [[nodiscard]] channel_capabilities capabilities() const noexcept override {
        return {.one_sided = true, .zero_copy_replies = false};
    }
    [[nodiscard]] int wait_fd() const noexcept override { return -1; }
    [[nodiscard]] uint32_t max_pages() const noexcept override { return _max_pages; }
    [[nodiscard]] uint64_t bytes_received() const noexcept override;

    [[nodiscard]] const pool_channel_stats& stats() const noexcept { return _stats; }
    [[nodiscard]] const pool::client_stats& client_stats() const noexcept {
        return _client.stats();
    }

  private:
    struct pending {
        wire::page_request request;
        uint64_t first_page = 0;
        int read = -1;          // the pool read serving it
        bool at_source = false; // forwarded to the source
    };
    void start_reads() noexcept;
    incoming_reply* forward_to_source(pending& p, size_t budget);
    incoming_reply* pump_source(size_t budget);

    const criu::lazy_page_index& _index;
    pool::pool_client _client;
    std::unique_ptr<page_channel> _source;
    bool _source_gone = false; // its channel failed: the pool is all there is
    std::string _source_error; // why, for the error of a page the pool lacks
    uint32_t _max_pages;
    std::array<pending, 512> _queue{};
    size_t _head = 0, _count = 0;
    incoming_reply _reply;
    pool_channel_stats _stats;
};

} // namespace ferry
