// The destination's end of a pre-copy's PRECOPY channel (control.proto,
// channel_kind): on a thread of its own from lazy-pages' start, it receives
// the pages the source streams before the freeze, checks each against its
// checksum, stages them (staged_pages.hpp), and publishes the ones the
// source's last scan says are still valid. Any failure leaves the staged
// copy unused: every page is then fetched, as without a pre-copy.
#pragma once

#include "staged_pages.hpp"
#include "sys/net.hpp"
#include "tls/credentials.hpp"

#include <spdlog/logger.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ferry::lazy {

class precopy_receiver {
  public:
    // Connects to the source daemon at `source` within `connect_timeout`
    // and waits up to `wait` for each of its frames.
    precopy_receiver(net::endpoint source, tls::credentials_ptr creds, std::string migration_id,
                     std::chrono::milliseconds connect_timeout, std::chrono::milliseconds wait,
                     spdlog::logger& log);
    // Shuts the connection down and joins at once.
    ~precopy_receiver();
    precopy_receiver(const precopy_receiver&) = delete;
    precopy_receiver& operator=(const precopy_receiver&) = delete;

    [[nodiscard]] const staged_pages& staged() const noexcept { return _staged; }
    // Why the staged copy goes unused ("" while it may still be used).
    [[nodiscard]] std::string unused() const;

  private:
    void receive();
    // Page frames up to the empty reply that ends them, checked and
    // staged; counts them into `frames` and `pages`.
    void receive_pages(net::stream& conn, const std::string& peer, uint64_t& frames,
                       uint64_t& pages);
    // precopy_valid frames up to the last; `more`: the last round follows.
    std::vector<std::pair<uint32_t, std::pair<uint64_t, uint64_t>>>
    receive_valid(net::stream& conn, const std::string& peer, bool& more);
    void give_up(const std::string& why) noexcept;

    const net::endpoint _source;
    const tls::credentials_ptr _creds;
    const std::string _migration_id;
    const std::chrono::milliseconds _connect_timeout, _wait;
    spdlog::logger& _log;
    staged_pages _staged;
    mutable std::mutex _mu;
    std::string _unused;
    bool _stop = false;
    net::stream* _conn = nullptr; // under _mu, while open
    std::thread _thread;          // last
};

} // namespace ferry::lazy
