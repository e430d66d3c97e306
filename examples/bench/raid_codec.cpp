// Microbenchmark of the pool's stripe codec (lib/raid.hpp, ISA-L): parity
// encode and rebuild throughput per core, in data bytes per second, for the
// two stripe geometries under consideration: whole 4 KiB pages as members
// (a stripe of k pages) and pages split into k fragments (Hydra's layout).
#include "pool/raid.hpp"

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace {

using ferry::raid::codec;
using ferry::raid::geometry;
using ferry::raid::level;

struct stripe {
    stripe(uint32_t members, size_t len) : ptrs(members) {
        for (auto& p : ptrs) {
            p = static_cast<std::byte*>(std::aligned_alloc(ferry::raid::alignment, len));
            std::memset(p, int(reinterpret_cast<uintptr_t>(&p) & 0xff), len);
        }
    }
    ~stripe() {
        for (auto* p : ptrs)
            std::free(p);
    }
    std::vector<std::byte*> ptrs;
};

// First two args: level (5 or 6), nodes.
geometry geometry_of(const benchmark::State& state) {
    return geometry::over(state.range(0) == 5 ? level::raid5 : level::raid6,
                          uint32_t(state.range(1)));
}

// args: level (5 or 6), nodes, member length in bytes
void encode(benchmark::State& state) {
    const auto g = geometry_of(state);
    const size_t len = size_t(state.range(2));
    const codec c(g);
    stripe s(g.members(), len);
    for (auto _ : state) {
        c.encode(s.ptrs, len);
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(g.data * len));
    state.counters["ns_per_4KiB_page"] =
        benchmark::Counter(double(state.iterations()) * double(g.data * len) / 4096.0,
                           benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// The same over 64 MiB of stripes, so data comes from memory, not cache.
void encode_cold(benchmark::State& state) {
    const auto g = geometry_of(state);
    const size_t len = size_t(state.range(2));
    const codec c(g);
    const size_t count = (64u << 20) / (g.members() * len);
    std::vector<std::unique_ptr<stripe>> stripes;
    for (size_t i = 0; i < count; i++)
        stripes.push_back(std::make_unique<stripe>(g.members(), len));
    size_t next = 0;
    for (auto _ : state) {
        c.encode(stripes[next]->ptrs, len);
        next = next + 1 == count ? 0 : next + 1;
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(g.data * len));
}

// args: level, nodes, member length, members lost (data members first)
void rebuild(benchmark::State& state) {
    const auto g = geometry_of(state);
    const size_t len = size_t(state.range(2));
    const codec c(g);
    stripe s(g.members(), len);
    c.encode(s.ptrs, len);
    bool lost[ferry::raid::max_members] = {};
    for (int64_t i = 0; i < state.range(3); i++)
        lost[i] = true;
    for (auto _ : state) {
        if (!c.reconstruct(s.ptrs, std::span<const bool>(lost, g.members()), len))
            state.SkipWithError("not reconstructible");
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(g.data * len));
}

} // namespace

// Whole pages: 4 KiB members. Split pages: 4096 / k per member.
BENCHMARK(encode)
    ->ArgNames({"raid", "nodes", "len"})
    ->Args({5, 5, 4096})
    ->Args({5, 5, 1024})
    ->Args({5, 4, 4096})
    ->Args({6, 6, 4096})
    ->Args({6, 6, 1024})
    ->Args({6, 4, 4096});
BENCHMARK(encode_cold)
    ->ArgNames({"raid", "nodes", "len"})
    ->Args({5, 5, 4096})
    ->Args({5, 5, 1024})
    ->Args({6, 6, 4096})
    ->Args({6, 6, 1024});
BENCHMARK(rebuild)
    ->ArgNames({"raid", "nodes", "len", "lost"})
    ->Args({5, 5, 4096, 1})
    ->Args({5, 5, 1024, 1})
    ->Args({6, 6, 4096, 1})
    ->Args({6, 6, 4096, 2})
    ->Args({6, 6, 1024, 2});
BENCHMARK_MAIN();
