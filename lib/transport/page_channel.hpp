// The transport interface: how the destination gets pages from a peer.
//
// A page channel is one queue pair to the peer. Requests go in; replies come
// back in the order the requests were sent, each as checksums plus page data
// that the caller may hand straight to UFFDIO_COPY. Backends:
//   tcp  request/response over a socket (tcp_channel.hpp)
//   shm  one-sided reads of the peer's registered region in shared memory,
//        plus a lock-free request ring for what needs the peer's CPU
//        (shm_channel.hpp)
// Backends are listed in backends.cpp (transport/backend.hpp); nothing above
// this interface knows which one it talks to, only what it can do.
#pragma once

#include "sys/net.hpp"
#include "sys/stream.hpp"
#include "tls/credentials.hpp"
#include "transport/fabric.hpp"
#include "wire/control.pb-c.h"
#include "wire/page_wire.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ferry {

struct incoming_reply {
    wire::page_reply header;
    const uint64_t* checksums = nullptr; // header.nr_pages entries
    const std::byte* pages = nullptr;    // header.nr_pages pages, page-aligned
    uint32_t pages_ready = 0;            // pages that have fully arrived
    [[nodiscard]] bool complete() const noexcept { return pages_ready == header.nr_pages; }
};

// What a backend can do, which the fault loop plans around.
struct channel_capabilities {
    // Replies arrive without the peer's CPU (reads of its registered
    // memory): progress is seen by polling pump(), and wait_fd() is -1.
    bool one_sided = false;
    // A reply's pages point into memory the backend keeps (the peer's
    // registered region), not into a staging copy.
    bool zero_copy_replies = false;
};

class page_channel {
  public:
    virtual ~page_channel() = default;
    [[nodiscard]] virtual channel_capabilities capabilities() const noexcept = 0;

    // Queues a request. Get and refetch ask for pages; done tells the peer
    // that every page is installed.
    virtual void send(const wire::page_request& r) = 0;

    // Makes progress on the oldest unanswered request, doing at most about
    // `budget` bytes of work. Returns its reply once the header and
    // checksums are in (pages_ready says how much data), else nullptr.
    // Throws on a malformed reply or a lost peer.
    virtual incoming_reply* pump(size_t budget) = 0;
    // Done with the current, complete reply.
    virtual void finish_reply() noexcept = 0;

    // A file descriptor that becomes readable when pump() can make progress;
    // -1 for one-sided backends, whose progress is seen by polling.
    [[nodiscard]] virtual int wait_fd() const noexcept = 0;
    // Reply bytes already received above wait_fd() (decrypted TLS records):
    // pump() before waiting on the fd.
    [[nodiscard]] virtual bool buffered() const noexcept { return false; }
    [[nodiscard]] virtual uint32_t max_pages() const noexcept = 0;
    [[nodiscard]] virtual uint64_t bytes_received() const noexcept = 0;
};

// A channel asked of the source daemon at `source` for a migration, over the
// fabric `spec`: connected over TLS, authenticated with `creds` and named to
// the source within `timeout`, its acceptance not read yet. The acceptance
// comes once the migration registers there, after the freeze when the
// channel is asked for ahead of it: asking for every channel first keeps
// their TLS handshakes (a few ms of CPU each) out of the downtime.
class page_channel_request {
  public:
    page_channel_request(const fabric_spec& spec, const net::endpoint& source,
                         const tls::credentials_ptr& creds, const std::string& migration_id,
                         FerryControl__ChannelKind kind, uint32_t max_pages,
                         std::chrono::milliseconds timeout);
    page_channel_request(page_channel_request&&) noexcept;
    ~page_channel_request();
    // Waits up to `acceptance_wait` for the source's acceptance; the channel.
    // Once only.
    [[nodiscard]] std::unique_ptr<page_channel> accepted(std::chrono::milliseconds acceptance_wait);

  private:
    fabric_spec _spec;
    net::endpoint _source;
    FerryControl__ChannelKind _kind;
    uint32_t _max_pages;
    std::chrono::milliseconds _timeout;
    std::unique_ptr<net::stream> _conn;
};

// page_channel_request(...).accepted(acceptance_wait).
std::unique_ptr<page_channel>
open_page_channel(const fabric_spec& spec, const net::endpoint& source,
                  const tls::credentials_ptr& creds, const std::string& migration_id,
                  FerryControl__ChannelKind kind, uint32_t max_pages,
                  std::chrono::milliseconds timeout, std::chrono::milliseconds acceptance_wait);

} // namespace ferry
