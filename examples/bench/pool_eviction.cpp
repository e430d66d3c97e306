// pool-eviction-bench: the pool node's eviction policies compared on one
// store (pagesrv/pool_store.hpp: memory arena, disk tier, policy), with the
// arena at a fraction of the working set, under four access patterns:
//
//   sequential  repeated scans over the working set in order
//   uniform     chunks picked uniformly at random
//   zipf        Zipf-skewed (theta 0.99, Gray et al.'s generator as in
//               YCSB), hot chunks scattered over the key space
//   sort        an external merge sort of the working set's records: runs
//               half the arena long are read, sorted and written back, then
//               merged 2-way, pass after pass, reading runs in parallel
//
// Per cell: the arena hit rate of reads, run time, p50/p99 read latency;
// each policy's ratios against LRU in the same run. `--threads 2` adds a
// run of uniform and zipf reads from two threads (the store has one lock).
//
//   pool-eviction-bench [--working-set 32M] [--ops 100000] [--capacities 25,50]
//                       [--policies fifo,lru,lfu,clock,random] [--json FILE]
#include "core/clock.hpp"
#include "core/latency_recorder.hpp"
#include "pool_store.hpp"
#include "sys/mountinfo.hpp" // comma_list

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

using namespace ferry;
using pagesrv::pool_store;

namespace {

constexpr uint32_t chunk = 4096;
constexpr uint64_t object = 1;

// Gray et al., "Quickly generating billion-record synthetic databases" (as YCSB).
class zipf_generator {
  public:
    zipf_generator(uint64_t n, double theta) : _n(n), _theta(theta) {
        for (uint64_t i = 1; i <= n; i++)
            _zetan += 1.0 / std::pow(double(i), theta);
        const double zeta2 = 1.0 + 1.0 / std::pow(2.0, theta);
        _alpha = 1.0 / (1.0 - theta);
        _eta = (1.0 - std::pow(2.0 / double(n), 1.0 - theta)) / (1.0 - zeta2 / _zetan);
    }
    uint64_t operator()(std::mt19937_64& rng) {
        const double u = std::uniform_real_distribution<double>(0, 1)(rng);
        const double uz = u * _zetan;
        if (uz < 1.0)
            return 0;
        if (uz < 1.0 + std::pow(0.5, _theta))
            return 1;
        return std::min<uint64_t>(_n - 1,
                                  uint64_t(double(_n) * std::pow(_eta * u - _eta + 1.0, _alpha)));
    }

  private:
    uint64_t _n;
    double _theta, _zetan = 0, _alpha, _eta;
};

// Scatters rank r over [0, n): hot chunks are not the first ones stored.
uint64_t scatter(uint64_t r, uint64_t n) {
    return (r * 0x9e3779b97f4a7c15ull >> 11) % n;
}

struct cell {
    double seconds = 0;
    uint64_t reads = 0, memory_hits = 0, writes = 0;
    uint64_t p50_ns = 0, p99_ns = 0;
    uint64_t evictions = 0, promotions = 0;
    [[nodiscard]] double hit_rate() const { return reads ? double(memory_hits) / reads : 0; }
};

class harness {
  public:
    harness(const std::string& policy, uint64_t capacity, const std::filesystem::path& dir)
        : _store(pagesrv::pool_store_config{.capacity_bytes = capacity,
                                            .chunk_size = chunk,
                                            .tier_dir = dir,
                                            .eviction = policy}),
          _lat(1u << 20) {}

    void put(uint64_t id, const std::byte* data) {
        if (_store.put(object, id, {}, {data, chunk}) != pool::status::ok)
            throw std::runtime_error(fmt::format("put {} failed", id));
        _writes++;
    }
    void get(uint64_t id, std::byte* out) {
        uint32_t ml = 0, dl = 0;
        pool::tier t{};
        std::byte meta[pool::max_meta_len];
        const uint64_t t0 = monotonic_ns();
        const auto st = _store.get(object, id, meta, ml, out, dl, t);
        _lat.record(monotonic_ns() - t0);
        if (st != pool::status::ok)
            throw std::runtime_error(fmt::format("get {}: status {}", id, int(st)));
    }
    // Counters since the last reset_counters().
    void reset_counters() {
        _base = _store.counters();
        _writes = 0;
        _lat = latency_recorder(1u << 20);
    }
    [[nodiscard]] cell result(double seconds) const {
        const auto c = _store.counters();
        cell r;
        r.seconds = seconds;
        r.memory_hits = c.memory_hits - _base.memory_hits;
        r.reads = r.memory_hits + (c.memory_misses - _base.memory_misses);
        r.writes = _writes;
        r.evictions = c.evictions - _base.evictions;
        r.promotions = c.promotions - _base.promotions;
        r.p50_ns = _lat.percentile(50);
        r.p99_ns = _lat.percentile(99);
        return r;
    }
    pool_store& store() { return _store; }

  private:
    pool_store _store;
    pagesrv::pool_counters _base{};
    uint64_t _writes = 0;
    latency_recorder _lat;
};

void fill_record(std::byte* p, uint64_t key) {
    std::memcpy(p, &key, 8);
    std::memset(p + 8, int(key & 0xff), chunk - 8);
}
uint64_t key_of(const std::byte* p) {
    uint64_t k;
    std::memcpy(&k, p, 8);
    return k;
}

// External merge sort of chunks [0, n) (one record each, keyed by its first
// 8 bytes): runs written to ids [n, 2n), merge passes ping-pong between the
// two halves. Verifies the output is sorted.
void external_sort(harness& h, uint64_t n, uint64_t run_len) {
    std::vector<std::byte> buf(run_len * chunk);
    std::vector<uint64_t> keys(run_len);
    uint64_t src = 0, dst = n;
    for (uint64_t first = 0; first < n; first += run_len) {
        const uint64_t len = std::min(run_len, n - first);
        for (uint64_t i = 0; i < len; i++) {
            h.get(src + first + i, buf.data() + i * chunk);
            keys[i] = key_of(buf.data() + i * chunk);
        }
        std::sort(keys.begin(), keys.begin() + long(len));
        std::vector<std::byte> rec(chunk);
        for (uint64_t i = 0; i < len; i++) {
            fill_record(rec.data(), keys[i]);
            h.put(dst + first + i, rec.data());
        }
    }
    std::swap(src, dst);
    std::vector<std::byte> a(chunk), b(chunk);
    for (uint64_t width = run_len; width < n; width *= 2) {
        for (uint64_t lo = 0; lo < n; lo += 2 * width) {
            const uint64_t mid = std::min(lo + width, n), hi = std::min(lo + 2 * width, n);
            uint64_t i = lo, j = mid, out = lo;
            bool have_a = false, have_b = false;
            while (i < mid || j < hi) {
                if (i < mid && !have_a) {
                    h.get(src + i, a.data());
                    have_a = true;
                }
                if (j < hi && !have_b) {
                    h.get(src + j, b.data());
                    have_b = true;
                }
                const bool take_a = have_a && (!have_b || key_of(a.data()) <= key_of(b.data()));
                h.put(dst + out++, take_a ? a.data() : b.data());
                if (take_a) {
                    have_a = false;
                    i++;
                } else {
                    have_b = false;
                    j++;
                }
            }
        }
        std::swap(src, dst);
    }
    std::vector<std::byte> rec(chunk);
    uint64_t prev = 0;
    for (uint64_t i = 0; i < n; i += std::max<uint64_t>(1, n / 512)) {
        h.get(src + i, rec.data());
        if (key_of(rec.data()) < prev)
            throw std::runtime_error("external sort produced unsorted output");
        prev = key_of(rec.data());
    }
}

cell run_cell(const std::string& policy, const std::string& pattern, uint64_t ws_chunks,
              uint64_t capacity, uint64_t ops, uint32_t threads, uint64_t seed,
              const std::filesystem::path& dir) {
    harness h(policy, capacity, dir);
    std::mt19937_64 rng(seed);
    std::vector<std::byte> rec(chunk);
    // Load: every chunk stored once (in key order for the scans, random keys
    // for the sort).
    for (uint64_t i = 0; i < ws_chunks; i++) {
        fill_record(rec.data(), pattern == "sort" ? rng() : i);
        h.put(i, rec.data());
    }
    h.reset_counters();
    const uint64_t t0 = monotonic_ns();
    if (pattern == "sort") {
        external_sort(h, ws_chunks, std::max<uint64_t>(1, capacity / chunk / 2));
    } else {
        auto worker = [&](uint32_t t, uint64_t n) {
            std::mt19937_64 r(seed * 31 + t);
            zipf_generator zipf(pattern == "zipf" ? ws_chunks : 2, 0.99);
            std::uniform_int_distribution<uint64_t> uni(0, ws_chunks - 1);
            std::vector<std::byte> out(chunk);
            for (uint64_t k = 0; k < n; k++) {
                uint64_t id;
                if (pattern == "sequential")
                    id = (k + t * ws_chunks / 2) % ws_chunks;
                else if (pattern == "uniform")
                    id = uni(r);
                else
                    id = scatter(zipf(r), ws_chunks);
                h.get(id, out.data());
            }
        };
        if (threads <= 1) {
            worker(0, ops);
        } else {
            std::vector<std::thread> ts;
            for (uint32_t t = 0; t < threads; t++)
                ts.emplace_back(worker, t, ops / threads);
            for (auto& t : ts)
                t.join();
        }
    }
    return h.result(double(monotonic_ns() - t0) / 1e9);
}

} // namespace

int main(int argc, char** argv) {
    CLI::App app{"pool-eviction-bench: eviction policies of the pool node compared"};
    std::string ws_text = "32M", policies_text = "fifo,lru,lfu,clock,random";
    std::string patterns_text = "sequential,uniform,zipf,sort", caps_text = "25,50";
    std::string json_path, tier_dir;
    uint64_t ops = 100000, seed = 1;
    uint32_t threads = 2;
    app.add_option("--working-set", ws_text, "bytes of 4 KiB chunks")->capture_default_str();
    app.add_option("--ops", ops, "reads per cell (sequential, uniform, zipf)")
        ->capture_default_str();
    app.add_option("--policies", policies_text)->capture_default_str();
    app.add_option("--patterns", patterns_text)->capture_default_str();
    app.add_option("--capacities", caps_text, "arena size, % of the working set")
        ->capture_default_str();
    app.add_option("--threads", threads, "threads of the concurrent run (1: none)")
        ->capture_default_str();
    app.add_option("--tier-dir", tier_dir, "disk tier directory (default: a fresh one in /tmp)");
    app.add_option("--seed", seed)->capture_default_str();
    app.add_option("--json", json_path);
    CLI11_PARSE(app, argc, argv);

    const uint64_t ws_chunks = pagesrv::parse_size(ws_text) / chunk;
    std::filesystem::path dir =
        tier_dir.empty()
            ? std::filesystem::path(fmt::format("/tmp/ferry-eviction-bench-{}", ::getpid()))
            : std::filesystem::path(tier_dir);
    std::filesystem::create_directories(dir);
    const auto policies = comma_list(policies_text);
    nlohmann::json all = nlohmann::json::array();
    fmt::print("working set {} chunks of 4 KiB; disk tier in {}\n", ws_chunks, dir.string());
    fmt::print("{:<10} {:>4} {:<7} | {:>7} {:>8} {:>8} {:>8} | {:>7} {:>7} | {:>9}\n", "pattern",
               "cap", "policy", "hit %", "run s", "p50 us", "p99 us", "hit/LRU", "time/LRU",
               "evictions");
    auto report = [&](const std::string& pattern, uint64_t pct, uint32_t nthreads) {
        const uint64_t capacity = ws_chunks * pct / 100 * chunk;
        std::vector<cell> cells;
        for (const auto& p : policies)
            cells.push_back(run_cell(p, pattern, ws_chunks, capacity, ops, nthreads, seed, dir));
        const auto lru = std::find(policies.begin(), policies.end(), "lru");
        const cell* base = lru == policies.end() ? nullptr : &cells[size_t(lru - policies.begin())];
        const std::string label = nthreads > 1 ? fmt::format("{}/{}t", pattern, nthreads) : pattern;
        for (size_t i = 0; i < policies.size(); i++) {
            const auto& c = cells[i];
            const double hit_ratio =
                base && base->hit_rate() > 0 ? c.hit_rate() / base->hit_rate() : 0;
            const double time_ratio = base ? c.seconds / base->seconds : 0;
            fmt::print(
                "{:<10} {:>3}% {:<7} | {:>7.1f} {:>8.2f} {:>8.1f} {:>8.1f} | {:>7.2f} {:>7.2f} "
                "| {:>9}\n",
                label, pct, policies[i], 100 * c.hit_rate(), c.seconds, c.p50_ns / 1e3,
                c.p99_ns / 1e3, hit_ratio, time_ratio, c.evictions);
            all.push_back({{"pattern", pattern},
                           {"threads", nthreads},
                           {"capacity_pct", pct},
                           {"policy", policies[i]},
                           {"hit_rate", c.hit_rate()},
                           {"seconds", c.seconds},
                           {"reads", c.reads},
                           {"writes", c.writes},
                           {"read_p50_us", c.p50_ns / 1e3},
                           {"read_p99_us", c.p99_ns / 1e3},
                           {"evictions", c.evictions},
                           {"promotions", c.promotions},
                           {"hit_rate_vs_lru", hit_ratio},
                           {"time_vs_lru", time_ratio}});
        }
        std::fflush(stdout);
    };
    for (const auto& pattern : comma_list(patterns_text))
        for (const auto& cap : comma_list(caps_text))
            report(pattern, std::stoull(cap), 1);
    if (threads > 1)
        for (const char* pattern : {"uniform", "zipf"})
            for (const auto& cap : comma_list(caps_text))
                report(pattern, std::stoull(cap), threads);
    if (tier_dir.empty())
        std::filesystem::remove_all(dir);
    if (!json_path.empty())
        std::ofstream(json_path) << all.dump(2) << "\n";
    return 0;
}
