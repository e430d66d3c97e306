// pool-bench: what the memory pool costs a faulting workload, per RAID level
// and stripe geometry, against running pool nodes.
//
// For each configuration it stores an object of --pages pages (the source's
// push), then times single-page reads (what a fault waits for) with every
// node healthy, with one node lost, and for RAID-6 with two lost. A lost
// node is declared dead in the client's shared pool_health, which is the
// state every reader is in right after a loss is detected; detection itself
// is measured by tests/integration/pool.sh on a real SIGKILL. Also reported:
// push throughput, 64-page read throughput (the background transfer), and
// bytes stored per byte of data against replication.
//
//   pool-bench --nodes IP:PORT,... [--pages 8192] [--reads 4000] [--json FILE]
#include "core/checksum.hpp"
#include "core/clock.hpp"
#include "core/latency_recorder.hpp"
#include "core/page.hpp"
#include "pool/pool_client.hpp"
#include "pool/pool_layout.hpp"
#include "tls/credentials.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <vector>

using namespace ferry;

namespace {

struct config {
    raid::level level;
    uint32_t nodes;
    pool::stripe_kind kind;
};

struct read_figures {
    double p50_us = 0, p99_us = 0, mean_us = 0;
    uint64_t degraded_stripes = 0;
    uint64_t one_sided_reads = 0, one_sided_fallbacks = 0; // nodes with --pool-rdma
};

// One page at a time, uniformly at random, each read waited for: a fault.
read_figures time_single_reads(pool::pool_client& c, uint64_t pages, uint32_t reads,
                               std::mt19937_64& rng) {
    latency_recorder rec(reads);
    const auto before = c.stats();
    std::uniform_int_distribution<uint64_t> pick(0, pages - 1);
    double sum = 0;
    for (uint32_t i = 0; i < reads; i++) {
        const uint64_t page = pick(rng);
        const uint64_t t0 = monotonic_ns();
        int slot = -1;
        const auto st = c.read_now(page, 1, pool::read_mode::normal, slot);
        const uint64_t dt = monotonic_ns() - t0;
        if (st != pool::read_status::ok)
            throw std::runtime_error(fmt::format("page {}: {}", page, c.read_error(slot)));
        if (c.first_bad_page(slot))
            throw std::runtime_error(fmt::format("page {} fails its checksum", page));
        c.end_read(slot);
        rec.record(dt);
        sum += double(dt);
    }
    const auto& after = c.stats();
    return {double(rec.percentile(50)) / 1e3,
            double(rec.percentile(99)) / 1e3,
            sum / reads / 1e3,
            after.degraded_stripes - before.degraded_stripes,
            after.one_sided_reads - before.one_sided_reads,
            after.one_sided_fallbacks - before.one_sided_fallbacks};
}

// 64-page reads, 8 in flight: the background transfer. MiB/s.
double time_bulk_reads(pool::pool_client& c, uint64_t pages) {
    constexpr uint32_t batch = 64, depth = 8;
    std::vector<int> slots;
    uint64_t next = 0, done = 0;
    const uint64_t t0 = monotonic_ns();
    while (done < pages) {
        while (slots.size() < depth && next < pages) {
            const auto n = uint32_t(std::min<uint64_t>(batch, pages - next));
            const int s = c.begin_read(next, n);
            if (s < 0)
                break;
            slots.push_back(s);
            next += n;
        }
        c.progress(std::chrono::microseconds(500));
        for (size_t i = 0; i < slots.size();) {
            const auto st = c.poll_read(slots[i]);
            if (st == pool::read_status::pending) {
                i++;
                continue;
            }
            if (st != pool::read_status::ok)
                throw std::runtime_error(c.read_error(slots[i]));
            c.end_read(slots[i]);
            slots.erase(slots.begin() + long(i));
            done += batch;
        }
    }
    return double(pages * page_size) / (1 << 20) / (double(monotonic_ns() - t0) / 1e9);
}

nlohmann::json run_config(const std::vector<net::endpoint>& all, const tls::credentials_ptr& creds,
                          const config& cfg, uint64_t pages, uint32_t reads, uint64_t seed) {
    pool::pool_spec spec;
    spec.nodes.assign(all.begin(), all.begin() + cfg.nodes);
    spec.level = cfg.level;
    spec.kind = cfg.kind;
    spec.credentials = creds;
    const auto layout = spec.layout();
    const uint64_t object = seed * 1000003 + uint64_t(cfg.level) * 10 + uint64_t(cfg.kind);
    nlohmann::json j;
    j["level"] = raid::to_string(cfg.level);
    j["layout"] = std::string(pool::to_string(cfg.kind));
    j["nodes"] = cfg.nodes;
    j["geometry"] = layout.describe();

    // Store the object as the source's push would.
    std::mt19937_64 rng(seed);
    const uint64_t stripes = layout.stripes_for(pages);
    const uint64_t padded = stripes * layout.pages_per_stripe;
    std::vector<std::byte> data(padded * page_size);
    for (size_t i = 0; i < data.size(); i += 8) {
        const uint64_t v = rng();
        std::memcpy(data.data() + i, &v, 8);
    }
    std::vector<uint64_t> sums(padded);
    for (uint64_t p = 0; p < padded; p++)
        sums[p] = page_checksum(data.data() + p * page_size);
    {
        auto health = std::make_shared<pool::pool_health>(spec);
        pool::pool_client w(spec, object, health, {.name = "bench push"});
        const uint64_t t0 = monotonic_ns();
        const uint32_t batch = std::max(1u, 256u / layout.pages_per_stripe);
        for (uint64_t s = 0; s < stripes; s += batch) {
            const auto n = uint32_t(std::min<uint64_t>(batch, stripes - s));
            const size_t at = s * layout.pages_per_stripe;
            if (w.put_stripes(s, n, data.data() + at * page_size, sums.data() + at))
                throw std::runtime_error("a pool node failed during the push");
        }
        const double secs = double(monotonic_ns() - t0) / 1e9;
        j["push_mib_s"] = double(pages * page_size) / (1 << 20) / secs;
        j["stored_per_data_byte"] = double(w.stats().bytes_written) / double(padded * page_size);
    }

    auto read_with = [&](uint32_t lost_mask) {
        auto health = std::make_shared<pool::pool_health>(spec);
        pool::pool_client r(spec, object, health,
                            {.name = "bench read", .read_slots = 16, .max_read_pages = 64});
        for (uint32_t s = 0; s < cfg.nodes; s++)
            if (lost_mask >> s & 1)
                health->declare_dead(s, "declared lost by the benchmark");
        r.progress();
        std::mt19937_64 rr(seed + lost_mask);
        // Warm-up: connections, node caches.
        (void)time_single_reads(r, pages, std::min(reads / 10 + 1, 200u), rr);
        const auto f = time_single_reads(r, pages, reads, rr);
        nlohmann::json o{{"p50_us", f.p50_us},
                         {"p99_us", f.p99_us},
                         {"mean_us", f.mean_us},
                         {"degraded_stripes", f.degraded_stripes},
                         {"one_sided_reads", f.one_sided_reads},
                         {"one_sided_fallbacks", f.one_sided_fallbacks}};
        o["bulk_mib_s"] = time_bulk_reads(r, pages);
        return o;
    };
    j["healthy"] = read_with(0);
    const uint32_t tolerates = layout.geo.tolerates();
    if (tolerates >= 1) {
        j["one_lost"] = read_with(1u << 1);
        j["one_lost_p50_ratio"] =
            j["one_lost"]["p50_us"].get<double>() / j["healthy"]["p50_us"].get<double>();
        j["one_lost_p99_ratio"] =
            j["one_lost"]["p99_us"].get<double>() / j["healthy"]["p99_us"].get<double>();
    }
    if (tolerates >= 2) {
        j["two_lost"] = read_with((1u << 1) | (1u << 2));
        j["two_lost_p50_ratio"] =
            j["two_lost"]["p50_us"].get<double>() / j["healthy"]["p50_us"].get<double>();
    }
    {
        auto health = std::make_shared<pool::pool_health>(spec);
        pool::pool_client d(spec, object, health, {.name = "bench drop"});
        d.drop_object();
    }
    return j;
}

} // namespace

int main(int argc, char** argv) {
    CLI::App app{"pool-bench: fault latency and storage cost of the memory pool"};
    std::string nodes_text, json_path;
    uint64_t pages = 8192;
    uint32_t reads = 4000;
    uint64_t seed = 1;
    app.add_option("--nodes", nodes_text, "pool nodes, IP:PORT,... (6 for every configuration)")
        ->required();
    app.add_option("--pages", pages, "object size in pages")->capture_default_str();
    app.add_option("--reads", reads, "timed single-page reads per case")->capture_default_str();
    app.add_option("--seed", seed)->capture_default_str();
    app.add_option("--json", json_path, "also write the results here");
    std::string credentials_dir;
    app.add_option("--credentials", credentials_dir,
                   "TLS credentials (default $FERRY_CREDENTIALS, then /etc/ferry/credentials)");
    CLI11_PARSE(app, argc, argv);
    const auto creds = tls::credentials::load(tls::credentials_dir(credentials_dir));

    const auto all = pool::pool_spec::parse_nodes(nodes_text);
    using pool::stripe_kind;
    using raid::level;
    // Node counts chosen so that split pages divide a page: data members 4.
    const std::vector<config> configs = {
        {level::raid0, 4, stripe_kind::whole_pages}, {level::raid0, 4, stripe_kind::split_pages},
        {level::raid1, 2, stripe_kind::whole_pages}, {level::raid1, 3, stripe_kind::whole_pages},
        {level::raid5, 5, stripe_kind::whole_pages}, {level::raid5, 5, stripe_kind::split_pages},
        {level::raid6, 6, stripe_kind::whole_pages}, {level::raid6, 6, stripe_kind::split_pages},
    };
    nlohmann::json results = nlohmann::json::array();
    fmt::print("{:<7} {:<6} {:>5} | {:>9} {:>9} | {:>9} {:>9} {:>6} {:>6} | {:>9} {:>6} | {:>8} "
               "{:>8} {:>7}\n",
               "level", "layout", "nodes", "ok p50", "ok p99", "-1 p50", "-1 p99", "x p50", "x p99",
               "-2 p50", "x p50", "push", "bulk", "stored");
    fmt::print("{:<7} {:<6} {:>5} | {:>9} {:>9} | {:>9} {:>9} {:>6} {:>6} | {:>9} {:>6} | {:>8} "
               "{:>8} {:>7}\n",
               "", "", "", "us", "us", "us", "us", "", "", "us", "", "MiB/s", "MiB/s", "x data");
    for (const auto& cfg : configs) {
        if (cfg.nodes > all.size()) {
            fmt::print(stderr, "skipping {} over {} nodes: only {} given\n",
                       raid::to_string(cfg.level), cfg.nodes, all.size());
            continue;
        }
        const auto j = run_config(all, creds, cfg, pages, reads, seed);
        results.push_back(j);
        auto num = [&](const char* a, const char* b = nullptr) -> std::string {
            if (!j.contains(a))
                return "-";
            const auto& v = b ? j[a][b] : j[a];
            return fmt::format("{:.1f}", v.get<double>());
        };
        auto ratio = [&](const char* a) -> std::string {
            return j.contains(a) ? fmt::format("{:.2f}", j[a].get<double>()) : "-";
        };
        fmt::print("{:<7} {:<6} {:>5} | {:>9} {:>9} | {:>9} {:>9} {:>6} {:>6} | {:>9} {:>6} | "
                   "{:>8} {:>8} {:>7.2f}\n",
                   j["level"].get<std::string>(), j["layout"].get<std::string>(), cfg.nodes,
                   num("healthy", "p50_us"), num("healthy", "p99_us"), num("one_lost", "p50_us"),
                   num("one_lost", "p99_us"), ratio("one_lost_p50_ratio"),
                   ratio("one_lost_p99_ratio"), num("two_lost", "p50_us"),
                   ratio("two_lost_p50_ratio"), num("push_mib_s"), num("healthy", "bulk_mib_s"),
                   j["stored_per_data_byte"].get<double>());
        std::fflush(stdout);
    }
    if (!json_path.empty())
        std::ofstream(json_path) << results.dump(2) << "\n";
    return 0;
}
