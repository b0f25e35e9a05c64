"""pipeline_scaling's report: per stage, the ratios between the largest and the smallest scale and
the verdicts (flat peak memory, under the limit, near-linear time), rendered as the tables RESULTS.md
quotes (the runs themselves: pipeline_scaling.py)."""

from __future__ import annotations

import json
from typing import Any

from benchmarks.harness import MB
from benchmarks.scaled_corpus import NEAR_THRESHOLD

RSS_FLAT_MAX = 1.10  # peak RSS at the largest scale / at the smallest: "flat" = within 10%
RSS_LIMIT_MB = 2000.0
NEAR_LINEAR_MAX = 1.25  # time ratio / size ratio: up to 25% above linear counts as near-linear (as dedup_scaling)


def stage_summary(scales: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per stage: the ratios between the largest and the smallest scale and the verdicts."""
    lo, hi = scales[0], scales[-1]
    out = []
    for i, rec_lo in enumerate(lo["stages"]):
        rec_hi = hi["stages"][i]
        size_ratio = rec_hi["input_bytes"] / rec_lo["input_bytes"]
        rss = [s["stages"][i]["peak_tree_rss_bytes"] for s in scales]
        pss = [s["stages"][i].get("peak_tree_pss_bytes") or s["stages"][i]["peak_tree_rss_bytes"] for s in scales]
        proc = [s["stages"][i]["max_process_rss_bytes"] for s in scales]
        # high-water marks (pipeline_scaling.run_stage): not sampled; older results lack them
        hwm = [s["stages"][i].get("peak_hwm_rss_bytes") or s["stages"][i]["peak_tree_rss_bytes"] for s in scales]
        rss_ratio = rec_hi["peak_tree_rss_bytes"] / rec_lo["peak_tree_rss_bytes"]
        time_ratio = rec_hi["work_seconds"] / rec_lo["work_seconds"] if rec_lo["work_seconds"] else None
        cpu_ratio = rec_hi["work_cpu_seconds"] / rec_lo["work_cpu_seconds"] if rec_lo["work_cpu_seconds"] else None
        per_mb = [s["stages"][i]["work_seconds"] / (s["stages"][i]["input_bytes"] / MB) for s in scales]
        # what the stage adds per input MB between the smallest and the largest scale (fixed costs cancel)
        d_mb = (rec_hi["input_bytes"] - rec_lo["input_bytes"]) / MB
        slope = (rec_hi["work_seconds"] - rec_lo["work_seconds"]) / d_mb if hi is not lo else None
        cpu_slope = (rec_hi["work_cpu_seconds"] - rec_lo["work_cpu_seconds"]) / d_mb if hi is not lo else None
        rss_slope = ((rec_hi["peak_tree_rss_bytes"] - rec_lo["peak_tree_rss_bytes"])
                     / (rec_hi["input_bytes"] - rec_lo["input_bytes"])) if hi is not lo else None
        out.append({
            "stage": rec_lo["stage"], "size_ratio": size_ratio, "rss_ratio": rss_ratio,
            "rss_max_over_min": max(rss) / min(rss), "max_process_rss_ratio": proc[-1] / proc[0],
            "peak_tree_rss_mb_max": max(rss) / MB, "time_ratio": time_ratio, "cpu_ratio": cpu_ratio,
            "seconds_per_mb": per_mb, "marginal_seconds_per_mb": slope, "marginal_cpu_seconds_per_mb": cpu_slope,
            "rss_mb_per_input_mb": rss_slope,
            "rss_flat": max(rss) / min(rss) <= RSS_FLAT_MAX, "rss_under_limit": max(rss) / MB < RSS_LIMIT_MB,
            "hwm_max_over_min": max(hwm) / min(hwm), "hwm_flat": max(hwm) / min(hwm) <= RSS_FLAT_MAX,
            "peak_hwm_rss_mb_max": max(hwm) / MB, "hwm_under_limit": max(hwm) / MB < RSS_LIMIT_MB,
            "pss_max_over_min": max(pss) / min(pss), "pss_flat": max(pss) / min(pss) <= RSS_FLAT_MAX,
            "near_linear": time_ratio is not None and time_ratio <= NEAR_LINEAR_MAX * size_ratio,
            # wall time on a shared 2-core machine loses parallelism when others load it: the CPU
            # time of the materialize call is the steadier measure of the work done
            "near_linear_cpu": cpu_ratio is not None and cpu_ratio <= NEAR_LINEAR_MAX * size_ratio,
        })
    return out


def render(result: dict[str, Any]) -> str:
    scales = result["scales"]
    names = [f"{s['scale']}x" for s in scales]
    inputs = result["inputs"]
    base = "all of it" if inputs["base_bytes"] is None else f"{inputs['base_bytes'] / MB:g} MB of it"
    lines = [
        "benchmark: pipeline_scaling - the main graph (ingest -> packed_shards), one fresh process per asset",
        f"corpus: {result['corpus']}; 1x = {base}: "
        + ", ".join(f"{src} {p['docs']:,} documents {p['bytes'] / MB:,.1f} MB" for src, p in inputs["plan"].items()),
        "inputs: " + "; ".join(f"{s['scale']}x {s['input_bytes'] / MB:,.1f} MB ({s['docs']:,} documents)"
                               for s in scales),
        f"copies identical to their original: {inputs['copies_identical_to_original']:,}",
    ]
    if result.get("overrides"):
        lines.append(f"config overrides: {json.dumps(result['overrides'])}")
    jac = result.get("jaccard")
    if jac:
        lines.append("Jaccard of word 5-gram shingles (dedup's), sample of originals: " + "; ".join(
            f"{k} mean {v['mean']:.3f}, median {v['median']:.3f}, p99 {v['p99']:.3f}, max {v['max']:.3f}, "
            f">= {NEAR_THRESHOLD}: {v[f'at_least_{NEAR_THRESHOLD}']}/{v['n']}" for k, v in jac.items()
            if isinstance(v, dict)))
    lines += [
        "wall s: the stage process (start-up and Dagster's definitions loading included); work s: the "
        "materialize call; CPU s: the process tree (wait4), whole process and the materialize call's; peak tree "
        "RSS / PSS: sums over the tree, sampled every 50 ms (PSS counts a shared page once); peak RSS (HWM): the "
        "stage process's exact high-water mark plus the other processes' (VmHWM), summed over those seen alive "
        "together, not sampled; max process: the largest single process's high-water mark.",
        "",
        "| stage | scale | input MB | wall s | work s | CPU s | work CPU s | peak RSS (HWM) MB | peak tree RSS MB "
        "| peak tree PSS MB | max process RSS MB | work s / input MB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for i, rec0 in enumerate(scales[0]["stages"]):
        for s in scales:
            r = s["stages"][i]
            lines.append(
                f"| {rec0['stage']} | {s['scale']}x | {r['input_bytes'] / MB:,.1f} | {r['wall_seconds']:,.1f} | "
                f"{r['work_seconds']:,.1f} | {r['cpu_seconds']:,.1f} | {r['work_cpu_seconds']:,.1f} | "
                f"{(r.get('peak_hwm_rss_bytes') or 0) / MB:,.0f} | "
                f"{r['peak_tree_rss_bytes'] / MB:,.0f} | {(r.get('peak_tree_pss_bytes') or 0) / MB:,.0f} | "
                f"{r['max_process_rss_bytes'] / MB:,.0f} | {r['work_seconds'] / (r['input_bytes'] / MB):.3f} |")
    for s in scales:
        st = s["stages"]
        lines.append(
            f"| **all stages** | {s['scale']}x | {s['input_bytes'] / MB:,.1f} | "
            f"{sum(r['wall_seconds'] for r in st):,.1f} | {sum(r['work_seconds'] for r in st):,.1f} | "
            f"{sum(r['cpu_seconds'] for r in st):,.1f} | {sum(r['work_cpu_seconds'] for r in st):,.1f} | "
            f"{max(r.get('peak_hwm_rss_bytes') or 0 for r in st) / MB:,.0f} | "
            f"{max(r['peak_tree_rss_bytes'] for r in st) / MB:,.0f} | "
            f"{max(r.get('peak_tree_pss_bytes') or 0 for r in st) / MB:,.0f} | "
            f"{max(r['max_process_rss_bytes'] for r in st) / MB:,.0f} | "
            f"{sum(r['work_seconds'] for r in st) / (s['input_bytes'] / MB):.3f} |")
    if len(scales) > 1:
        lo, hi = names[0], names[-1]
        lines += ["", f"| stage | peak tree RSS {hi}/{lo} | max process RSS {hi}/{lo} | peak RSS (HWM) flat (max/min "
                  f"over scales <= {RSS_FLAT_MAX:.2f}) | sampled tree RSS flat | PSS flat | < {RSS_LIMIT_MB:,.0f} MB | "
                  f"work time {hi}/{lo} (input) | "
                  f"work CPU {hi}/{lo} | marginal work s / input MB | marginal work CPU s / input MB | "
                  f"peak RSS MB / input MB | near-linear, wall / CPU (<= {NEAR_LINEAR_MAX:.2f}x linear) |",
                  "|---|---:|---:|---|---|---|---|---:|---:|---:|---:|---:|---|"]
        for row in result["summary"]:
            lines.append(
                f"| {row['stage']} | {row['rss_ratio']:.2f} | {row['max_process_rss_ratio']:.2f} | "
                f"{'yes' if row['hwm_flat'] else 'NO'} ({row['hwm_max_over_min']:.2f}) | "
                f"{'yes' if row['rss_flat'] else 'NO'} ({row['rss_max_over_min']:.2f}) | "
                f"{'yes' if row['pss_flat'] else 'NO'} ({row['pss_max_over_min']:.2f}) | "
                f"{'yes' if row['rss_under_limit'] and row['hwm_under_limit'] else 'NO'} "
                f"({max(row['peak_tree_rss_mb_max'], row['peak_hwm_rss_mb_max']):,.0f}) | "
                f"{row['time_ratio']:.2f} ({row['size_ratio']:.2f}) | {row['cpu_ratio']:.2f} | "
                f"{row['marginal_seconds_per_mb']:.3f} | {row['marginal_cpu_seconds_per_mb']:.3f} | "
                f"{row['rss_mb_per_input_mb']:.2f} | {'yes' if row['near_linear'] else 'NO'} / "
                f"{'yes' if row['near_linear_cpu'] else 'NO'} |")
        v = result["verdict"]
        lines += ["", "targets:",
                  f"  [{'MET' if v['hwm_flat'] else 'NOT MET'}] peak RSS (high-water marks) flat within 10% across "
                  f"{', '.join(names)}" + ("" if v["hwm_flat"] else f": not flat: {', '.join(v['hwm_not_flat'])}"),
                  f"  [{'MET' if v['rss_flat'] else 'NOT MET'}] peak tree RSS sampled every 50 ms flat within 10% "
                  f"across {', '.join(names)}"
                  + ("" if v["rss_flat"] else f": not flat: {', '.join(v['rss_not_flat'])}"),
                  f"  [{'MET' if v['pss_flat'] else 'NOT MET'}] peak tree PSS (shared pages once) flat within 10% "
                  f"across {', '.join(names)}"
                  + ("" if v["pss_flat"] else f": not flat: {', '.join(v['pss_not_flat'])}"),
                  f"  [{'MET' if v['rss_under_limit'] and v['hwm_under_limit'] else 'NOT MET'}] peak RSS under "
                  f"{RSS_LIMIT_MB:,.0f} MB (both measures)"
                  + ("" if v["rss_under_limit"] and v["hwm_under_limit"]
                     else f": over: {', '.join(v['rss_over_limit'] + v['hwm_over_limit'])}"),
                  f"  [{'MET' if v['near_linear'] else 'NOT MET'}] time near-linear (work time {hi}/{lo} <= "
                  f"{NEAR_LINEAR_MAX:.2f}x the input ratio)"
                  + ("" if v["near_linear"] else f": not: {', '.join(v['not_near_linear'])}"),
                  f"  [{'MET' if v['near_linear_cpu'] else 'NOT MET'}] CPU time near-linear (work CPU {hi}/{lo} <= "
                  f"{NEAR_LINEAR_MAX:.2f}x the input ratio)"
                  + ("" if v["near_linear_cpu"] else f": not: {', '.join(v['not_near_linear_cpu'])}")]
    dd = [(s["scale"], r["duplicates"]) for s in scales for r in s["stages"] if "duplicates" in r]
    if dd:
        lines += ["", "dedup removals: " + "; ".join(
            f"{n}x {d['removed']:,} ({d['removed_exact']:,} exact, {d['removed_near']:,} near; "
            f"{d['removed_as_copy_of_own_original']:,} a copy of its own original)" for n, d in dd)]
    mach, load = result["machine"], result["load"]
    others = [r["others_cpu_cores"] for s in scales for r in s["stages"] if r["others_cpu_cores"] is not None]
    starts = [r["loadavg_1m_at_start"] for s in scales for r in s["stages"]]
    lines += ["",
              f"machine: {mach.get('cores')} cores ({mach.get('cores_usable')} usable), {mach.get('memory_gib', '?')} "
              f"GiB RAM, {mach.get('cpu_model') or 'unknown CPU'}; {mach['platform']}; {mach['python']}",
              f"load average (1 min): {load['before']:.2f} before, {min(starts):.2f}-{max(starts):.2f} at the start of "
              f"stages, {load['after']:.2f} after"
              + (f"; other processes used {min(others):.2f} / {sorted(others)[len(others) // 2]:.2f} / "
                 f"{max(others):.2f} cores (min / median / max over stages)" if others else ""),
              "packages: " + ", ".join(f"{k} {v}" for k, v in mach["packages"].items())]
    return "\n".join(lines)


def verdict(summary: list[dict[str, Any]]) -> dict[str, Any]:
    return {"hwm_flat": all(r["hwm_flat"] for r in summary),
            "hwm_not_flat": [f"{r['stage']} {r['hwm_max_over_min']:.2f}x" for r in summary if not r["hwm_flat"]],
            "hwm_under_limit": all(r["hwm_under_limit"] for r in summary),
            "hwm_over_limit": [f"{r['stage']} {r['peak_hwm_rss_mb_max']:,.0f} MB" for r in summary
                               if not r["hwm_under_limit"]],
            "rss_flat": all(r["rss_flat"] for r in summary),
            "rss_not_flat": [f"{r['stage']} {r['rss_max_over_min']:.2f}x" for r in summary if not r["rss_flat"]],
            "pss_flat": all(r["pss_flat"] for r in summary),
            "pss_not_flat": [f"{r['stage']} {r['pss_max_over_min']:.2f}x" for r in summary if not r["pss_flat"]],
            "rss_under_limit": all(r["rss_under_limit"] for r in summary),
            "rss_over_limit": [f"{r['stage']} {r['peak_tree_rss_mb_max']:,.0f} MB" for r in summary
                               if not r["rss_under_limit"]],
            "near_linear": all(r["near_linear"] for r in summary),
            "not_near_linear": [f"{r['stage']} {r['time_ratio']:.2f}x for {r['size_ratio']:.2f}x" for r in summary
                                if not r["near_linear"]],
            "near_linear_cpu": all(r["near_linear_cpu"] for r in summary),
            "not_near_linear_cpu": [f"{r['stage']} {r['cpu_ratio']:.2f}x for {r['size_ratio']:.2f}x" for r in summary
                                    if not r["near_linear_cpu"]]}
