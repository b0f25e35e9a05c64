"""pipeline_end_to_end at two input sizes: each side's CPU per additional MB, ours vs datatrove (issue #13).

    .venv/bin/python -m benchmarks.pipeline_end_to_end_steady --corpus /work/corpus --sizes 32,128 \\
        [--repeat 1] [--json OUT]

pipeline_end_to_end's whole-run figure (input MB / CPU-s of one run) charges each side its fixed cost:
ours' is ~20 CPU-s before the first document matters (the CLI's imports, the Dagster instance, one
run per source and the corpus' run with their SQLite events, the kernels and the language model
loaded, the tokenizer written; measured on a 2 MB input, 2026-11-29), the peer's smaller (its imports
are untimed setup; the line below put it at 3 and 14 CPU-s in two runs on 2026-11-29). At 128 MB
ours' is about half of ours' CPU, so the whole-run ratio says as much about start-up as about how fast
a corpus is processed. This benchmark
runs pipeline_end_to_end (both sides, the same filters, the same check that they keep comparable
documents) at each of two sizes, each side in a fresh process as there, and reports per side:

- CPU per additional MB between the sizes, (CPU_big - CPU_small) / (MB_big - MB_small), and its
  inverse, the steady-state throughput per core: what each further MB of a large corpus costs;
- the fixed cost that line implies, CPU_small - MB_small x (CPU per MB): ours' start-up, ~0 for the peer;
- the whole-run throughput at each size, as pipeline_end_to_end reports it.

Target: ours' steady-state throughput >= 20x datatrove's (TARGET_RATIO, as pipeline_end_to_end's).
The smaller size should be past ours' step costs that come once with size (cleaning's worker
processes start above one slice, the tokenizer's round-trip sample fills at ~1 Mi characters): 32 MB
is; between 2 and 32 MB ours adds 0.46 CPU-s per MB, between 32 and 128 0.13, between 128 and 512
0.15 (2026-11-29, this machine). Figures are medians over --repeat rounds per size.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import DEFAULT_WORK_ROOT, MB, SIDES, BenchmarkError, get_benchmark, run_benchmark
from benchmarks.pipeline_end_to_end import TARGET_RATIO

BENCHMARK_NAME = "pipeline_end_to_end"
SIZE_ENV = "E2E_BENCH_MB"  # pipeline_end_to_end.prepare reads the input size from it


def _median_cpu(result: dict[str, Any], side: str) -> float:
    return statistics.median(r["cpu_seconds"] for r in result["records"][side])


def steady_state(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The two sizes' pipeline_end_to_end results (smaller first) -> per side the CPU per additional
    MB, the steady-state MB per CPU-second, the implied fixed CPU and each size's whole-run figures;
    the steady-state ratio (ours / peer) and the target's verdict. Raises BenchmarkError when the
    figures cannot give a rate: sizes not increasing, or a side that took no more CPU for more input
    (the two runs' noise is larger than the work between them: use sizes further apart)."""
    if len(results) != 2:
        raise BenchmarkError(f"two sizes are needed, got {len(results)}")
    small, big = results
    mb = [r["spec"]["input_bytes"] / MB for r in results]
    if not mb[1] > mb[0] > 0:
        raise BenchmarkError(f"the sizes must increase: {mb[0]:,.1f} MB then {mb[1]:,.1f} MB")
    sides: dict[str, Any] = {}
    for side in SIDES:
        cpu = [_median_cpu(small, side), _median_cpu(big, side)]
        per_mb = (cpu[1] - cpu[0]) / (mb[1] - mb[0])
        if per_mb <= 0:
            raise BenchmarkError(f"{side}: {cpu[1]:,.2f} CPU-s at {mb[1]:,.1f} MB is not more than {cpu[0]:,.2f} at "
                                 f"{mb[0]:,.1f} MB: no rate between the sizes")
        sides[side] = {"cpu_seconds": cpu, "cpu_seconds_per_mb": per_mb, "mb_per_cpu_second": 1 / per_mb,
                       "fixed_cpu_seconds": cpu[0] - mb[0] * per_mb,
                       "whole_run_mb_per_cpu_second": [m / c for m, c in zip(mb, cpu, strict=True)]}
    ratio = sides["ours"]["mb_per_cpu_second"] / sides["peer"]["mb_per_cpu_second"]
    whole = [sides["ours"]["whole_run_mb_per_cpu_second"][i] / sides["peer"]["whole_run_mb_per_cpu_second"][i]
             for i in range(2)]
    return {"input_mb": mb, "sides": sides, "steady_state_ratio": ratio, "whole_run_ratio": whole,
            "target_ratio": TARGET_RATIO, "met": ratio >= TARGET_RATIO}


def render(summary: dict[str, Any]) -> str:
    mb = summary["input_mb"]
    ours, peer = summary["sides"]["ours"], summary["sides"]["peer"]

    def pair(key: str, fmt: str, i: int | None = None) -> list[str]:
        """ours' and the peer's figure `key` (its i-th size where it has one per size), formatted."""
        return [fmt.format(s[key] if i is None else s[key][i]) for s in (ours, peer)]

    rows = [
        (f"CPU-s at {mb[0]:,.1f} MB", *pair("cpu_seconds", "{:,.2f}", 0), ""),
        (f"CPU-s at {mb[1]:,.1f} MB", *pair("cpu_seconds", "{:,.2f}", 1), ""),
        *((f"whole run, MB per CPU-s, {mb[i]:,.1f} MB", *pair("whole_run_mb_per_cpu_second", "{:,.3f}", i),
           f"{summary['whole_run_ratio'][i]:.2f}x") for i in range(2)),
        ("CPU-s per additional MB", *pair("cpu_seconds_per_mb", "{:,.4f}"), ""),
        ("**steady state, MB per CPU-s**", *pair("mb_per_cpu_second", "**{:,.3f}**"),
         f"**{summary['steady_state_ratio']:.2f}x**"),
        ("fixed CPU-s (the line's intercept)", *pair("fixed_cpu_seconds", "{:,.2f}"), ""),
    ]
    lines = ["| metric | ours | peer (datatrove) | ratio |", "|---|---:|---:|---:|"]
    lines += [f"| {' | '.join(row)} |" for row in rows]
    verdict = "MET" if summary["met"] else "NOT MET"
    lines.append(f"\ntarget: steady-state MB per CPU-second at least {summary['target_ratio']:g}x datatrove's: "
                 f"[{verdict}] {summary['steady_state_ratio']:.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.pipeline_end_to_end_steady",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", required=True, type=Path, help="JSONL corpus (a directory of *.jsonl)")
    p.add_argument("--sizes", default="32,128", help="two input sizes in MB, comma-separated (default 32,128)")
    p.add_argument("--repeat", type=int, default=1, help="rounds per side and size; figures are medians")
    p.add_argument("--json", type=Path, help="write both sizes' full results and the summary here")
    p.add_argument("--workdir", type=Path, default=DEFAULT_WORK_ROOT)
    a = p.parse_args(argv)
    try:
        sizes = sorted(float(x) for x in a.sizes.split(","))
    except ValueError:
        p.error(f"--sizes takes two numbers, not {a.sizes!r}")
    if len(sizes) != 2 or sizes[0] <= 0 or sizes[0] == sizes[1]:
        p.error(f"--sizes takes two different positive sizes in MB, not {a.sizes!r}")
    bench = get_benchmark(BENCHMARK_NAME)
    say = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    before = os.environ.get(SIZE_ENV)
    results = []
    try:
        for size in sizes:
            os.environ[SIZE_ENV] = f"{size:g}"
            say(f"[{BENCHMARK_NAME}_steady] {size:g} MB")
            results.append(run_benchmark(bench, a.corpus.resolve(), a.repeat, a.workdir.resolve(), progress=say))
        summary = steady_state(results)
    except BenchmarkError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    finally:
        if before is None:
            os.environ.pop(SIZE_ENV, None)
        else:
            os.environ[SIZE_ENV] = before
    print(render(summary))
    load = [r["load"] for r in results]
    print(f"machine: {json.dumps(results[0]['machine'], default=str)}\nload per size: {json.dumps(load)}")
    if a.json:
        out = {"benchmark": f"{BENCHMARK_NAME}_steady", "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
               "sizes_mb": sizes, "summary": summary, "results": results}
        a.json.write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
