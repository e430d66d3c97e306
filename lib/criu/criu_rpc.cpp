#include "criu/criu_rpc.hpp"

#include "core/error.hpp"
#include "sys/subprocess.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <vector>

namespace ferry::criu {

std::string version::to_string() const {
    return fmt::format("{}.{}.{}", major, minor, sublevel);
}

service service::start(const std::string& criu, const std::vector<std::string>& extra_env,
                       const std::vector<int>& inherited) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv))
        throw sys_error("socketpair");
    unique_fd ours(sv[0]), theirs(sv[1]);
    child_process::options o;
    o.extra_env = extra_env;
    o.keep_fds = {theirs.get()}; // only these stay open across exec
    o.keep_fds.insert(o.keep_fds.end(), inherited.begin(), inherited.end());
    o.own_process_group = true; // a Ctrl-C for Ferry must not kill CRIU mid-parasite
    auto proc = child_process::spawn({criu, "swrk", std::to_string(theirs.get())}, o);
    return service(std::move(proc), std::move(ours));
}

// Closing the socket ends a healthy swrk process (or fails its request, so
// that CRIU resumes the tasks); one that is stuck is killed rather than
// waited for.
service::~service() {
    _sock.reset();
    if (_proc.running() && !reap(std::chrono::seconds(10)))
        kill();
}

void service::send(const CriuReq& req) {
    std::vector<uint8_t> buf(criu_req__get_packed_size(&req));
    criu_req__pack(&req, buf.data());
    if (::send(_sock.get(), buf.data(), buf.size(), MSG_NOSIGNAL) != ssize_t(buf.size()))
        throw sys_error("send to criu swrk");
}

resp_ptr service::receive(net::deadline until) {
    if (!net::wait_readable(_sock.get(), until))
        throw error("criu did not answer in time");
    // Learn the datagram's size first, then read it whole.
    ssize_t len = ::recv(_sock.get(), nullptr, 0, MSG_PEEK | MSG_TRUNC);
    if (len < 0)
        throw sys_error("recv from criu swrk");
    if (len == 0) {
        // Say how it ended: a crash may have come before its log had a line.
        const pid_t gone = pid();
        std::optional<int> status;
        try {
            status = _proc.wait_for(std::chrono::seconds(1));
        } catch (const std::exception&) {
        }
        throw error(fmt::format("criu (pid {}) exited without an answer ({}); see its log", gone,
                                status ? describe_wait_status(*status) : "still ending"));
    }
    std::vector<uint8_t> buf(static_cast<size_t>(len));
    if (::recv(_sock.get(), buf.data(), buf.size(), 0) != len)
        throw sys_error("recv from criu swrk");
    CriuResp* r = criu_resp__unpack(nullptr, buf.size(), buf.data());
    if (!r)
        throw error("criu sent an undecodable response");
    return resp_ptr(r);
}

void service::ack_notify(bool success) {
    CriuReq req = CRIU_REQ__INIT;
    req.type = CRIU_REQ_TYPE__NOTIFY;
    req.has_notify_success = true;
    req.notify_success = success;
    send(req);
}

bool service::reap(std::chrono::milliseconds bound) noexcept {
    if (!_proc.running())
        return true;
    try {
        return _proc.wait_for(bound).has_value();
    } catch (const std::exception&) {
        return false;
    }
}

void service::kill() noexcept {
    _proc.signal(SIGKILL);
    if (!reap(std::chrono::seconds(5)))
        _proc.detach(); // unkillable (in the kernel): left to init once Ferry exits
}

version query_version(const std::string& criu) {
    service s = service::start(criu);
    CriuReq req = CRIU_REQ__INIT;
    req.type = CRIU_REQ_TYPE__VERSION;
    s.send(req);
    resp_ptr r = s.receive(net::after(std::chrono::seconds(30)));
    if (!r->success || !r->version)
        throw error("criu did not report its version");
    version v{r->version->major_number, r->version->minor_number,
              r->version->has_sublevel ? r->version->sublevel : 0};
    return v;
}

version require_supported_criu(const std::string& criu) {
    version v;
    try {
        v = query_version(criu);
    } catch (const std::exception& e) {
        throw error(fmt::format("cannot run {} ({}); install CRIU >= 4.1 with examples/setup.sh",
                                criu, e.what()));
    }
    if (!v.at_least(4, 1))
        throw error(fmt::format("{} is CRIU {}, Ferry needs >= 4.1 (3.x fails on this kernel); "
                                "run examples/setup.sh",
                                criu, v.to_string()));
    return v;
}

namespace {

// CRIU's last specific "Error (file:line): ..." log line usually names the
// cause. The response's cr_errmsg is only the first error, often harmless
// (the RLIMIT_NOFILE warning on this kernel), and the very last line is the
// generic "Dumping/Restoring FAILED."
std::string last_error_line(const std::string& log_path) {
    std::ifstream in(log_path);
    std::string line, last;
    while (std::getline(in, line)) {
        auto pos = line.find("Error (");
        if (pos == std::string::npos || line.find("FAILED.") != std::string::npos ||
            line.find("RLIMIT_NOFILE") != std::string::npos)
            continue;
        last = line.substr(pos);
    }
    return last;
}

} // namespace

std::string describe_failure(const CriuResp& r, const std::string& log_path) {
    std::string s = "criu failed";
    const std::string from_log = log_path.empty() ? "" : last_error_line(log_path);
    if (!from_log.empty())
        s += ": " + from_log;
    else if (r.cr_errmsg && *r.cr_errmsg)
        s += fmt::format(": {}", r.cr_errmsg);
    else if (r.has_cr_errno && r.cr_errno)
        s += fmt::format(": {}", std::strerror(r.cr_errno));
    if (!log_path.empty())
        s += fmt::format(" (log: {})", log_path);
    return s;
}

} // namespace ferry::criu
