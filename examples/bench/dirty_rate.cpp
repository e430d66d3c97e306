// How fast a running process tree writes its memory: what a pre-copy would
// have to send again each round. Attaches proc::write_tracker to every
// process of the tree rooted at --pid, then every --interval-ms counts the
// pages written since the last look, for --seconds. Prints one line per
// interval and, at the end, JSON: the tracked size, the attach and scan
// times, and the per-interval write rate (p50, p99, max) in MiB/s and as
// distinct pages. The tree runs on meanwhile; it is let go at the end.
#include "core/clock.hpp"
#include "core/latency_recorder.hpp"
#include "core/page.hpp"
#include "sys/proc.hpp"
#include "sys/write_tracker.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

using namespace ferry;

int main(int argc, char** argv) {
    CLI::App app{"dirty-rate: how fast a running process tree writes its memory"};
    pid_t pid = 0;
    int interval_ms = 100;
    double seconds = 5;
    app.add_option("--pid", pid, "the tree's root")->required();
    app.add_option("--interval-ms", interval_ms, "how often to look")->check(CLI::Range(1, 60000));
    app.add_option("--seconds", seconds, "for how long")->check(CLI::Range(0.0, 3600.0));
    CLI11_PARSE(app, argc, argv);

    try {
        struct tracked_process {
            pid_t pid;
            std::unique_ptr<proc::write_tracker> tracker;
        };
        std::vector<tracked_process> procs;
        uint64_t tracked_bytes = 0;
        const uint64_t t_attach = monotonic_ns();
        for (const pid_t p : proc::tree(pid)) {
            auto t = std::make_unique<proc::write_tracker>(p, std::chrono::seconds(5));
            for (const auto& r : t->tracked())
                tracked_bytes += r.end - r.start;
            procs.push_back({p, std::move(t)});
        }
        const double attach_ms = ns_to_ms(monotonic_ns() - t_attach);
        std::fprintf(stderr, "tracking %zu processes, %.1f MiB, attached in %.1f ms\n",
                     procs.size(), double(tracked_bytes) / (1 << 20), attach_ms);

        // Per look: bytes written per second, distinct pages, scan time.
        latency_recorder rates, pages_per_look, scan_ns;
        std::vector<proc::page_run> written;
        const auto interval = std::chrono::milliseconds(interval_ms);
        const uint64_t end_ns = monotonic_ns() + uint64_t(seconds * 1e9);
        uint64_t last = monotonic_ns();
        while (monotonic_ns() < end_ns) {
            std::this_thread::sleep_for(interval);
            const uint64_t t0 = monotonic_ns();
            uint64_t pages = 0;
            for (auto& p : procs)
                for (const auto& area : p.tracker->tracked()) {
                    written.clear();
                    p.tracker->written(area.start, area.end, written);
                    for (const auto& r : written)
                        pages += (r.end - r.start) / page_size;
                }
            const uint64_t t1 = monotonic_ns();
            const double span_s = double(t1 - last) / 1e9;
            last = t1;
            const double mib_s = double(pages * page_size) / (1 << 20) / span_s;
            rates.record(uint64_t(double(pages * page_size) / span_s));
            pages_per_look.record(pages);
            scan_ns.record(t1 - t0);
            std::fprintf(stderr, "%8llu pages written (%.1f MiB/s), scan %.2f ms\n",
                         (unsigned long long)pages, mib_s, ns_to_ms(t1 - t0));
        }
        const auto mib = [](uint64_t bytes) { return double(bytes) / (1 << 20); };
        const nlohmann::json out = {
            {"processes", procs.size()},
            {"tracked_mib", double(tracked_bytes) / (1 << 20)},
            {"attach_ms", attach_ms},
            {"interval_ms", interval_ms},
            {"looks", rates.count()},
            {"written_mib_s_p50", mib(rates.percentile(50))},
            {"written_mib_s_p99", mib(rates.percentile(99))},
            {"written_mib_s_max", mib(rates.max())},
            {"written_pages_per_look_p50", pages_per_look.percentile(50)},
            {"scan_ms_p50", ns_to_ms(scan_ns.percentile(50))},
            {"scan_ms_p99", ns_to_ms(scan_ns.percentile(99))},
        };
        std::printf("%s\n", out.dump().c_str());
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dirty-rate: %s\n", e.what());
        return 1;
    }
}
