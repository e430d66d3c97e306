// The reports of a migration's moments that Ferry's CRIU plugin
// (criu-plugin/, in C, which keeps its own copy of this format) and runc shim
// send to the host's daemon: one datagram each,
//   "ferry-criu 1 <migration> <event> <pid> <CLOCK_MONOTONIC ns> <ret>",
// on the abstract unix socket @ferry-criu-events of the sender's network
// namespace. Sending never blocks and never fails the sender.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace ferry::criu_events {

struct event {
    std::string name; // engine-pause, freeze-start, frozen, dump-end, resumed
    pid_t pid = 0;
    uint64_t monotonic_ns = 0;
    int ret = 0;
};

// The socket's address; `len` is the length to bind or send to.
sockaddr_un socket_address(socklen_t& len);

// (migration id, event), or nothing if the datagram is malformed.
std::optional<std::pair<std::string, event>> parse(const std::string& datagram);

// Reports that `name` happened now in migration `migration_id`.
void report(const std::string& migration_id, const char* name, pid_t pid) noexcept;

} // namespace ferry::criu_events
