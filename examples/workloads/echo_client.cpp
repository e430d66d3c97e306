// ferry-echo-client: one TCP connection to a line echo server, held through a
// migration. Every --interval-ms it sends a numbered line and waits (up to
// --timeout-ms) for the same line back. A live migration must leave that one
// connection open: a reset, a close or a timeout is counted and, unless
// --no-reconnect, the client connects again (a reconnect). Prints a JSON
// summary: requests, replies, wrong replies, reconnects, the longest gap
// between replies and when it started.
#include "core/unique_fd.hpp"
#include "reply_gaps.hpp"
#include "sys/net.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>

namespace {

using namespace ferry;

uint64_t now_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

constexpr uint64_t ms_ns = 1'000'000;

struct options {
    std::string addr;
    double seconds = 30;
    uint64_t max_requests = 1'000'000;
    uint64_t interval_ms = 5;
    uint64_t timeout_ms = 10'000;
    bool reconnect = true;
    std::string stop_file;
    std::string out;
};

// Waits for EVENTS on FD until DEADLINE (monotonic ns); false on timeout.
bool wait_for(int fd, short events, uint64_t deadline) {
    for (;;) {
        const uint64_t now = now_ns();
        if (now >= deadline)
            return false;
        pollfd p{fd, events, 0};
        const int r = ::poll(&p, 1, int(std::max<uint64_t>(1, (deadline - now) / ms_ns)));
        if (r > 0)
            return true;
        if (r < 0 && errno != EINTR)
            throw std::runtime_error("poll failed");
    }
}

// One request on FD: LINE out, the same line back. Throws on any failure.
void exchange(int fd, const std::string& line, std::string& pending, uint64_t deadline) {
    size_t done = 0;
    while (done < line.size()) {
        if (!wait_for(fd, POLLOUT, deadline))
            throw std::runtime_error("send timed out");
        const ssize_t n = ::write(fd, line.data() + done, line.size() - done);
        if (n <= 0)
            throw std::runtime_error(fmt::format("send failed: {}", n < 0 ? strerror(errno) : "0"));
        done += size_t(n);
    }
    for (;;) {
        const size_t nl = pending.find('\n');
        if (nl != std::string::npos) {
            const std::string got = pending.substr(0, nl + 1);
            pending.erase(0, nl + 1);
            if (got != line)
                throw std::logic_error(fmt::format("wrong reply {:?} to {:?}", got, line));
            return;
        }
        if (!wait_for(fd, POLLIN, deadline))
            throw std::runtime_error("reply timed out");
        char buf[4096];
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n <= 0)
            throw std::runtime_error(n == 0 ? "connection closed by the server"
                                            : fmt::format("read failed: {}", strerror(errno)));
        pending.append(buf, size_t(n));
    }
}

nlohmann::json run(const options& o) {
    const auto ep = net::parse_endpoint(o.addr);
    std::FILE* out = o.out.empty() ? nullptr : std::fopen(o.out.c_str(), "w");
    if (!o.out.empty() && !out)
        throw std::runtime_error("cannot write " + o.out);
    std::optional<unique_fd> conn;
    std::string pending;
    uint64_t requests = 0, replies = 0, wrong = 0, reconnects = 0, connects = 0;
    std::string first_error;
    const uint64_t start = now_ns();
    examples::reply_gaps gaps(start);
    const uint64_t end = start + uint64_t(o.seconds * 1e9);
    uint64_t next_send = start;
    bool broken = false;
    while (requests < o.max_requests && now_ns() < end && !broken) {
        if (!o.stop_file.empty() && ::access(o.stop_file.c_str(), F_OK) == 0)
            break;
        const uint64_t now = now_ns();
        if (now < next_send)
            ::usleep(useconds_t((next_send - now) / 1000));
        next_send = std::max(next_send + o.interval_ms * ms_ns, now_ns());
        const std::string line = fmt::format("ferry-echo {} {}\n", requests, now_ns());
        requests++;
        const uint64_t t0 = now_ns();
        try {
            if (!conn) {
                conn.emplace(net::tcp_connect(ep, std::chrono::milliseconds(o.timeout_ms)));
                pending.clear();
                if (connects++ > 0)
                    reconnects++;
            }
            exchange(conn->get(), line, pending, t0 + o.timeout_ms * ms_ns);
        } catch (const std::logic_error& e) {
            wrong++;
            if (first_error.empty())
                first_error = e.what();
            conn.reset(); // the stream is out of step: start over
            continue;
        } catch (const std::exception& e) {
            if (first_error.empty())
                first_error = fmt::format("request {}: {}", requests - 1, e.what());
            conn.reset();
            broken = !o.reconnect;
            continue;
        }
        const uint64_t t1 = now_ns();
        gaps.reply(t1);
        replies++;
        if (out)
            std::fprintf(out, "%llu %llu\n", (unsigned long long)(t1 - start),
                         (unsigned long long)(t1 - t0));
    }
    if (out)
        std::fclose(out);
    nlohmann::json out_json = {{"requests", requests},
                               {"replies", replies},
                               {"wrong_replies", wrong},
                               {"reconnects", reconnects},
                               {"connection_broke", broken},
                               {"first_error", first_error},
                               {"seconds", double(now_ns() - start) / 1e9}};
    gaps.report(out_json);
    return out_json;
}

} // namespace

int main(int argc, char** argv) {
    CLI::App app{"ferry-echo-client: one connection to a line echo server, held and checked"};
    options o;
    bool no_reconnect = false;
    app.add_option("--addr", o.addr, "the server's IP:PORT")->required();
    app.add_option("--seconds", o.seconds, "at most this long")->capture_default_str();
    app.add_option("--max-requests", o.max_requests, "at most this many requests")
        ->capture_default_str();
    app.add_option("--interval-ms", o.interval_ms, "one request every N ms")->capture_default_str();
    app.add_option("--timeout-ms", o.timeout_ms, "a reply later than this breaks the connection")
        ->capture_default_str();
    app.add_flag("--no-reconnect", no_reconnect, "end at the first broken connection");
    app.add_option("--stop-file", o.stop_file, "end once this file exists");
    app.add_option("--out", o.out, "per-reply log: t_ns latency_ns");
    CLI11_PARSE(app, argc, argv);
    o.reconnect = !no_reconnect;
    try {
        std::puts(run(o).dump().c_str());
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ferry-echo-client: %s\n", e.what());
        return 2;
    }
}
