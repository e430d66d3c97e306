// ferry-redis-client: loads Redis with known data, checks it, and drives a
// bounded client load through a migration, measuring what a client sees.
//
//   load      SET key:0..N-1 to values derived from --seed (pipelined)
//   checksum  MGET every key; prints {"keys", "missing", "wrong", "xxh64", "dbsize"}
//   run       GETs of random keys, each checked against its expected value,
//             plus an INCR of ferry:counter every --incr-every ops, for at most
//             --seconds and --max-ops. Requests go to the first address; on a
//             timeout or a broken connection the client moves to the next
//             address (the server migrated) and retries the request there.
//             Writes one line per reply to --out ("t_ns latency_ns addr_index
//             op") and prints a JSON summary: replies, wrong values, failovers,
//             acknowledged INCRs, the longest gap between replies.
#include "../workloads/reply_gaps.hpp"
#include "core/unique_fd.hpp"
#include "sys/net.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace ferry;

uint64_t now_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

// The value of key i: --value-bytes letters from a generator seeded by (seed, i).
std::string expected_value(uint64_t seed, uint64_t i, size_t bytes) {
    std::mt19937_64 g(seed * 0x9e3779b97f4a7c15ull ^ i);
    std::string v(bytes, 'a');
    for (size_t k = 0; k < bytes; k += 8) {
        uint64_t r = g();
        for (size_t b = k; b < std::min(bytes, k + 8); b++, r >>= 8)
            v[b] = char('a' + (r & 0xff) % 26);
    }
    return v;
}

std::string key_name(uint64_t i) {
    return fmt::format("key:{}", i);
}

std::string command(std::initializer_list<std::string> args) {
    std::string out = fmt::format("*{}\r\n", args.size());
    for (const auto& a : args)
        out += fmt::format("${}\r\n{}\r\n", a.size(), a);
    return out;
}

struct timeout_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// One RESP reply: a string (simple, bulk or error), an integer, a nil or an array.
struct reply {
    enum class kind { string, error, integer, nil, array } type = kind::nil;
    std::string str;
    long long integer = 0;
    std::vector<reply> elements;
};

class connection {
  public:
    connection(const net::endpoint& ep, std::chrono::milliseconds timeout)
        : _fd(net::tcp_connect(ep, timeout)) {}

    void send(const std::string& bytes, uint64_t deadline) {
        size_t done = 0;
        while (done < bytes.size()) {
            wait(POLLOUT, deadline);
            const ssize_t n = ::write(_fd.get(), bytes.data() + done, bytes.size() - done);
            if (n <= 0)
                throw std::runtime_error("write failed");
            done += size_t(n);
        }
    }

    reply read_reply(uint64_t deadline) {
        const std::string line = read_line(deadline);
        if (line.empty())
            throw std::runtime_error("empty reply line");
        reply r;
        const std::string rest = line.substr(1);
        switch (line[0]) {
        case '+':
            r.type = reply::kind::string;
            r.str = rest;
            return r;
        case '-':
            r.type = reply::kind::error;
            r.str = rest;
            return r;
        case ':':
            r.type = reply::kind::integer;
            r.integer = std::stoll(rest);
            return r;
        case '$': {
            const long long len = std::stoll(rest);
            if (len < 0)
                return r; // nil
            r.type = reply::kind::string;
            r.str = read_exact(size_t(len) + 2, deadline);
            r.str.resize(size_t(len));
            return r;
        }
        case '*': {
            const long long n = std::stoll(rest);
            r.type = n < 0 ? reply::kind::nil : reply::kind::array;
            for (long long k = 0; k < n; k++)
                r.elements.push_back(read_reply(deadline));
            return r;
        }
        default:
            throw std::runtime_error("malformed reply: " + line);
        }
    }

  private:
    void wait(short events, uint64_t deadline) {
        for (;;) {
            const uint64_t now = now_ns();
            if (now >= deadline)
                throw timeout_error("timeout");
            pollfd p{_fd.get(), events, 0};
            const int ms = int(std::max<uint64_t>(1, (deadline - now) / 1'000'000));
            const int r = ::poll(&p, 1, ms);
            if (r > 0)
                return;
            if (r < 0 && errno != EINTR)
                throw std::runtime_error("poll failed");
        }
    }

    void fill(uint64_t deadline) {
        wait(POLLIN, deadline);
        char buf[1 << 16];
        const ssize_t n = ::read(_fd.get(), buf, sizeof buf);
        if (n <= 0)
            throw std::runtime_error(n == 0 ? "connection closed" : "read failed");
        _buf.append(buf, size_t(n));
    }

    std::string read_line(uint64_t deadline) {
        for (;;) {
            const auto pos = _buf.find("\r\n", _pos);
            if (pos != std::string::npos) {
                std::string line = _buf.substr(_pos, pos - _pos);
                consume(pos + 2);
                return line;
            }
            fill(deadline);
        }
    }

    std::string read_exact(size_t n, uint64_t deadline) {
        while (_buf.size() - _pos < n)
            fill(deadline);
        std::string out = _buf.substr(_pos, n);
        consume(_pos + n);
        return out;
    }

    void consume(size_t to) {
        _pos = to;
        if (_pos > (1 << 20)) {
            _buf.erase(0, _pos);
            _pos = 0;
        }
    }

    unique_fd _fd;
    std::string _buf;
    size_t _pos = 0;
};

constexpr uint64_t ms_ns = 1'000'000;

void load(const net::endpoint& ep, uint64_t keys, size_t bytes, uint64_t seed) {
    connection c(ep, std::chrono::seconds(5));
    constexpr uint64_t batch = 256;
    for (uint64_t first = 0; first < keys; first += batch) {
        const uint64_t last = std::min(keys, first + batch);
        std::string out;
        for (uint64_t i = first; i < last; i++)
            out += command({"SET", key_name(i), expected_value(seed, i, bytes)});
        const uint64_t deadline = now_ns() + 30'000 * ms_ns;
        c.send(out, deadline);
        for (uint64_t i = first; i < last; i++) {
            const auto r = c.read_reply(deadline);
            if (r.type != reply::kind::string || r.str != "OK")
                throw std::runtime_error(fmt::format("SET {} failed: {}", key_name(i), r.str));
        }
    }
}

nlohmann::json checksum(const net::endpoint& ep, uint64_t keys, size_t bytes, uint64_t seed) {
    connection c(ep, std::chrono::seconds(5));
    constexpr uint64_t batch = 256;
    uint64_t missing = 0, wrong = 0;
    // One XXH3 over every value in key order: equal before and after a
    // migration exactly when every key is intact.
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> sum(XXH3_createState(),
                                                                 XXH3_freeState);
    XXH3_64bits_reset(sum.get());
    for (uint64_t first = 0; first < keys; first += batch) {
        const uint64_t last = std::min(keys, first + batch);
        std::string cmd = fmt::format("*{}\r\n$4\r\nMGET\r\n", last - first + 1);
        for (uint64_t i = first; i < last; i++) {
            const auto k = key_name(i);
            cmd += fmt::format("${}\r\n{}\r\n", k.size(), k);
        }
        const uint64_t deadline = now_ns() + 30'000 * ms_ns;
        c.send(cmd, deadline);
        const auto r = c.read_reply(deadline);
        if (r.type != reply::kind::array || r.elements.size() != last - first)
            throw std::runtime_error("MGET: unexpected reply");
        for (uint64_t i = first; i < last; i++) {
            const auto& e = r.elements[i - first];
            if (e.type != reply::kind::string) {
                missing++;
                continue;
            }
            if (e.str != expected_value(seed, i, bytes))
                wrong++;
            XXH3_64bits_update(sum.get(), e.str.data(), e.str.size());
        }
    }
    const uint64_t deadline = now_ns() + 5'000 * ms_ns;
    c.send(command({"DBSIZE"}), deadline);
    const auto dbsize = c.read_reply(deadline);
    return {{"keys", keys},
            {"missing", missing},
            {"wrong", wrong},
            {"xxh64", fmt::format("{:016x}", XXH3_64bits_digest(sum.get()))},
            {"dbsize", dbsize.integer}};
}

struct run_options {
    std::vector<net::endpoint> addrs;
    uint64_t keys = 0;
    size_t bytes = 0;
    uint64_t seed = 0;
    double seconds = 30;
    uint64_t max_ops = 10'000'000;
    uint64_t timeout_ms = 20;
    uint64_t incr_every = 100;
    std::string out;
    std::string stop_file; // ends the run early once it exists
};

nlohmann::json run(const run_options& o) {
    std::FILE* out = std::fopen(o.out.c_str(), "w");
    if (!out)
        throw std::runtime_error("cannot write " + o.out);
    std::mt19937_64 rng(o.seed + 1);
    std::optional<connection> conn;
    size_t at = 0; // index of the address in use
    uint64_t replies = 0, wrong = 0, failovers = 0, errors = 0, incr_acked = 0, ops = 0;
    const uint64_t start = now_ns();
    examples::reply_gaps gaps(start);
    const uint64_t end = start + uint64_t(o.seconds * 1e9);
    const uint64_t timeout = o.timeout_ms * ms_ns;
    bool stopped = false;
    while (ops < o.max_ops && now_ns() < end && !stopped) {
        if (!o.stop_file.empty() && (ops & 255) == 0 && ::access(o.stop_file.c_str(), F_OK) == 0)
            break;
        const bool incr = o.incr_every && ops % o.incr_every == o.incr_every - 1;
        const uint64_t key = rng() % o.keys;
        const std::string cmd =
            incr ? command({"INCR", "ferry:counter"}) : command({"GET", key_name(key)});
        // Until one address answers this request (bounded by the run's end).
        for (;;) {
            if (now_ns() >= end)
                break;
            // A server that stays away must not keep the run past its stop.
            if (errors && !o.stop_file.empty() && ::access(o.stop_file.c_str(), F_OK) == 0) {
                stopped = true;
                break;
            }
            const uint64_t t0 = now_ns();
            try {
                if (!conn)
                    conn.emplace(o.addrs[at], std::chrono::milliseconds(o.timeout_ms));
                conn->send(cmd, t0 + timeout);
                const auto r = conn->read_reply(t0 + timeout);
                const uint64_t t1 = now_ns();
                if (r.type == reply::kind::error)
                    throw std::runtime_error(r.str); // e.g. LOADING: try again
                if (incr) {
                    if (r.type == reply::kind::integer)
                        incr_acked++;
                } else if (r.type != reply::kind::string ||
                           r.str != expected_value(o.seed, key, o.bytes)) {
                    wrong++;
                }
                gaps.reply(t1);
                replies++;
                std::fprintf(out, "%llu %llu %zu %c\n", (unsigned long long)(t1 - start),
                             (unsigned long long)(t1 - t0), at, incr ? 'i' : 'g');
                break;
            } catch (const std::exception&) {
                // Timed out, refused or reset: the server is elsewhere now.
                errors++;
                conn.reset();
                at = (at + 1) % o.addrs.size();
                failovers++;
                if (now_ns() - t0 < ms_ns)
                    ::usleep(1000); // refused at once: do not spin
            }
        }
        ops++;
    }
    std::fclose(out);
    nlohmann::json result = {{"ops", ops},
                             {"replies", replies},
                             {"wrong_values", wrong},
                             {"errors", errors},
                             {"failovers", failovers},
                             {"incr_acked", incr_acked},
                             {"last_address", at},
                             {"seconds", double(now_ns() - start) / 1e9},
                             // The replies log's times count from here:
                             // others place their own moments on it.
                             {"start_monotonic_ns", start}};
    gaps.report(result);
    return result;
}

std::vector<net::endpoint> parse_addrs(const std::string& text) {
    std::vector<net::endpoint> out;
    size_t pos = 0;
    while (pos <= text.size()) {
        const size_t comma = text.find(',', pos);
        out.push_back(net::parse_endpoint(text.substr(pos, comma - pos)));
        if (comma == std::string::npos)
            break;
        pos = comma + 1;
    }
    return out;
}

} // namespace

int main(int argc, char** argv) {
    CLI::App app{"ferry-redis-client: known data in Redis, checked, and a client load"};
    app.require_subcommand(1);
    std::string addrs;
    uint64_t keys = 0, seed = 1;
    size_t bytes = 4000;
    auto common = [&](CLI::App* c) {
        c->add_option("--addr,--addrs", addrs, "IP:PORT[,IP:PORT...]")->required();
        c->add_option("--keys", keys, "number of keys key:0..N-1")->required();
        c->add_option("--value-bytes", bytes, "bytes per value")->capture_default_str();
        c->add_option("--seed", seed, "seed of the values")->capture_default_str();
    };
    auto* load_cmd = app.add_subcommand("load", "SET every key");
    common(load_cmd);
    auto* sum_cmd = app.add_subcommand("checksum", "MGET every key and check it");
    common(sum_cmd);
    auto* run_cmd = app.add_subcommand("run", "a bounded client load with failover");
    common(run_cmd);
    run_options ro;
    run_cmd->add_option("--seconds", ro.seconds, "at most this long")->capture_default_str();
    run_cmd->add_option("--max-ops", ro.max_ops, "at most this many requests")
        ->capture_default_str();
    run_cmd->add_option("--timeout-ms", ro.timeout_ms, "a reply later than this: fail over")
        ->capture_default_str();
    run_cmd->add_option("--incr-every", ro.incr_every, "one INCR every N requests (0: none)")
        ->capture_default_str();
    run_cmd->add_option("--out", ro.out, "per-reply log")->required();
    run_cmd->add_option("--stop-file", ro.stop_file, "end once this file exists");
    CLI11_PARSE(app, argc, argv);
    try {
        const auto eps = parse_addrs(addrs);
        if (keys == 0)
            throw std::runtime_error("--keys must be positive");
        if (*load_cmd) {
            load(eps.at(0), keys, bytes, seed);
        } else if (*sum_cmd) {
            std::printf("%s\n", checksum(eps.at(0), keys, bytes, seed).dump().c_str());
        } else {
            ro.addrs = eps;
            ro.keys = keys;
            ro.bytes = bytes;
            ro.seed = seed;
            std::printf("%s\n", run(ro).dump().c_str());
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ferry-redis-client: %s\n", e.what());
        return 1;
    }
    return 0;
}
