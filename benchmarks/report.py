"""A benchmark run's report: the machine it ran on, each metric's median per side and their ratio,
per-round figures, targets, and the load of the machine while it ran (harness.run_benchmark)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.harness import Benchmark, Record, Spec


def cpu_busy_seconds() -> float | None:
    """Seconds of CPU time all processes have used since boot, from /proc/stat (Linux)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _package_versions(names: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for n in names:
        try:
            out[n] = importlib.metadata.version(n)
        except importlib.metadata.PackageNotFoundError:
            out[n] = "not installed"
    return out


def machine_info(packages: tuple[str, ...]) -> dict[str, Any]:
    info: dict[str, Any] = {
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "packages": _package_versions(packages),
    }
    try:
        meminfo = Path("/proc/meminfo").read_text()
        kib = int(next(line for line in meminfo.splitlines() if line.startswith("MemTotal:")).split()[1])
        info["memory_gib"] = round(kib / 2**20, 1)
        cpuinfo = Path("/proc/cpuinfo").read_text()
        info["cpu_model"] = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines()
                                  if line.startswith("model name")), None)
    except (OSError, StopIteration):
        pass
    return info


def summarize(bench: Benchmark, spec: Spec, records: dict[str, list[Record]]) -> list[dict[str, Any]]:
    rows = []
    for m in bench.metrics:
        per_run = {side: [float(m.value(r, spec)) for r in records[side]] for side in records}
        ours, peer = (statistics.median(per_run[s]) for s in ("ours", "peer"))
        if m.higher_is_better is None:
            ratio = None
        elif m.higher_is_better:
            ratio = ours / peer if peer else None
        else:
            ratio = peer / ours if ours else None
        rows.append({"metric": m.name, "unit": m.unit, "higher_is_better": m.higher_is_better,
                     "must_match": m.must_match, "ours": ours, "peer": peer, "ratio": ratio, "runs": per_run})
    return rows


def _ratio_text(row: dict[str, Any]) -> str:
    if row["must_match"]:
        return "equal" if row["ours"] == row["peer"] else "DIFFERENT"
    if row["higher_is_better"] is None:
        return "-"
    if row["ratio"] is None:
        return "n/a"
    how = "ours/peer, higher is better" if row["higher_is_better"] else "peer/ours, lower is better"
    return f"{row['ratio']:.2f}x ({how})"


def render_report(bench: Benchmark, spec: Spec, result: dict[str, Any]) -> str:
    metrics = {m.name: m for m in bench.metrics}
    sides = tuple(result["records"])  # ours, peer
    summary = result["summary"]
    n = result["repeat"]
    lines = [
        f"benchmark: {bench.name} - {bench.description}",
        f"corpus: {result['corpus']}" + (f" ({bench.describe(spec)})" if bench.describe else ""),
        f"ours: {bench.ours_label}",
        f"peer: {bench.peer_label}",
        f"runs: {n} per side, each in a fresh subprocess, order alternated"
        + (f"; figures are medians of {n}" if n > 1 else ""),
        "timing: the work only, measured inside each child; interpreter start-up, imports and setup "
        "are excluded on both sides. Peak RSS: the child's ru_maxrss (whole process, imports included).",
        "ratio: how many times better ours is (ours/peer where higher is better, peer/ours where lower is "
        "better); > 1 means ours is better.",
        "",
        "| metric | ours | peer | ratio |",
        "|---|---:|---:|---|",
    ]
    for row in summary:
        m = metrics[row["metric"]]
        lines.append(f"| {m.label} | {m.fmt.format(row['ours'])} | {m.fmt.format(row['peer'])} | "
                     f"{_ratio_text(row)} |")
    if n > 1:
        lines += ["", "per run (in round order):"]
        for row in summary:
            m = metrics[row["metric"]]
            runs = "; ".join(f"{s} " + ", ".join(m.fmt.format(v) for v in row["runs"][s]) for s in sides)
            lines.append(f"  {m.label}: {runs}")
        if all("others_cpu_cores" in r for side in sides for r in result["records"][side]):
            runs = "; ".join(f"{s} " + ", ".join(f"{r['others_cpu_cores']:.2f}" for r in result["records"][s])
                             for s in sides)
            lines.append(f"  other processes' CPU during the run (cores of {os.cpu_count()}): {runs}")
    if bench.targets:
        lines += ["", "targets:"]
        by_name = {row["metric"]: row for row in summary}
        for t in bench.targets:
            row = by_name[t.metric]
            ok = t.verdict(row["ours"], row["ratio"])
            got = (f"ratio {row['ratio']:.2f}x" if t.min_ratio is not None and row["ratio"] is not None
                   else f"ours {metrics[t.metric].fmt.format(row['ours'])} {metrics[t.metric].unit}")
            lines.append(f"  [{'MET' if ok else 'NOT MET'}] {t.description}: {got}")
    mach = result["machine"]
    load = result["load"]
    lines += [
        "",
        f"machine: {mach.get('cores')} cores ({mach.get('cores_usable')} usable), "
        f"{mach.get('memory_gib', '?')} GiB RAM, {mach.get('cpu_model') or 'unknown CPU'}; "
        f"{mach['platform']}; "
        f"{mach['python']}",
        f"load average (1 min): {load['before']:.2f} before, {load['min_at_start']:.2f}-"
        f"{load['max_at_start']:.2f} at the start of runs, {load['after']:.2f} after"
        + ("; other processes used {:.2f} / {:.2f} / {:.2f} cores (min / median / max over runs)".format(
            *load["others_cpu_cores"]) if load.get("others_cpu_cores") else ""),
        "packages: " + ", ".join(f"{k} {v}" for k, v in mach["packages"].items()),
    ]
    pools = {s: sorted({str(r.get("arrow_memory_pool")) for r in result["records"][s]}) for s in sides}
    if any(p != ["None"] for p in pools.values()):
        lines.append("Arrow memory pool: " + "; ".join(f"{s} {', '.join(p)}" for s, p in pools.items()))
    return "\n".join(lines)
