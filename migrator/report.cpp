#include "report.hpp"

#include "core/clock.hpp"

#include <fmt/format.h>

namespace ferry::migrator {

namespace {

double span_ms(uint64_t from, uint64_t to) {
    return from && to && to >= from ? ns_to_ms(to - from) : 0;
}

// The downtime in five parts that add up to it: the workload stops (engine
// pause or CRIU's freeze) until every task is frozen; CRIU writes the
// images; they reach the destination (with the writable layer's diff); the
// destination restores until the commit; the tasks are let go.
struct downtime_parts {
    double freeze, dump, images, restore, resume;
};

downtime_parts breakdown(const migration_result& r) {
    const uint64_t dump_from = r.t_frozen ? r.t_frozen : r.t_freeze;
    return {span_ms(r.t_freeze, r.t_frozen), span_ms(dump_from, r.t_dumped),
            span_ms(r.t_dumped, r.t_images_sent), span_ms(r.t_images_sent, r.t_committed),
            span_ms(r.t_committed, r.t_resumed)};
}

// Where the moments came from: Ferry's CRIU plugin (and runc shim) give
// exact ones; without them the migrator's own observations stand in.
const char* freeze_source(const migration_result& r) {
    return r.t_engine_pause ? "engine-pause" : r.t_criu_freeze ? "criu-plugin" : "migrator";
}

const char* resume_source(const migration_result& r) {
    return r.t_plugin_resumed ? "criu-plugin" : "destination";
}

// checkpoint --to-pool: no destination, so most of a migration's account is empty.
std::string park_summary(const migration_result& r) {
    return fmt::format(
        "parked pid {} as '{}' (migration {})\n"
        "  frozen        {:8.1f} ms  until the pool held every page (dump {:.1f} | push {:.1f} "
        "| record {:.1f})\n"
        "  pool          {}\n"
        "  stored        {} pages, {:.1f} MiB with redundancy; record {:.1f} KiB ({} image "
        "files)\n",
        r.source_pid, r.park_name, r.id, r.downtime_ms(), span_ms(r.t_freeze, r.t_dumped),
        ns_to_ms(r.pool_push_ns), span_ms(r.t_dumped, r.t_images_sent), r.pool, r.pool_pages_pushed,
        double(r.pool_bytes_stored) / (1 << 20), double(r.park_record_bytes) / 1024, r.image_files);
}

} // namespace

nlohmann::json to_json(const migration_result& r) {
    nlohmann::json j;
    j["migration_id"] = r.id;
    j["mode"] = to_string(r.mode);
    if (!r.park_name.empty())
        j["name"] = r.park_name;
    if (r.mode == migrate_mode::park)
        j["record_bytes"] = r.park_record_bytes;
    j["ok"] = r.ok;
    j["fabric"] = r.fabric;
    if (!r.ok) {
        j["error"] = r.error;
        j["committed"] = r.committed;
        j["source_running"] = r.source_running;
        j["criu_stuck"] = r.criu_stuck;
    }
    if (!r.recovery.empty())
        j["recovery"] = r.recovery;
    j["criu_stop_method"] = r.criu_stop_method;
    if (!r.idle_poll_source.empty())
        j["idle_poll_source"] = r.idle_poll_source;
    if (!r.idle_poll_destination.empty())
        j["idle_poll_destination"] = r.idle_poll_destination;
    if (!r.engine_restore.empty())
        j["engine_restore"] = r.engine_restore;
    if (!r.mounts_early_source.empty()) {
        j["mounts_early"] = {{"source", r.mounts_early_source},
                             {"destination", r.mounts_early_destination}};
        // Positive: sent before CRIU froze the tree (the plugin's moment).
        if (r.t_mounts_early_sent && r.t_freeze)
            j["mounts_early"]["sent_before_freeze_ms"] =
                (double(r.t_freeze) - double(r.t_mounts_early_sent)) / 1e6;
    }
    if (!r.criu_cgroup_yard.empty())
        j["criu_cgroup_yard"] = r.criu_cgroup_yard;
    if (!r.network.empty())
        j["network"] = r.network;
    if (r.connections_move) {
        j["held_packets"] = r.held_packets;
        j["held_packets_overflowed"] = r.held_packets_overflowed;
    }
    const auto& f = r.criu_features;
    j["criu_lazy_dump"] = !f.pagemap_only ? "pages parked in pipes"
                          : f.whole_vmas  ? "pagemap only, whole VMAs"
                                          : "pagemap only";
    j["criu_vma_flags"] =
        !f.smaps_before_freeze ? "read in the freeze"
        : r.vma_flags_checked_because.empty()
            ? "read before the freeze; no call could change them until it (perf watch)"
            : "read before the freeze, checked at the commit: " + r.vma_flags_checked_because;
    j["criu_network_lock"] = f.network_lock_skip ? "skip (" + f.network_lock_skip_because + ")"
                             : f.network_lock_nftables ? "nftables"
                                                       : "iptables";
    j["workload_bytes"] = r.workload_bytes;
    j["source_pid"] = r.source_pid;
    j["destination_pid"] = r.destination_pid;
    if (!r.container.empty()) {
        j["engine"] = r.engine;
        j["container"] = r.container;
        j["source_container_removed"] = r.source_removed;
        j["engine_settle_ms"] = ns_to_ms(r.dest_engine_settle_ns);
    }
    j["downtime_ms"] = r.downtime_ms();
    j["total_ms"] = r.total_ms();
    const auto& t = r.transfer.stats;
    j["pages_total"] = r.transfer.present ? t.pages_total : r.source_pages_total;
    j["pages_faulted"] = t.pages_faulted;
    j["pages_prefetched"] = t.pages_prefetched;
    j["pages_background"] = t.pages_background;
    j["pages_zero"] = t.pages_zero;
    j["pages_absent"] = t.pages_absent;
    j["pages_dropped"] = t.pages_dropped;
    j["pages_forked"] = t.pages_forked;
    j["pages_refetched"] = t.pages_refetched;
    if (r.precopy.asked) {
        const auto& pc = r.precopy;
        nlohmann::json p;
        p["error"] = pc.error;
        p["rounds"] = pc.rounds;
        p["tracked_pages"] = pc.tracked_pages;
        p["pages_sent"] = pc.pages_sent;
        p["last_round_pages"] = pc.last_round_pages;
        p["converged"] = pc.converged;
        p["wait_ms"] = ns_to_ms(pc.wait_ns);
        p["pages_staged"] = t.precopy_pages_staged;
        p["pages_valid"] = t.precopy_pages_valid;
        p["pages_installed"] = t.pages_precopied + t.pages_precopy_faulted;
        p["pages_for_faults"] = t.pages_precopy_faulted;
        p["unused"] = r.transfer.precopy_unused;
        j["precopy"] = p;
    }
    j["pages_served_by_source"] = r.source_pages_served;
    j["bytes_sent"] = r.source_bytes_sent + r.images_bytes;
    j["image_bytes"] = r.images_bytes;
    j["image_files"] = r.image_files;
    j["faults"] = t.faults;
    j["fault_p50_us"] = ns_to_us(t.fault_p50_ns);
    j["fault_p99_us"] = ns_to_us(t.fault_p99_ns);
    j["fault_max_us"] = ns_to_us(t.fault_max_ns);
    j["fault_fetch_p50_us"] = ns_to_us(t.fetch_p50_ns);
    j["fault_fetch_p99_us"] = ns_to_us(t.fetch_p99_ns);
    j["fault_install_p50_us"] = ns_to_us(t.install_p50_ns);
    j["fault_install_p99_us"] = ns_to_us(t.install_p99_ns);
    j["transfer_ms"] = ns_to_ms(t.transfer_ns);
    // What moving the memory cost each host's CPU: the source daemon's
    // threads that served pages, the destination's lazy-pages daemon.
    j["source_serve_cpu_ms"] = ns_to_ms(r.source_serve_cpu_ns);
    j["lazy_pages_cpu_ms"] = ns_to_ms(t.cpu_ns);
    if (!r.pool.empty()) {
        nlohmann::json p;
        p["spec"] = r.pool;
        p["handed_off"] = r.handed_off;
        p["handoff_cancelled"] = r.handoff_cancelled;
        if (!r.handoff_error.empty())
            p["handoff_error"] = r.handoff_error;
        if (r.handed_off)
            p["handoff_after_resume_ms"] = span_ms(r.t_resumed, r.t_handed_off);
        p["push_ms"] = ns_to_ms(r.pool_push_ns);
        p["pages_pushed"] = r.pool_pages_pushed;
        p["bytes_stored"] = r.pool_bytes_stored;
        p["pages_from_pool"] = t.pool_pages;
        p["pages_from_source"] = t.source_pages;
        p["degraded_stripes"] = t.pool_degraded_stripes;
        p["missed_deadlines"] = t.pool_missed_deadlines;
        p["one_sided_reads"] = t.pool_one_sided_reads;
        p["one_sided_fallbacks"] = t.pool_one_sided_fallbacks;
        p["lost_nodes"] = r.transfer.pool_lost_nodes;
        p["members"] = r.transfer.pool_members;
        p["rebuilt_chunks"] = t.pool_rebuilt_chunks;
        p["rebuild_ms"] = ns_to_ms(t.pool_rebuild_ns);
        p["scrubbed_stripes"] = t.pool_scrubbed_stripes;
        if (!r.transfer.pool_scrub_error.empty())
            p["scrub_error"] = r.transfer.pool_scrub_error;
        j["pool"] = p;
    }
    j["prepare_ms"] = ns_to_ms(r.prepare_ns);
    // Where the downtime went, phase by phase.
    j["phases_ms"] = {
        {"dump", span_ms(r.t_freeze, r.t_dumped)},
        {"ship_images", span_ms(r.t_dumped, r.t_images_sent)},
        {"engine_files", ns_to_ms(r.engine_files_ns)}, // part of ship_images
        {"restore_until_gate", span_ms(r.t_images_sent, r.t_ready_to_resume)},
        {"commit", span_ms(r.t_ready_to_resume, r.t_committed)},
        {"resume", span_ms(r.t_committed, r.t_resumed)},
        {"post_copy", span_ms(r.t_resumed, r.t_transferred)},
        {"finish_source", span_ms(r.t_transferred, r.t_finished)},
    };
    const auto parts = breakdown(r);
    j["downtime_breakdown_ms"] = {
        {"freeze", parts.freeze},   {"dump", parts.dump},     {"images", parts.images},
        {"restore", parts.restore}, {"resume", parts.resume},
    };
    j["timing_source"] = {{"freeze", freeze_source(r)}, {"resume", resume_source(r)}};
    auto since_freeze = [&](uint64_t t) {
        return t && r.t_freeze ? (double(t) - double(r.t_freeze)) / 1e6 : 0.0;
    };
    j["criu_moments_ms"] = {
        {"engine_pause", since_freeze(r.t_engine_pause)},
        {"criu_freeze", since_freeze(r.t_criu_freeze)},
        {"frozen", since_freeze(r.t_frozen)},
        {"dump_end", since_freeze(r.t_dump_end)},
        {"resumed", since_freeze(r.t_plugin_resumed)},
    };
    // The moments' origin on this host's CLOCK_MONOTONIC, to line them up
    // with a trace of the machine (perf record -k mono).
    j["freeze_monotonic_ns"] = r.t_freeze;
    j["destination_phases_ms"] = {
        {"images_check", ns_to_ms(r.dest_images_check_ns)},
        {"lazy_pages_start", ns_to_ms(r.dest_lazy_start_ns)},
        {"criu_restore", ns_to_ms(r.dest_criu_restore_ns)},
    };
    return j;
}

std::string human_summary(const migration_result& r) {
    std::string s;
    if (!r.ok) {
        s += fmt::format("{} {} FAILED: {}\n", to_string(r.mode), r.id, r.error);
        if (r.mode == migrate_mode::unpark)
            s += fmt::format("  '{}' {}\n", r.park_name,
                             r.committed ? "was restored but did not finish: check the destination"
                                         : "stays parked in the pool");
        else if (!r.committed && !r.container.empty())
            s += fmt::format("  the source container '{}' {}\n", r.container,
                             r.source_running ? "keeps running" : "is NOT running: check it");
        else if (!r.committed)
            s += fmt::format("  the source (pid {}) {}\n", r.source_pid,
                             r.source_running ? "keeps running" : "is NOT running: check it");
        if (!r.recovery.empty())
            s += fmt::format("  CRIU {}: {}\n", r.criu_stuck ? "was stuck" : "could not finish",
                             r.recovery);
        return s;
    }
    if (r.mode == migrate_mode::park)
        return park_summary(r);
    const auto& t = r.transfer.stats;
    if (r.mode == migrate_mode::unpark)
        s += fmt::format("restored '{}' from the pool -> pid {} in {:.1f} ms (migration {})\n",
                         r.park_name, r.destination_pid, r.downtime_ms(), r.id);
    else if (!r.container.empty())
        s += fmt::format("migrated {} container '{}' -> destination pid {} (migration {}); source "
                         "container {}\n",
                         r.engine, r.container, r.destination_pid, r.id,
                         r.source_removed ? "removed" : "NOT removed");
    else
        s += fmt::format("migrated pid {} -> destination pid {} (migration {})\n", r.source_pid,
                         r.destination_pid, r.id);
    const auto parts = breakdown(r);
    s += fmt::format("  downtime      {:8.1f} ms  (freeze {:.1f} | dump {:.1f} | images {:.1f} | "
                     "restore {:.1f} | resume {:.1f}; from {} to {})\n",
                     r.downtime_ms(), parts.freeze, parts.dump, parts.images, parts.restore,
                     parts.resume, freeze_source(r), resume_source(r));
    s += fmt::format("  total         {:8.1f} ms  (post-copy {:.1f} ms)\n", r.total_ms(),
                     span_ms(r.t_resumed, r.t_transferred));
    // Said only when a host asked for it and did not get it (the downtime is
    // then longer); "held" and "off ..." are the two states as asked.
    auto fell_short = [](const std::string& state) {
        return state.starts_with("not held") || state.starts_with("lapsed");
    };
    if (fell_short(r.idle_poll_source) || fell_short(r.idle_poll_destination))
        s += fmt::format("  idle CPUs     source: {}; destination: {}\n", r.idle_poll_source,
                         r.idle_poll_destination);
    s += fmt::format(
        "  pages         {} lazy: {} faulted, {} prefetched, {} background; {} holes never sent "
        "({} zero-filled at a fault)\n",
        t.pages_total, t.pages_faulted, t.pages_prefetched, t.pages_background, t.pages_absent,
        t.pages_zero);
    if (t.pages_dropped || t.pages_forked || t.pages_refetched)
        s += fmt::format(
            "                {} dropped (unmapped/exited), {} into forked children, {} refetched "
            "after a checksum mismatch\n",
            t.pages_dropped, t.pages_forked, t.pages_refetched);
    if (r.precopy.asked) {
        const auto& pc = r.precopy;
        if (!pc.error.empty())
            s += fmt::format("  pre-copy      none: {}\n", pc.error);
        else
            s += fmt::format(
                "  pre-copy      {} pages sent in {} rounds over {:.1f} ms before the freeze "
                "({}, last round {} pages); {} of {} staged pages valid at the freeze, {} "
                "installed from them ({} at a fault){}\n",
                pc.pages_sent, pc.rounds + 1, ns_to_ms(pc.wait_ns),
                pc.converged ? "converged" : "not converged", pc.last_round_pages,
                t.precopy_pages_valid, t.precopy_pages_staged,
                t.pages_precopied + t.pages_precopy_faulted, t.pages_precopy_faulted,
                r.transfer.precopy_unused.empty() ? "" : "; unused: " + r.transfer.precopy_unused);
    }
    s += fmt::format("  sent          {:.1f} MiB ({} image files, {:.1f} KiB)\n",
                     double(r.source_bytes_sent + r.images_bytes) / (1 << 20), r.image_files,
                     double(r.images_bytes) / 1024);
    if (r.source_serve_cpu_ns || t.cpu_ns)
        s += fmt::format("  cpu           {:.1f} ms serving pages on the source, {:.1f} ms in "
                         "lazy-pages on the destination\n",
                         ns_to_ms(r.source_serve_cpu_ns), ns_to_ms(t.cpu_ns));
    if (!r.pool.empty())
        s += fmt::format("  pool          {}; {}; {} pages from the pool, {} from the source, {} "
                         "degraded stripes{}\n",
                         r.pool,
                         r.handed_off ? fmt::format("source ended {:.1f} ms after the resume",
                                                    span_ms(r.t_resumed, r.t_handed_off))
                                      : "no hand-off: " + r.handoff_error,
                         t.pool_pages, t.source_pages, t.pool_degraded_stripes,
                         !r.transfer.pool_lost_nodes.empty()
                             ? fmt::format("; lost {}, {} chunks rebuilt",
                                           r.transfer.pool_lost_nodes, t.pool_rebuilt_chunks)
                             : "");
    s += fmt::format("  fault latency p50 {:.0f} us, p99 {:.0f} us, max {:.0f} us over {} faults\n",
                     ns_to_us(t.fault_p50_ns), ns_to_us(t.fault_p99_ns), ns_to_us(t.fault_max_ns),
                     t.faults);
    return s;
}

} // namespace ferry::migrator
