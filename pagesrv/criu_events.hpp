// What Ferry's CRIU plugin (criu-plugin/) reports on this host: datagrams on
// the abstract unix socket @ferry-criu-events of the daemon's network
// namespace, one per moment of a dump or restore. The daemon logs them; the
// migrator's downtime breakdown does not use them yet.
#pragma once

#include "unique_fd.hpp"

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ferry::pagesrv {

struct criu_event {
    std::string name; // freeze-start, frozen, dump-end, resumed
    pid_t pid = 0;
    uint64_t monotonic_ns = 0;
    int ret = 0;
};

// "ferry-criu 1 <migration> <event> <pid> <ns> <ret>"; nothing if malformed.
std::optional<std::pair<std::string, criu_event>> parse_criu_event(const std::string& datagram);

class criu_event_log {
  public:
    // Binds the socket; if another daemon of this namespace holds it, the
    // log stays empty (the plugin's reports go to that daemon).
    criu_event_log();
    [[nodiscard]] int fd() const noexcept { return _sock.get(); }
    // Reads every pending datagram: (migration id, event) for each valid one.
    std::vector<std::pair<std::string, criu_event>> receive();

  private:
    unique_fd _sock;
};

} // namespace ferry::pagesrv
