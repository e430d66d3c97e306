// What TLS costs the page path, per core: page replies (a header, checksums
// and 64 pages) cross a loopback TCP connection as the source's request loop
// writes them and a page channel reads them, through a plain socket and
// through TLS 1.3 (AES-GCM), in one run. Reports wall GB/s and, for each
// side, GB per CPU second of its own thread (what one core can carry).
//   tls-throughput [--mib 2048] [--rounds 3]
#include "core/clock.hpp"
#include "core/unique_fd.hpp"
#include "sys/net.hpp"
#include "sys/stream.hpp"
#include "tls/authority.hpp"
#include "tls/tls_stream.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include <algorithm>
#include <filesystem>
#include <future>
#include <memory>
#include <thread>
#include <vector>

namespace {

using namespace ferry;

constexpr size_t page = 4096, pages_per_reply = 64;
constexpr size_t reply_bytes = 40 + 8 * pages_per_reply + page * pages_per_reply;

double thread_cpu_seconds() {
    return double(thread_cpu_ns()) / 1e9;
}
double wall_seconds() {
    return double(monotonic_ns()) / 1e9;
}

struct result {
    double wall = 0, send_cpu = 0, recv_cpu = 0;
};

result run(bool tls, const tls::credentials_ptr& creds, size_t mib) {
    auto any = net::parse_endpoint("127.0.0.1:1");
    any.addr.sin_port = 0;
    unique_fd listener = net::tcp_listen(any, 1);
    const auto ep = net::local_endpoint(listener.get());
    const size_t replies = (mib << 20) / reply_bytes;

    auto receiver = std::async(std::launch::async, [&] {
        unique_fd fd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
        std::unique_ptr<net::stream> s;
        if (tls) {
            auto t = std::make_unique<tls::tls_stream>(std::move(fd), creds,
                                                       tls::tls_stream::role::server);
            tls::authenticate_client(*t, {}, net::after(std::chrono::seconds(5)));
            s = std::move(t);
        } else {
            s = std::make_unique<net::socket_stream>(std::move(fd));
        }
        std::vector<std::byte> staging(reply_bytes);
        const double c0 = thread_cpu_seconds();
        for (size_t i = 0; i < replies; i++)
            if (!net::read_full(*s, staging, net::after(std::chrono::seconds(30)), "receive"))
                throw std::runtime_error("closed early");
        return thread_cpu_seconds() - c0;
    });

    std::unique_ptr<net::stream> s;
    if (tls)
        s = tls::connect(ep, creds, std::chrono::seconds(5));
    else
        s = std::make_unique<net::socket_stream>(net::tcp_connect(ep, std::chrono::seconds(5)));
    std::vector<std::byte> header(40), sums(8 * pages_per_reply), data(page * pages_per_reply);
    for (size_t i = 0; i < data.size(); i++)
        data[i] = std::byte(i * 131);
    const double t0 = wall_seconds(), c0 = thread_cpu_seconds();
    for (size_t i = 0; i < replies; i++) {
        iovec iov[3] = {
            {header.data(), header.size()}, {sums.data(), sums.size()}, {data.data(), data.size()}};
        net::writev_full(*s, iov, 3, net::after(std::chrono::seconds(30)), "send");
    }
    result r;
    r.send_cpu = thread_cpu_seconds() - c0;
    r.recv_cpu = receiver.get();
    r.wall = wall_seconds() - t0;
    return r;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

} // namespace

int main(int argc, char** argv) {
    size_t mib = 2048;
    int rounds = 3;
    CLI::App app{"TLS's cost on the page path"};
    app.add_option("--mib", mib, "data per run")->capture_default_str();
    app.add_option("--rounds", rounds, "runs of each, interleaved")->capture_default_str();
    CLI11_PARSE(app, argc, argv);

    char tmpl[] = "/tmp/ferry-tls-bench.XXXXXX";
    if (!::mkdtemp(tmpl))
        return 1;
    const std::filesystem::path dir = tmpl;
    tls::init_authority(dir / "ca");
    tls::issue_host(dir / "ca", {"127.0.0.1", {}, {}}, dir / "host");
    const auto creds = tls::credentials::load(dir / "host");

    std::vector<double> wall[2], send[2], recv[2];
    for (int r = 0; r < rounds; r++)
        for (int tls = 0; tls < 2; tls++) {
            const auto x = run(tls == 1, creds, mib);
            const double gb = double(mib << 20) / 1e9;
            wall[tls].push_back(gb / x.wall);
            send[tls].push_back(gb / x.send_cpu);
            recv[tls].push_back(gb / x.recv_cpu);
            fmt::print(stderr,
                       "  round {} {:9s} {:6.2f} GB/s wall, sender {:6.2f} GB/cpu-s, "
                       "receiver {:6.2f} GB/cpu-s\n",
                       r + 1, tls ? "tls" : "plaintext", wall[tls].back(), send[tls].back(),
                       recv[tls].back());
        }
    std::filesystem::remove_all(dir);
    fmt::print("{} MiB of 64-page replies over loopback TCP, median of {} rounds\n", mib, rounds);
    fmt::print("  {:9s} {:>10s} {:>16s} {:>18s}\n", "", "wall GB/s", "sender GB/cpu-s",
               "receiver GB/cpu-s");
    for (int tls = 0; tls < 2; tls++)
        fmt::print("  {:9s} {:10.2f} {:16.2f} {:18.2f}\n", tls ? "tls" : "plaintext",
                   median(wall[tls]), median(send[tls]), median(recv[tls]));
    fmt::print("  tls / plaintext wall throughput: {:.3f}\n", median(wall[1]) / median(wall[0]));
    return 0;
}
