"""From the raw runs to results.json: p50/p99 per method and size, the
downtime breakdown, ratios to Ferry, flatness, fault-latency CDFs."""
import statistics

from benchlib import pct

BASELINE_NAMES = {
    "ferry": "Ferry post-copy",
    "stop_and_copy": "stop-and-copy with CRIU (dump, copy, restore)",
    "criu_lazy_dump": "CRIU lazy dump (freeze until its page server listens)",
    "bare_process": "Ferry, the same memory as a bare process tree",
    "podman_checkpoint": "podman checkpoint --export, copy, restore --import",
    "docker_checkpoint": "docker checkpoint create, copy, start --checkpoint",
    "ferry_idle": "Ferry, no client",
}


def links_by_size(raw_links, key="gbytes_per_s"):
    """The bare link's figures (`key`: the send in the move's memory state, or
    "warm_gbytes_per_s", the fastest send) grouped by the size it carried:
    {mib: p50/p99}. Runs recorded before the link was measured per size
    carry no size, and stand for every size (key "any")."""
    by = {}
    for r in raw_links:
        if "error" not in r and key in r:
            by.setdefault(str(r["mib"]) if "mib" in r else "any", []).append(r[key])
    return {mib: p50_p99(v) for mib, v in by.items()}


def link_for(links, mib):
    """The link a move of `mib` MiB is set against: the one measured at that
    size, else one measured for any size; never another size's."""
    if not links:
        return None
    return links.get(str(mib)) or links.get("any")


def moved_over_raw(runs, raw_link, with_precopy=False):
    """Goal 3's total time: the downtime plus the post-copy (resume to the
    last page) over the time the bare link takes to carry the memory moved
    (`raw_link`'s p50 over the repetitions, into fresh memory, at the size
    moved), p50 over the runs that report what they moved."""
    if not raw_link or not raw_link["p50"]:
        return None
    ratios = []
    for r in runs:
        moved = r.get("moved_bytes", r.get("pages_total", 0) * 4096)
        post_copy = r.get("post_copy_ms", r.get("phases_ms", {}).get("post_copy"))
        if moved and post_copy is not None:
            ms = r["downtime_ms"] + post_copy + (r.get("precopy_ms", 0.0) if with_precopy else 0.0)
            ratios.append(ms / 1e3 / (moved / (raw_link["p50"] * 1e9)))
    return p50_p99(ratios) if ratios else None


def redis_summary(raw, links=None):
    """Goal 3's figures: the client's view per method, the post-copy under
    load against idle, and each move's total time against the bare link at
    its size (`links`: links_by_size's)."""
    out = {"methods": {}}
    for method, by_size in raw["downtime"].items():
        for mib, runs in by_size.items():
            ok = [r for r in runs if "error" not in r]
            if not ok:
                continue
            row = {}
            for key in ("client_gap_ms", "client_gap_over_downtime_ms", "client_longest_gap_after_ms",
                        "downtime_ms", "reply_p99_before_us",
                        "reply_p99_preparing_us", "reply_p99_after_us", "post_copy_ms", "background_mib_per_s", "total_ms",
                        "failovers", "fault_fetch_p50_us", "fault_fetch_p99_us", "precopy_ms",
                        "precopy_pages_installed", "total_with_precopy_ms"):
                vals = [r[key] for r in ok if key in r]
                if vals:
                    row[key] = p50_p99(vals)
            over = moved_over_raw(ok, link_for(links, mib))
            if over:
                row["total_over_raw_link"] = over
            with_precopy = moved_over_raw(ok, link_for(links, mib), with_precopy=True)
            if with_precopy and any("precopy_ms" in r for r in ok):
                row["total_with_precopy_over_raw_link"] = with_precopy
            cpu = cpu_per_gib(ok)
            if cpu:
                row["source_cpu_ms_per_gib"] = cpu["source"]
                row["destination_cpu_ms_per_gib"] = cpu["destination"]
            out["methods"][method] = row
    m = out["methods"]
    idle = m.get("ferry_idle", {}).get("background_mib_per_s")
    loaded = m.get("ferry", {}).get("background_mib_per_s")
    if idle and loaded:
        out["loaded_over_idle_throughput_p50"] = loaded["p50"] / idle["p50"]
    f = m.get("ferry", {})
    base = m.get("podman_checkpoint", {})
    if "client_gap_ms" in f and "client_gap_ms" in base and f["client_gap_ms"]["p50"]:
        out["baseline_client_gap_over_ferry_p50"] = base["client_gap_ms"]["p50"] / f["client_gap_ms"]["p50"]
    if "reply_p99_after_us" in f and "reply_p99_before_us" in f and f["reply_p99_before_us"]["p50"]:
        out["reply_p99_during_over_before_p50"] = f["reply_p99_after_us"]["p50"] / f["reply_p99_before_us"]["p50"]
    pc = m.get("ferry_precopy", {})
    if "reply_p99_after_us" in pc and "reply_p99_before_us" in pc and pc["reply_p99_before_us"]["p50"]:
        out["precopy_reply_p99_during_over_before_p50"] = (pc["reply_p99_after_us"]["p50"]
                                                           / pc["reply_p99_before_us"]["p50"])
    idle_total = m.get("ferry_idle", {}).get("total_ms")
    if idle_total and "total_ms" in pc and pc["total_ms"]["p50"]:
        out["precopy_loaded_total_over_idle_total_p50"] = pc["total_ms"]["p50"] / idle_total["p50"]
    return out


def cpu_per_gib(runs):
    """What moving the memory cost each host's CPU, in ms per GiB moved:
    the source daemon's page-serving threads and the destination's
    lazy-pages, over the runs that report both (migrator's JSON, or a
    Redis run's figures); None if none does."""
    src, dst = [], []
    for r in runs:
        gib = r.get("moved_bytes", r.get("pages_total", 0) * 4096) / 2**30
        if gib and r.get("lazy_pages_cpu_ms") and r.get("source_serve_cpu_ms") is not None:
            src.append(r["source_serve_cpu_ms"] / gib)
            dst.append(r["lazy_pages_cpu_ms"] / gib)
    return {"source": p50_p99(src), "destination": p50_p99(dst)} if src else None


def p50_p99(values):
    return {"p50": pct(values, 50), "p99": pct(values, 99), "n": len(values)}


def summarize(raw):
    """raw: {"downtime": {method: {mib: [run...]}}, "faults": {name: [run...]}}"""
    out = {"downtime_ms": {}, "breakdown_p50_ms": {}, "ratios_to_ferry_p50": {}, "faults": {}}
    links = links_by_size(raw.get("raw_link", []))
    if links:
        out["raw_link_gbytes_per_s"] = links
        out["raw_link_fabric"] = next(r.get("fabric", "tcp") for r in raw["raw_link"] if "error" not in r)
        warm = links_by_size(raw["raw_link"], "warm_gbytes_per_s")
        if warm:
            out["raw_link_warm_gbytes_per_s"] = warm
        for mib, runs in raw["downtime"].get("ferry", {}).items():
            ok = [r for r in runs if "error" not in r]
            over = moved_over_raw(ok, link_for(links, mib))
            if over:
                out.setdefault("ferry_total_over_raw_link", {})[mib] = over
            over = moved_over_raw(ok, link_for(warm, mib))
            if over:
                out.setdefault("ferry_total_over_warm_link", {})[mib] = over
    for method, by_size in raw["downtime"].items():
        out["downtime_ms"][method] = {}
        out["breakdown_p50_ms"][method] = {}
        for mib, runs in by_size.items():
            ok = [r for r in runs if "error" not in r]
            if not ok:
                continue
            out["downtime_ms"][method][mib] = p50_p99([r["downtime_ms"] for r in ok])
            parts = {}
            for r in ok:
                for k, v in r.get("breakdown_ms", {}).items():
                    parts.setdefault(k, []).append(v)
            out["breakdown_p50_ms"][method][mib] = {k: statistics.median(v) for k, v in parts.items()}
            cpu = cpu_per_gib(ok)
            if cpu:
                out.setdefault("cpu_ms_per_gib", {}).setdefault(method, {})[mib] = cpu
    ferry = out["downtime_ms"].get("ferry", {})
    for method, by_size in out["downtime_ms"].items():
        if method == "ferry":
            continue
        out["ratios_to_ferry_p50"][method] = {
            mib: by_size[mib]["p50"] / ferry[mib]["p50"] for mib in by_size if mib in ferry and ferry[mib]["p50"]}
    # Goal 2: whether the containers' network namespaces had socket tables of their own (README, Tuning).
    tables = [r["source_tcp_ehash_entries"] for runs in raw["downtime"].get("ferry", {}).values()
              for r in runs if r.get("source_tcp_ehash_entries") is not None]
    if tables:
        out["container_socket_tables"] = {"own": sum(t > 0 for t in tables), "host": sum(t < 0 for t in tables)}
    sizes = sorted(ferry, key=int)
    if len(sizes) >= 2:
        lo, hi = sizes[0], sizes[-1]
        out["ferry_flatness"] = {"from_mib": int(lo), "to_mib": int(hi),
                                 "p50_ratio": ferry[hi]["p50"] / ferry[lo]["p50"]}
    for name, runs in raw.get("faults", {}).items():
        ok = [r for r in runs if "error" not in r]
        if not ok:
            continue
        cdfs = [r["touch_cdf_ns"] for r in ok]
        # The pointwise median of the runs' quantile curves.
        median_cdf = [statistics.median(c[i] for c in cdfs) for i in range(len(cdfs[0]))]
        out["faults"][name] = {
            "touch_p50_us": statistics.median(r["touch"]["p50_ns"] for r in ok) / 1e3,
            "touch_p99_us": statistics.median(r["touch"]["p99_ns"] for r in ok) / 1e3,
            "touch_max_us": statistics.median(r["touch"]["max_ns"] for r in ok) / 1e3,
            "cdf_quantiles": [i / 200 for i in range(1, 200)] + [0.999, 0.9999, 1.0],
            "cdf_ns": median_cdf, "runs": len(ok)}
        if "fault_p99_us" in ok[0]:
            out["faults"][name]["fault_service_p50_us"] = statistics.median(r["fault_p50_us"] for r in ok)
            out["faults"][name]["fault_service_p99_us"] = statistics.median(r["fault_p99_us"] for r in ok)
    # Goal 4: the fault p99 with several threads faulting against one.
    for name, f in list(out["faults"].items()):
        if ", " in name and name.split(", ")[0] in out["faults"]:
            one = out["faults"][name.split(", ")[0]]
            f["touch_p99_over_one_thread"] = f["touch_p99_us"] / one["touch_p99_us"] if one["touch_p99_us"] else None
            if "fault_service_p99_us" in f and one.get("fault_service_p99_us"):
                f["fault_service_p99_over_one_thread"] = f["fault_service_p99_us"] / one["fault_service_p99_us"]
    return out


def print_table(summary, stream):
    d = summary["downtime_ms"]
    sizes = sorted({m for by in d.values() for m in by}, key=int)
    print("\n== downtime, ms (p50 / p99)", file=stream)
    print(f"   {'method':56}" + "".join(f"{s + ' MiB':>18}" for s in sizes), file=stream)
    for method, by in d.items():
        cells = "".join(f"{by[s]['p50']:9.1f} /{by[s]['p99']:7.1f}" if s in by else f"{'-':>18}" for s in sizes)
        print(f"   {BASELINE_NAMES.get(method, method):56}{cells}", file=stream)
    for method, by in summary["ratios_to_ferry_p50"].items():
        cells = "".join(f"{by[s]:17.2f}x" if s in by else f"{'-':>18}" for s in sizes)
        print(f"   {method + ' / Ferry (p50)':56}{cells}", file=stream)
    bare = summary["ratios_to_ferry_p50"].get("bare_process")
    if bare:
        print("   Ferry's container downtime / its bare-process downtime (p50): "
              + ", ".join(f"{s} MiB {1 / r:.2f}" for s, r in sorted(bare.items(), key=lambda kv: int(kv[0]))),
              file=stream)
    if "container_socket_tables" in summary:
        t = summary["container_socket_tables"]
        print(f"   containers' network namespaces with socket tables of their own: {t['own']} of "
              f"{t['own'] + t['host']} runs", file=stream)
    if "ferry_flatness" in summary:
        f = summary["ferry_flatness"]
        print(f"   Ferry's downtime at {f['to_mib']} MiB / at {f['from_mib']} MiB (p50): {f['p50_ratio']:.2f}",
              file=stream)
    def by_size(figures, fmt):
        return ", ".join(f"{s + ' MiB' if s != 'any' else 'any size'} {fmt.format(v['p50'])} ({fmt.format(v['p99'])})"
                         for s, v in sorted(figures.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0))

    fabric = summary.get("raw_link_fabric", "tcp")
    for key, what in (("raw_link_gbytes_per_s", "from the memory it just filled (a move's memory state)"),
                      ("raw_link_warm_gbytes_per_s", "fastest send, into memory the one before freed")):
        if key in summary:
            print(f"   the bare {fabric} link a -> b into fresh memory, {what}, GB/s p50 (p99): "
                  + by_size(summary[key], "{:.3f}"), file=stream)
    for key, which in (("ferry_total_over_raw_link", "that link"), ("ferry_total_over_warm_link", "the fastest send")):
        if summary.get(key):
            print(f"   Ferry's downtime + post-copy / (memory moved / {which} at its size), p50 (p99): "
                  + by_size(summary[key], "{:.2f}"), file=stream)
    b = summary["breakdown_p50_ms"].get("ferry", {})
    for s in sorted(b, key=int):
        print(f"   Ferry at {s} MiB by part (p50 ms): " + ", ".join(f"{k} {v:.1f}" for k, v in b[s].items()),
              file=stream)
    for method, by in summary.get("cpu_ms_per_gib", {}).items():
        print(f"   {method}: CPU per GiB moved, ms p50 (p99), source's page serving / destination's lazy-pages: "
              + ", ".join(f"{s} MiB {c['source']['p50']:.0f} ({c['source']['p99']:.0f}) / "
                          f"{c['destination']['p50']:.0f} ({c['destination']['p99']:.0f})"
                          for s, c in sorted(by.items(), key=lambda kv: int(kv[0]))), file=stream)
    if "redis" in summary:
        rs = summary["redis"]
        print("\n== Redis under a client (p50 / p99)", file=stream)
        for method, row in rs["methods"].items():
            # Ratios to the bare link need two decimals; times and rates one.
            cells = ", ".join(f"{k} {v['p50']:.2f} / {v['p99']:.2f}" if k.endswith("_over_raw_link")
                              else f"{k} {v['p50']:.1f} / {v['p99']:.1f}" for k, v in row.items())
            print(f"   {BASELINE_NAMES.get(method, method)}: {cells}", file=stream)
        if "loaded_over_idle_throughput_p50" in rs:
            print(f"   Ferry's background throughput under load / idle (p50): "
                  f"{rs['loaded_over_idle_throughput_p50']:.2f}", file=stream)
        if "reply_p99_during_over_before_p50" in rs:
            print(f"   Ferry: reply p99 during the post-copy / before the move (p50): "
                  f"{rs['reply_p99_during_over_before_p50']:.2f}", file=stream)
    if summary["faults"]:
        print("\n== per-access latency after resume (every page once, random order), us", file=stream)
        for name, f in summary["faults"].items():
            extra = ""
            if "fault_service_p99_us" in f:
                extra = f"   (fault service p50 {f['fault_service_p50_us']:.0f}, p99 {f['fault_service_p99_us']:.0f})"
            if f.get("fault_service_p99_over_one_thread"):
                extra += f"; fault service p99 / 1 thread: {f['fault_service_p99_over_one_thread']:.2f}"
            print(f"   {name:34} p50 {f['touch_p50_us']:8.1f}  p99 {f['touch_p99_us']:8.1f}  "
                  f"max {f['touch_max_us']:9.1f}{extra}", file=stream)
