// When the kernel received the bytes a read takes from a TCP socket
// (SO_TIMESTAMPING's software receive stamps), on CLOCK_MONOTONIC: a moment
// that does not move with how late the reader got to them.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace ferry::net {

// Asks the kernel to stamp what `fd` receives; false if it cannot. Where no
// socket of the host had asked before, the kernel turns its stamps on from a
// work item: segments that arrive before it ran carry none, so ask well
// before the moment to be timed.
[[nodiscard]] bool time_receipts(int fd) noexcept;

// recv(fd, buf, len, 0), retried on EINTR. When it takes bytes,
// `receipt_ns` becomes the CLOCK_MONOTONIC ns at which the latest of them
// arrived, or 0 where the kernel stamped none.
ssize_t recv_timed(int fd, void* buf, size_t len, uint64_t& receipt_ns) noexcept;

} // namespace ferry::net
