// Checks Ferry's RDMA layer (lib/transport/rdma) between two hosts: one
// registers a buffer of a known pattern and accepts a connection; the other
// connects, reads the whole buffer with one-sided RDMA READs into its own
// registered buffer, verifies every byte, and says so with a SEND.
//   rdma-probe serve --listen IP:PORT [--mib 16] [--seed 7] [--die-after-accept]
//   rdma-probe read --to IP:PORT [--mib 16] [--seed 7] [--chunk-kib 1024]
// Exit status 0 when the data arrived intact. Every wait is bounded.
#include "core/error.hpp"
#include "core/mapping.hpp"
#include "sys/net.hpp"
#include "sys/stream.hpp"
#include "transport/rdma/rdma_connection.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <poll.h>
#include <time.h>

#include <array>
#include <cstring>
#include <optional>
#include <vector>

namespace {

using namespace ferry;
using namespace ferry::transport::rdma;

constexpr char hello_text[] = "ferry-rdma-probe";
constexpr auto bound = std::chrono::seconds(60);

void fill(std::byte* p, size_t n, uint64_t seed) {
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        std::memcpy(p + i, &x, std::min<size_t>(8, n - i));
    }
}

double now_s() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return double(t.tv_sec) + double(t.tv_nsec) / 1e9;
}

// Waits for completions (at least one), sleeping on the completion channel
// when there are none; returns how many came. A receive's message goes to
// `msg`.
size_t await_completions(rdma_connection& c, std::vector<std::byte>* msg) {
    const auto until = net::after(bound);
    std::array<ibv_wc, 16> wc;
    for (;;) {
        const size_t n = c.poll_or_arm(wc);
        if (n == 0) {
            if (!net::wait_fd(c.wait_fd(), POLLIN, until))
                throw error("no RDMA completion within 60 s");
            continue;
        }
        for (size_t i = 0; i < n; i++) {
            if (msg && wc[i].opcode == IBV_WC_RECV) {
                const auto r = c.received(wc[i]);
                msg->assign(r.begin(), r.end());
            }
        }
        return n;
    }
}

int serve(const std::string& listen, size_t mib, uint64_t seed, bool die_after_accept) {
    auto l = rdma_listener::bind(net::parse_endpoint(listen));
    const size_t len = mib << 20;
    auto buf = mapping::anonymous(len, "probe buffer");
    fill(buf.data(), len, seed);
    auto mr = register_memory(l->pd(), buf.data(), len, IBV_ACCESS_REMOTE_READ, "probe buffer");
    fmt::print("listening on {} (RDMA CM port {})\n", listen, l->port());
    std::fflush(stdout);
    auto c = l->accept(
        [&](std::span<const std::byte> hello) -> std::optional<std::vector<std::byte>> {
            if (hello.size() < sizeof hello_text ||
                std::memcmp(hello.data(), hello_text, sizeof hello_text) != 0)
                return std::nullopt;
            std::vector<std::byte> reply(20);
            const uint64_t addr = reinterpret_cast<uintptr_t>(buf.data());
            const uint32_t rkey = mr->rkey;
            const uint64_t size = len;
            std::memcpy(reply.data(), &addr, 8);
            std::memcpy(reply.data() + 8, &rkey, 4);
            std::memcpy(reply.data() + 12, &size, 8);
            return reply;
        },
        {}, bound);
    if (!c)
        throw error("a peer without the probe's hello was rejected");
    if (die_after_accept) { // a peer that dies: the reader must fail, not hang
        fmt::print("accepted {}; exiting at once\n", c->peer());
        std::fflush(stdout);
        std::_Exit(0);
    }
    std::vector<std::byte> msg;
    while (msg.empty())
        (void)await_completions(*c, &msg);
    fmt::print("peer {} says: {}\n", c->peer(),
               std::string(reinterpret_cast<const char*>(msg.data()), msg.size()));
    return std::string(reinterpret_cast<const char*>(msg.data()), msg.size()).starts_with("ok") ? 0
                                                                                                : 1;
}

int read_all(const std::string& to, size_t mib, uint64_t seed, size_t chunk_kib) {
    std::vector<std::byte> reply;
    auto c = rdma_connection::connect(net::parse_endpoint(to),
                                      std::as_bytes(std::span(hello_text, sizeof hello_text)),
                                      reply, {}, bound);
    if (reply.size() < 20)
        throw error("the server's reply lacks its buffer's address");
    uint64_t addr, size;
    uint32_t rkey;
    std::memcpy(&addr, reply.data(), 8);
    std::memcpy(&rkey, reply.data() + 8, 4);
    std::memcpy(&size, reply.data() + 12, 8);
    const size_t len = mib << 20;
    if (size != len)
        throw error(fmt::format("the server offers {} bytes, not {}", size, len));
    auto buf = mapping::anonymous(len, "landing buffer");
    auto mr = register_memory(c->pd(), buf.data(), len, IBV_ACCESS_LOCAL_WRITE, "landing buffer");
    const size_t chunk = chunk_kib << 10;
    const size_t reads = (len + chunk - 1) / chunk;
    const double t0 = now_s();
    size_t posted = 0, completed = 0;
    while (completed < reads) {
        for (; posted < reads && posted - completed < 8; posted++) {
            const size_t off = posted * chunk;
            c->post_read(buf.data() + off, mr.get(), addr + off, rkey,
                         uint32_t(std::min(chunk, len - off)), posted);
        }
        completed += await_completions(*c, nullptr);
    }
    const double secs = now_s() - t0;
    std::vector<std::byte> want(len);
    fill(want.data(), len, seed);
    const bool ok = std::memcmp(want.data(), buf.data(), len) == 0;
    const std::string verdict =
        ok ? fmt::format("ok {} MiB", mib) : fmt::format("MISMATCH in {} MiB", mib);
    c->post_send(std::as_bytes(std::span(verdict)), 1);
    (void)await_completions(*c, nullptr);
    fmt::print("read {} MiB by RDMA READ in {:.3f} s ({:.1f} MB/s): {}\n", mib, secs,
               double(len) / secs / 1e6, ok ? "verified" : "MISMATCH");
    return ok ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
    CLI::App app{"Ferry's RDMA layer between two hosts: READ a known pattern and verify it"};
    app.require_subcommand(1);
    std::string listen, to;
    bool die_after_accept = false;
    size_t mib = 16, chunk_kib = 1024;
    uint64_t seed = 7;
    auto* s = app.add_subcommand("serve", "register a patterned buffer and accept one reader");
    s->add_option("--listen", listen, "IP:PORT of this host's RDMA interface")->required();
    s->add_flag("--die-after-accept", die_after_accept,
                "exit right after accepting (the reader must see the peer die)");
    auto* r = app.add_subcommand("read", "read the server's buffer and verify it");
    r->add_option("--to", to, "the server's IP:PORT")->required();
    r->add_option("--chunk-kib", chunk_kib, "bytes per READ, KiB")->capture_default_str();
    for (auto* c : {s, r}) {
        c->add_option("--mib", mib, "buffer size")->capture_default_str();
        c->add_option("--seed", seed, "pattern seed")->capture_default_str();
    }
    CLI11_PARSE(app, argc, argv);
    try {
        return s->parsed() ? serve(listen, mib, seed, die_after_accept)
                           : read_all(to, mib, seed, chunk_kib);
    } catch (const std::exception& e) {
        fmt::print(stderr, "rdma-probe: {}\n", e.what());
        return 2;
    }
}
