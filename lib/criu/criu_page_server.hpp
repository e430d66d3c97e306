// Ending a `criu dump --lazy-pages` from outside. CRIU's own lazy page server
// cannot serve pages on this kernel (splice fails), so Ferry only ever sends
// it one command, in CRIU 4.1's 24-byte native header
// {u32 cmd; u32 nr_pages; u64 vaddr; u64 dst_id}:
//   finish: PS_IOV_CLOSE. CRIU answers int32 0, then kills the dumped tasks.
//   abort:  a command CRIU does not know. Its page server fails, the lazy
//           dump fails, and CRIU resumes the tasks (cr_dump_finish).
// A plain disconnect is NOT an abort: CRIU treats EOF as success.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

namespace ferry::criu {

inline constexpr uint32_t ps_iov_close = 0x1023;
inline constexpr uint32_t ps_iov_unknown = 0; // no command has value 0

// Sends CLOSE to 127.0.0.1:port and waits for CRIU's acknowledgement.
void finish_lazy_dump(uint16_t port, std::chrono::milliseconds timeout);
// Makes the lazy dump fail so CRIU resumes the frozen tasks. Retries the
// connection until `timeout`, because CRIU may still be setting up, but
// only while `criu_alive()` says there is a CRIU to wait for.
void abort_lazy_dump(
    uint16_t port, std::chrono::milliseconds timeout,
    const std::function<bool()>& criu_alive = [] { return true; });

} // namespace ferry::criu
