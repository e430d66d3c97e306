// The tcp backend of page_channel: requests over a socket, replies read
// incrementally into a staging buffer reserved up front, so the fault loop
// never blocks on a half-arrived reply and never allocates.
#pragma once

#include "core/mapping.hpp"
#include "sys/stream.hpp"
#include "transport/page_channel.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ferry::transport::tcp {

class tcp_channel final : public page_channel {
  public:
    // `conn` is a connection whose channel handshake is done. A fault
    // channel's staging buffer is populated now, so that no fault waits for
    // its pages; a background channel's (1024 pages) on first use instead:
    // populating it is ~1 ms per MiB on a VM here, and the channel opens as
    // the source accepts it, inside the downtime (it held lazy-pages' start
    // for ~3 ms).
    tcp_channel(std::unique_ptr<net::stream> conn, uint32_t max_pages, bool populate);
    tcp_channel(const tcp_channel&) = delete;
    tcp_channel& operator=(const tcp_channel&) = delete;
    ~tcp_channel() override;

    [[nodiscard]] channel_capabilities capabilities() const noexcept override { return {}; }
    void send(const wire::page_request& r) override;
    // Reads until the socket would block, the current reply is complete, or
    // `budget` bytes were read.
    incoming_reply* pump(size_t budget) override;
    void finish_reply() noexcept override;
    [[nodiscard]] int wait_fd() const noexcept override { return _conn->fd(); }
    [[nodiscard]] bool buffered() const noexcept override { return _conn->buffered(); }
    [[nodiscard]] uint32_t max_pages() const noexcept override { return _max_pages; }
    [[nodiscard]] uint64_t bytes_received() const noexcept override { return _bytes_received; }

  private:
    // One read into [dst + have, dst + want); returns false if it would block.
    bool read_some(std::byte* dst, size_t want, size_t& have, size_t& budget);

    enum class stage : uint8_t { header, checksums, data, complete };

    std::unique_ptr<net::stream> _conn;
    uint32_t _max_pages;
    mapping _staging_map;          // _max_pages pages, populated up front
    std::byte* _staging = nullptr; // _staging_map's
    std::unique_ptr<uint64_t[]> _checksums;
    wire::header_bytes _header_buf{};
    stage _stage = stage::header;
    size_t _have = 0;
    incoming_reply _reply;
    uint64_t _bytes_received = 0;
};

} // namespace ferry::transport::tcp
