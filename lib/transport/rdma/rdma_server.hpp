// Source side of the rdma fabric, one per outgoing migration: the staging
// region (staging/stager.hpp) registered READ-only with the RDMA device, an
// RDMA CM listener that admits only connections presenting a token this
// migration issued over its TLS control channel, and one thread that answers
// the destination's stage requests. Staged pages are READ by the
// destination without this daemon's CPU; only pages it found unstaged cost
// a receive here, and an answer once the stager has written them.
#pragma once

#include "core/unique_fd.hpp"
#include "transport/rdma/rdma_connection.hpp"
#include "transport/rdma/rdma_messages.hpp"
#include "transport/rdma/token_gate.hpp"
#include "transport/staging/stager.hpp"

#include <spdlog/logger.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace ferry::transport::rdma {

class rdma_server {
  public:
    // Listens on every local address (the RDMA CM picks the port), with a
    // protection domain on the machine's first RDMA device. Throws
    // ferry::error if there is none.
    explicit rdma_server(std::shared_ptr<spdlog::logger> log);
    rdma_server(const rdma_server&) = delete;
    rdma_server& operator=(const rdma_server&) = delete;
    ~rdma_server();

    // Registers [base, base + size) for remote READ: before the freeze, the
    // prepared region file, so pinning its pages stays out of the downtime.
    void register_region(std::byte* base, uint64_t size);
    // Starts answering for `stager`'s region, registering it unless the
    // prepared registration covers it (the stager may have grown the file).
    // Connections wait for a silent destination as `wait` says.
    void serve(staging::stager& stager, patience wait = {});
    // Takes every connection down and deregisters the region: no peer reads
    // it after this returns. The stager may go after that.
    void stop() noexcept;
    // From the staging thread, after each batch: wakes the server if a
    // request waits for pages.
    void pages_staged() noexcept;

    // What a page channel's acceptance advertises.
    [[nodiscard]] uint16_t port() const { return _listener->port(); }
    [[nodiscard]] uint64_t region_addr() const noexcept;
    [[nodiscard]] uint64_t region_size() const noexcept;
    [[nodiscard]] uint32_t rkey() const noexcept;
    // A fresh token that admits one connection.
    [[nodiscard]] channel_token issue_token();

  private:
    struct waiting {
        rdma_connection* conn;
        uint32_t tag;
        uint64_t first_page;
        uint32_t count;
    };
    void run();
    void admit_one();
    void take_requests(rdma_connection& conn);
    void answer(rdma_connection& conn, uint32_t tag, bool ok);
    void answer_staged();
    void drop(rdma_connection* conn);

    std::shared_ptr<spdlog::logger> _log;
    std::unique_ptr<rdma_listener> _listener;
    token_gate _tokens{16}; // two channels per migration; some may go unused
    patience _patience;
    unique_fd _wake; // eventfd: staged pages, or stop
    unique_fd _epoll;
    std::atomic<bool> _stopping{false};
    std::atomic<uint32_t> _waiting_count{0};
    staging::region_view _region;
    mr_ptr _mr;
    std::vector<std::unique_ptr<rdma_connection>> _peers;
    std::vector<waiting> _waiting;
    uint64_t _requests = 0, _wakeups = 0;
    std::thread _thread;
};

} // namespace ferry::transport::rdma
