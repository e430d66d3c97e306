// What Ferry's CRIU plugin (criu-plugin/) reports on this host: datagrams on
// the abstract unix socket @ferry-criu-events of the daemon's network
// namespace, one per moment of a dump or restore, kept per migration.
#pragma once

#include "unique_fd.hpp"

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
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
    // Reads every pending datagram; returns the ones it kept, for logging.
    std::vector<std::pair<std::string, criu_event>> receive();
    // The first report of each event of `migration_id`, in arrival order.
    [[nodiscard]] std::vector<criu_event> first_events(const std::string& migration_id) const;

  private:
    static constexpr size_t kept_migrations = 256;
    unique_fd _sock;
    mutable std::mutex _mutex;
    std::map<std::string, std::vector<criu_event>> _events;
    std::deque<std::string> _order;
};

} // namespace ferry::pagesrv
