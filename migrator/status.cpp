#include "status.hpp"

#include "core/error.hpp"
#include "criu/workload_release.hpp"
#include "migration_record.hpp"
#include "sys/hw_breakpoints.hpp"
#include "sys/proc.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <signal.h>

#include <cstdio>
#include <iostream>
#include <thread>

namespace ferry::migrator {

namespace {

using json = nlohmann::json;

std::string age(uint64_t since_unix_ms) {
    const uint64_t now = records::now_unix_ms();
    const double s = since_unix_ms && now > since_unix_ms ? double(now - since_unix_ms) / 1000 : 0;
    return s < 120 ? fmt::format("{:.1f}s", s) : fmt::format("{:.0f}m", s / 60);
}

// "running", "frozen" (held by CRIU), "gone", or the odd state.
std::string workload_summary(pid_t root) {
    if (root <= 0)
        return "-";
    const auto w = criu::inspect_workload(root);
    if (w.tasks.empty() || w.gone())
        return "gone";
    if (w.running())
        return criu::cgroup_frozen(root) ? "frozen (cgroup)" : "running";
    return "frozen";
}

json record_json(const records::migration_record& r) {
    return {{"id", r.id},
            {"mode", r.mode},
            {"phase", r.phase},
            {"age_s", double(records::now_unix_ms() - r.started_unix_ms) / 1000},
            {"in_phase_s", double(records::now_unix_ms() - r.phase_since_unix_ms) / 1000},
            {"source_pid", r.source_pid},
            {"workload", workload_summary(r.source_pid)},
            {"container", r.container},
            {"engine", r.engine},
            {"destination", r.destination},
            {"committed", r.committed},
            {"migrator_pid", r.migrator_pid},
            {"migrator_alive", records::migrator_alive(r)},
            {"criu_pids", criu::find_migration_criu(r.id)},
            {"work_dir", r.work_dir}};
}

} // namespace

int run_status(bool as_json) {
    const auto list = records::list();
    const auto method = hw_breakpoints::decide(hw_breakpoints::probe(), false, std::nullopt);
    if (as_json) {
        json j;
        j["criu_stop_method"] = method.reason;
        j["migrations"] = json::array();
        for (const auto& r : list)
            j["migrations"].push_back(record_json(r));
        std::cout << j.dump() << std::endl;
        return 0;
    }
    std::printf("CRIU stops tasks by %s\n", method.reason.c_str());
    if (list.empty()) {
        std::printf("no migration in flight on this host\n");
        return 0;
    }
    std::printf("%-12s %-10s %-10s %7s %8s  %-22s %-10s %-16s %s\n", "ID", "MODE", "PHASE", "AGE",
                "IN PHASE", "SOURCE", "WORKLOAD", "CRIU", "MIGRATOR");
    for (const auto& r : list) {
        const auto criu = criu::find_migration_criu(r.id);
        const std::string source =
            r.container.empty() ? fmt::format("pid {}", r.source_pid)
                                : fmt::format("{} {} ({})", r.engine, r.container, r.source_pid);
        const bool alive = records::migrator_alive(r);
        std::printf("%-12s %-10s %-10s %7s %8s  %-22s %-10s %-16s %s\n", r.id.substr(0, 12).c_str(),
                    r.mode.c_str(), r.phase.c_str(), age(r.started_unix_ms).c_str(),
                    age(r.phase_since_unix_ms).c_str(), source.c_str(),
                    workload_summary(r.source_pid).c_str(),
                    criu.empty() ? "-" : fmt::format("{}", fmt::join(criu, ",")).c_str(),
                    alive ? fmt::format("pid {}", r.migrator_pid).c_str()
                          : "GONE: `migrator abort ID` releases the workload");
    }
    return 0;
}

int run_abort(const std::string& id, std::chrono::seconds wait, bool as_json) {
    records::migration_record r;
    try {
        r = records::find(id);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "migrator: %s\n", e.what());
        return 2;
    }
    json out = {{"migration_id", r.id}, {"phase", r.phase}};
    auto finish = [&](bool ok, const std::string& text) {
        out["ok"] = ok;
        out["outcome"] = text;
        if (as_json)
            std::cout << out.dump() << std::endl;
        else
            std::printf("%s: %s\n", r.id.c_str(), text.c_str());
        return ok ? 0 : 1;
    };
    if (r.committed)
        return finish(false,
                      "committed: the destination runs the workload, so the source can no longer "
                      "resume; it ends when the post-copy is over");
    if (r.mode == "restore")
        return finish(false, "a restore from the pool has no source here; stop its migrator "
                             "(it leaves the workload parked)");
    bool released_by_migrator = false;
    if (records::migrator_alive(r)) {
        // The migrator aborts on SIGTERM before its commit, within its own
        // deadlines; it removes its record when it is done.
        ::kill(r.migrator_pid, SIGTERM);
        const auto until = std::chrono::steady_clock::now() + wait;
        while (records::migrator_alive(r) && std::chrono::steady_clock::now() < until) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            try {
                const auto now = records::find(r.id);
                if (now.committed)
                    return finish(false, "it committed before the abort arrived: the "
                                         "destination runs the workload");
            } catch (const std::exception&) {
                break; // the record is gone: the migrator is done
            }
        }
        released_by_migrator = !records::migrator_alive(r);
    }
    if (!released_by_migrator) {
        // The migrator is gone (or stuck itself). Its daemon aborted what it
        // served when the migrator's connection dropped; whatever CRIU is
        // left is killed and the workload released.
        criu::release_request req;
        req.root = r.source_pid;
        req.migration_id = r.id;
        req.was_frozen_before = r.cgroup_was_frozen;
        req.bound = std::chrono::seconds(30);
        const auto res = criu::release_workload(req);
        out["recovery"] = res.summary;
        records::remove(r.id);
        return finish(res.ok, res.summary);
    }
    const auto w = criu::inspect_workload(r.source_pid);
    if (w.running() && !criu::cgroup_frozen(r.source_pid))
        return finish(
            true, fmt::format("aborted by its migrator; the workload runs (pid {})", r.source_pid));
    if (w.gone())
        return finish(false, fmt::format("the migrator ended, and the workload (pid {}) is gone",
                                         r.source_pid));
    return finish(false, fmt::format("the migrator ended, but the workload does not run: {}",
                                     w.describe_stuck()));
}

} // namespace ferry::migrator
