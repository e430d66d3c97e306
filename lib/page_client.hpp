// The destination's end of a page channel over TCP: sends page requests and
// reads replies incrementally into a staging buffer reserved up front, so the
// fault loop never blocks on a half-arrived reply and never allocates.
#pragma once

#include "control.pb-c.h"
#include "net.hpp"
#include "page_wire.hpp"
#include "unique_fd.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

namespace ferry {

struct incoming_reply {
    wire::page_reply header;
    const uint64_t* checksums = nullptr; // header.nr_pages entries
    std::byte* pages = nullptr;          // page-aligned, header.nr_pages pages
    uint32_t pages_ready = 0;            // pages that have fully arrived
    [[nodiscard]] bool complete() const noexcept { return pages_ready == header.nr_pages; }
};

class page_client {
  public:
    // Connects and opens the channel for one migration. Throws on failure.
    static page_client connect(const net::endpoint& source, const std::string& migration_id,
                               FerryControl__ChannelKind kind, uint32_t max_pages,
                               std::chrono::milliseconds timeout);

    page_client(page_client&&) noexcept;
    page_client& operator=(page_client&&) = delete;
    ~page_client();

    [[nodiscard]] int fd() const noexcept { return _fd.get(); }
    [[nodiscard]] uint32_t max_pages() const noexcept { return _max_pages; }

    void send(const wire::page_request& r);

    // Reads until the socket would block, the current reply is complete, or
    // `budget` bytes were read. Returns the reply in progress once its header
    // and checksums are in, else nullptr. Throws on a closed connection or a
    // malformed reply.
    incoming_reply* pump(size_t budget);
    // Done with the current (complete) reply; the next pump starts a new one.
    void finish_reply() noexcept;

    [[nodiscard]] uint64_t bytes_received() const noexcept { return _bytes_received; }

  private:
    page_client(unique_fd fd, uint32_t max_pages);
    // One read into [dst + have, dst + want); returns false if it would block.
    bool read_some(std::byte* dst, size_t want, size_t& have, size_t& budget);

    enum class stage : uint8_t { header, checksums, data, complete };

    unique_fd _fd;
    uint32_t _max_pages;
    std::byte* _staging = nullptr; // mmap: _max_pages pages
    uint64_t* _checksums = nullptr;
    wire::header_bytes _header_buf{};
    stage _stage = stage::header;
    size_t _have = 0;
    incoming_reply _reply;
    uint64_t _bytes_received = 0;
};

} // namespace ferry
