// Drives CRIU through its RPC protocol: one `criu swrk <fd>` child per
// request, packed criu_req/criu_resp messages over a SOCK_SEQPACKET pair.
#pragma once

#include "core/unique_fd.hpp"
#include "criu/rpc.pb-c.h"
#include "sys/net.hpp"
#include "sys/subprocess.hpp"

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace ferry::criu {

struct resp_deleter {
    void operator()(CriuResp* r) const noexcept { criu_resp__free_unpacked(r, nullptr); }
};
using resp_ptr = std::unique_ptr<CriuResp, resp_deleter>;

struct version {
    int major = 0, minor = 0, sublevel = 0;
    [[nodiscard]] std::string to_string() const;
    [[nodiscard]] bool at_least(int maj, int min) const noexcept {
        return major > maj || (major == maj && minor >= min);
    }
};

class service {
  public:
    // Starts `CRIU swrk` (CRIU: the binary, host_tools::criu). Throws if it
    // cannot be started. `extra_env` entries (NAME=VALUE) are added to
    // CRIU's environment; `inherited` fds stay open in CRIU under the same
    // numbers (for its inherit_fd).
    static service start(const std::string& criu, const std::vector<std::string>& extra_env = {},
                         const std::vector<int>& inherited = {});

    service(service&&) noexcept = default;
    service& operator=(service&&) = delete;
    ~service();

    void send(const CriuReq& req);
    // The next message: a NOTIFY (answer it with ack_notify) or the final
    // response. Throws when CRIU dies or the deadline passes.
    resp_ptr receive(net::deadline until);
    void ack_notify(bool success);

    [[nodiscard]] pid_t pid() const noexcept { return _proc.pid(); }
    [[nodiscard]] int fd() const noexcept { return _sock.get(); }
    // Reaps the swrk process once it has exited, waiting at most `bound`;
    // true if it is reaped (or was).
    bool reap(std::chrono::milliseconds bound) noexcept;
    // SIGKILLs the swrk process (not the tasks it works on) and reaps it,
    // waiting a bounded time.
    void kill() noexcept;

  private:
    service(child_process proc, unique_fd sock) : _proc(std::move(proc)), _sock(std::move(sock)) {}
    child_process _proc;
    unique_fd _sock;
};

// Asks CRIU (the binary `criu`) for its version over RPC; throws if it cannot run.
version query_version(const std::string& criu);
// Throws unless `criu` is CRIU >= 4.1 (Debian 12's 3.17 fails on newer
// kernels, and Ferry speaks 4.1's page-server header).
version require_supported_criu(const std::string& criu);

// A human-readable reason for a failed response, preferring the last error
// line of CRIU's log at `log_path` (may be empty).
std::string describe_failure(const CriuResp& r, const std::string& log_path);

} // namespace ferry::criu
