// A byte stream to a peer: a plain socket, or a TLS session over one
// (lib/tls). Control frames, page channels and pool connections speak through
// it, so none of them knows whether their bytes are encrypted.
#pragma once

#include "core/unique_fd.hpp"

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace ferry::net {

using deadline = std::chrono::steady_clock::time_point;
[[nodiscard]] inline deadline after(std::chrono::milliseconds d) {
    return std::chrono::steady_clock::now() + d;
}
inline constexpr deadline no_deadline = deadline::max();

class stream {
  public:
    virtual ~stream() = default;
    // The socket underneath, for poll(); it may be non-blocking.
    [[nodiscard]] virtual int fd() const noexcept = 0;
    // Bytes read (> 0), 0 at a clean end of stream, or -1 if it would block.
    // Throws ferry::error on any other failure.
    virtual ssize_t read_some(std::byte* dst, size_t len) = 0;
    // Bytes taken from the gathered buffers (> 0), or -1 if it would block.
    // After -1, call again with the same buffers (TLS requires it).
    virtual ssize_t write_some(const iovec* iov, int iovcnt) = 0;
    // Data already received and decoded above the socket, which poll()
    // cannot see: read it before waiting.
    [[nodiscard]] virtual bool buffered() const noexcept { return false; }
    // read_some never blocks (it says -1 instead): no poll() is needed
    // before trying it.
    [[nodiscard]] virtual bool never_blocks() const noexcept { return false; }
    // The authenticated name of the peer (its certificate's common name);
    // empty for a plain socket.
    [[nodiscard]] virtual const std::string& peer_identity() const noexcept;
    [[nodiscard]] virtual bool encrypted() const noexcept { return false; }
    // Asks the kernel to stamp each receipt (receipt_time.hpp); false where
    // this stream cannot. Then last_receipt_ns() is the CLOCK_MONOTONIC ns
    // at which the bytes its latest read from the socket took arrived (0:
    // no read yet, or no stamp on them).
    virtual bool time_receipts() noexcept { return false; }
    [[nodiscard]] virtual uint64_t last_receipt_ns() const noexcept { return 0; }
    // Ends both directions: wakes any thread blocked on this stream.
    void shutdown() noexcept { (void)::shutdown(fd(), SHUT_RDWR); }
};

// A plain socket (or pipe), owned or only viewed.
class socket_stream final : public stream {
  public:
    explicit socket_stream(unique_fd fd) noexcept : _fd(fd.get()), _owned(std::move(fd)) {}
    // A stream over an fd someone else owns.
    [[nodiscard]] static socket_stream view(int fd) noexcept { return socket_stream(fd); }

    [[nodiscard]] int fd() const noexcept override { return _fd; }
    ssize_t read_some(std::byte* dst, size_t len) override;
    ssize_t write_some(const iovec* iov, int iovcnt) override;
    // Hands the socket on (a plain stream has no state above it).
    [[nodiscard]] unique_fd release() noexcept { return std::move(_owned); }

  private:
    explicit socket_stream(int fd) noexcept : _fd(fd) {}
    int _fd;
    unique_fd _owned;
};

// Waits until fd is readable (or writable); false when the deadline passed.
bool wait_fd(int fd, short events, deadline until);

// Whole-buffer I/O. Throws ferry::error on failure or when the deadline
// passes; read_full returns false on a clean end of stream before the first
// byte.
bool read_full(stream& s, std::span<std::byte> buf, deadline until, const char* what);
void write_full(stream& s, std::span<const std::byte> buf, deadline until, const char* what);
void writev_full(stream& s, iovec* iov, int iovcnt, deadline until, const char* what);

} // namespace ferry::net
