"""Run a named benchmark, ours vs a peer library, on the same input, and report both figures.

Each side of each round runs in a fresh ``python -m benchmarks _child`` process, so that

- peak RSS is that child's own ``ru_maxrss`` (read by the parent with ``os.wait4``; it includes
  the interpreter and imports, as a user's process would), and
- imports, caches and allocator state never leak from one side into the other.

Inside the child, a side is set up first (imports, config, schema: untimed), then its ``work()`` is
timed with ``perf_counter`` (wall) and ``getrusage`` (CPU of all its threads), then an untimed
``finish()`` turns the work's result into measurements (e.g. rows counted from the written files).
With ``--repeat N`` the sides alternate (ours first in odd rounds, the peer first in even rounds)
and every metric is reported as the median over rounds.

A benchmark is a module of this package that defines ``BENCHMARK = Benchmark(...)`` (or a tuple
``BENCHMARKS``); modules are discovered by name, so adding a file is all it takes. Keep module-level
imports light: the parent imports every benchmark module (to list them), and the heavy libraries
must be imported inside the side functions, where the import is not timed and cannot pollute the
other side.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.metadata
import json
import os
import pkgutil
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.report import cpu_busy_seconds, machine_info, render_report, summarize

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
# The real GPT-2 tokenizer of this workplace's shared data, beside the checkout (tokenization,
# packing and loader benchmarks tokenize the corpus with it; each has an env var to point elsewhere).
GPT2_TOKENIZER_JSON = REPO_ROOT.parent / "shared" / "data" / "tokenizers" / "gpt2" / "tokenizer.json"
DEFAULT_WORK_ROOT = BENCH_DIR / ".work"  # gitignored
SIDES = ("ours", "peer")
MB = 1e6  # MB means 10^6 bytes everywhere in reports (throughput and memory alike)
_NOT_BENCHMARKS = {"harness", "report", "__main__"}


class BenchmarkError(RuntimeError):
    """A benchmark could not produce comparable figures (a side failed, or the sides disagree)."""


# -- what a benchmark declares ---------------------------------------------------------------------
Record = dict[str, Any]  # one side, one round: harness measurements + the side's own measurements
Spec = dict[str, Any]  # the JSON input both sides get, made once by `prepare` in the parent


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    higher_is_better: bool | None
    """None: not a figure of merit (e.g. a row count for sanity): shown, never given a ratio."""
    value: Callable[[Record, Spec], float]
    fmt: str = "{:,.1f}"
    must_match: bool = False
    """A sanity figure both sides must agree on (shown as equal/DIFFERENT; enforce it in `check`)."""

    @property
    def label(self) -> str:
        return f"{self.name} ({self.unit})" if self.unit else self.name


@dataclass(frozen=True)
class Target:
    """A goal on one metric: a minimum ratio (ours better by that factor) and/or a bound on ours."""

    metric: str
    description: str
    min_ratio: float | None = None
    max_ours: float | None = None
    min_ours: float | None = None

    def verdict(self, ours: float, ratio: float | None) -> bool:
        ok = True
        if self.min_ratio is not None:
            ok &= ratio is not None and ratio >= self.min_ratio
        if self.max_ours is not None:
            ok &= ours < self.max_ours
        if self.min_ours is not None:
            ok &= ours >= self.min_ours
        return ok


@dataclass(frozen=True)
class Prepared:
    """What a side function returns: the timed work and an optional untimed finish."""

    work: Callable[[], Any]
    finish: Callable[[Any], Mapping[str, Any]] | None = None
    """Turns work's return value into measurements (JSON values); if None, work returns them."""


SideFn = Callable[[Spec, Path], "Prepared | Callable[[], Any]"]
"""(spec, a fresh empty directory for this run's outputs) -> Prepared. Runs in the child; do the
imports and any setup here, untimed."""


@dataclass(frozen=True)
class Benchmark:
    name: str
    description: str
    ours_label: str
    peer_label: str
    prepare: Callable[[Path, Path], Spec]
    """(corpus path, run directory) -> spec. Runs once in the parent: stdlib only, no heavy imports
    (the parent's own peak RSS is inherited by each child's ru_maxrss across exec)."""
    ours: SideFn
    peer: SideFn
    metrics: tuple[Metric, ...]
    packages: tuple[str, ...] = ()
    """Distributions whose versions the report names (read from metadata, never imported)."""
    check: Callable[[Record, Record], None] | None = None
    """Raises BenchmarkError when one round's two records are not comparable (e.g. row counts)."""
    targets: tuple[Target, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment for both children; ``{run_dir}`` is replaced by the side's run directory."""
    describe: Callable[[Spec], str] | None = None
    """One line about the input, for the report (e.g. files, MB, lines)."""

    def side(self, name: str) -> SideFn:
        if name not in SIDES:
            raise ValueError(f"side must be one of {SIDES}, not {name!r}")
        return self.ours if name == "ours" else self.peer

    def metric(self, name: str) -> Metric:
        for m in self.metrics:
            if m.name == name:
                return m
        raise KeyError(f"benchmark {self.name!r} has no metric {name!r}")


# Metrics every benchmark can use: the harness measures these for each side.
def peak_rss_metric() -> Metric:
    return Metric("peak RSS", "MB", False, lambda r, s: r["peak_rss_bytes"] / MB, "{:,.0f}")


def work_seconds_metric() -> Metric:
    return Metric("wall time", "s", False, lambda r, s: r["seconds"], "{:,.2f}")


def cpu_seconds_metric() -> Metric:
    return Metric("CPU time", "s", False, lambda r, s: r["cpu_seconds"], "{:,.2f}")


# -- registry --------------------------------------------------------------------------------------
def load_registry() -> dict[str, Benchmark]:
    """Every benchmark defined by a module of this package, by name."""
    found: dict[str, Benchmark] = {}
    for info in sorted(pkgutil.iter_modules([str(BENCH_DIR)]), key=lambda i: i.name):
        if info.name in _NOT_BENCHMARKS or info.name.startswith(("_", "test")):
            continue
        module = importlib.import_module(f"{__package__}.{info.name}")
        benches = getattr(module, "BENCHMARKS", None) or (
            (module.BENCHMARK,) if hasattr(module, "BENCHMARK") else ()
        )
        for bench in benches:
            if bench.name in found:
                raise BenchmarkError(f"benchmark name {bench.name!r} is defined twice")
            found[bench.name] = bench
    return found


def get_benchmark(name: str) -> Benchmark:
    registry = load_registry()
    if name not in registry:
        known = ", ".join(sorted(registry)) or "none"
        raise BenchmarkError(f"no benchmark named {name!r} (known: {known})")
    return registry[name]


# -- the child: one side, one round ---------------------------------------------------------------
def proc_status_bytes(key: str, pid: int | str = "self") -> int | None:
    """VmRSS / VmHWM of a process (this one by default) from /proc (Linux), in bytes; None when it is
    gone or has no memory of its own (a zombie)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime + ch.ru_utime + ch.ru_stime


def child_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks _child")
    p.add_argument("name")
    p.add_argument("side", choices=SIDES)
    p.add_argument("spec", type=Path)
    p.add_argument("run_dir", type=Path)
    p.add_argument("result", type=Path)
    p.add_argument("--profile", type=Path, help="write cProfile stats of work() here")
    a = p.parse_args(argv)
    if a.side == "ours":
        # ours runs as the platform runs: its package imported before anything else, because that
        # picks Arrow's memory pool, which must happen before pyarrow is loaded
        import platform_assets  # noqa: F401
    bench = get_benchmark(a.name)
    spec = json.loads(a.spec.read_text())
    prepared = bench.side(a.side)(spec, a.run_dir)
    if not isinstance(prepared, Prepared):
        prepared = Prepared(prepared)
    gc.collect()
    rss_setup = proc_status_bytes("VmRSS")
    profiler = None
    if a.profile:
        import cProfile

        profiler = cProfile.Profile()
    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    cpu0, t0 = _cpu_seconds(), time.perf_counter()
    if profiler:
        profiler.enable()
    out = prepared.work()
    if profiler:
        profiler.disable()
    seconds, cpu = time.perf_counter() - t0, _cpu_seconds() - cpu0
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
    if profiler:
        profiler.dump_stats(str(a.profile))
    measured = dict(prepared.finish(out)) if prepared.finish else dict(out or {})
    record = {
        "side": a.side,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "minor_page_faults": faults,  # first touches of fresh memory: a proxy for allocation churn
        "rss_after_setup_bytes": rss_setup,
        "vmhwm_bytes": proc_status_bytes("VmHWM"),
        "arrow_memory_pool": sys.modules["pyarrow"].default_memory_pool().backend_name if "pyarrow" in sys.modules
        else None,
        **measured,
    }
    a.result.write_text(json.dumps(record, indent=1))
    return 0


# -- the parent ------------------------------------------------------------------------------------
def _child_env(bench: Benchmark, run_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    for k, v in bench.env.items():
        env[k] = v.replace("{run_dir}", str(run_dir))
    return env



def run_reaped(command: list[str], env: dict[str, str], log_path: Path) -> tuple[int, Any]:
    """Run `command` from the repository root, its output in `log_path`; (exit code, its rusage).
    wait4, not wait: the rusage is this child's own (and of every descendant it reaped): CPU, and
    ru_maxrss in KiB on Linux."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
    return os.waitstatus_to_exitcode(status), usage


def log_tail(log_path: Path, lines: int = 25) -> list[str]:
    """The last lines of a failed child's output, for the error message."""
    return log_path.read_text(errors="replace").strip().splitlines()[-lines:]

def run_side(bench: Benchmark, side: str, spec_path: Path, work: Path, tag: str,
             profile: Path | None = None) -> Record:
    """Run one side in a fresh interpreter; its outputs are deleted afterwards."""
    run_dir = work / f"{side}-{tag}"
    run_dir.mkdir(parents=True)
    result_path = work / f"{side}-{tag}.result.json"
    log_path = work / f"{side}-{tag}.log"
    cmd = [sys.executable, "-m", __package__, "_child", bench.name, side, str(spec_path), str(run_dir),
           str(result_path)]
    if profile:
        cmd += ["--profile", str(profile)]
    load = os.getloadavg()
    busy0, t0 = cpu_busy_seconds(), time.monotonic()
    try:
        returncode, usage = run_reaped(cmd, _child_env(bench, run_dir), log_path)
        if returncode != 0:
            raise BenchmarkError(f"{bench.name}: the {side} side failed (exit {returncode}):\n  "
                                 + "\n  ".join(log_tail(log_path)))
        record = json.loads(result_path.read_text())
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    busy1, elapsed = cpu_busy_seconds(), time.monotonic() - t0
    record["peak_rss_bytes"] = usage.ru_maxrss * 1024
    record["loadavg_1m_at_start"] = load[0]
    if busy0 is not None and busy1 is not None and elapsed > 0:
        # the machine's CPU use over the child's lifetime minus the child's own: other processes' load
        child_cpu = usage.ru_utime + usage.ru_stime
        record["others_cpu_cores"] = max(0.0, (busy1 - busy0 - child_cpu) / elapsed)
    return record


def run_benchmark(bench: Benchmark, corpus: Path, repeat: int = 1, work_root: Path = DEFAULT_WORK_ROOT,
                  keep: bool = False, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run both sides `repeat` times, alternating, and return the full result (JSON-able)."""
    if repeat < 1:
        raise ValueError("repeat must be >= 1")
    if not corpus.exists():
        raise BenchmarkError(f"corpus {corpus} does not exist")
    say = progress or (lambda _msg: None)
    work_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{bench.name}-", dir=work_root))
    load_before = os.getloadavg()[0]
    try:
        spec = bench.prepare(corpus, work)
        spec_path = work / "spec.json"
        spec_path.write_text(json.dumps(spec, indent=1))
        records: dict[str, list[Record]] = {s: [] for s in SIDES}
        for i in range(repeat):
            order = SIDES if i % 2 == 0 else SIDES[::-1]
            for side in order:
                say(f"[{bench.name}] round {i + 1}/{repeat}: {side} ...")
                rec = run_side(bench, side, spec_path, work, f"r{i + 1}")
                rec["round"] = i + 1
                records[side].append(rec)
                say(f"[{bench.name}] round {i + 1}/{repeat}: {side} {rec['seconds']:.2f} s, "
                    f"peak RSS {rec['peak_rss_bytes'] / MB:,.0f} MB")
            if bench.check:
                bench.check(records["ours"][-1], records["peer"][-1])
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
            if work_root == DEFAULT_WORK_ROOT and not any(work_root.iterdir()):
                work_root.rmdir()
    starts = [r["loadavg_1m_at_start"] for s in SIDES for r in records[s]]
    others = [r["others_cpu_cores"] for s in SIDES for r in records[s] if "others_cpu_cores" in r]
    summary = summarize(bench, spec, records)
    by_metric = {row["metric"]: row for row in summary}
    return {
        "benchmark": bench.name,
        "corpus": str(corpus),
        "repeat": repeat,
        "spec": spec,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "machine": machine_info(bench.packages),
        "load": {"before": load_before, "after": os.getloadavg()[0], "min_at_start": min(starts),
                 "max_at_start": max(starts),
                 "others_cpu_cores": ([min(others), statistics.median(others), max(others)]
                                      if others else None)},
        "records": records,
        "summary": summary,
        "targets": [
            {"metric": t.metric, "description": t.description,
             "met": t.verdict(by_metric[t.metric]["ours"], by_metric[t.metric]["ratio"])}
            for t in bench.targets
        ],
    }


def profile_side(bench: Benchmark, corpus: Path, side: str, out: Path, work_root: Path = DEFAULT_WORK_ROOT,
                 top: int = 30) -> str:
    """Run one side once under cProfile (work() only) and return the top functions."""
    import io
    import pstats

    work_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{bench.name}-profile-", dir=work_root))
    try:
        spec = bench.prepare(corpus, work)
        spec_path = work / "spec.json"
        spec_path.write_text(json.dumps(spec))
        rec = run_side(bench, side, spec_path, work, "profile", profile=out.resolve())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    buf = io.StringIO()
    buf.write(f"{side}: {rec['seconds']:.2f} s wall, {rec['cpu_seconds']:.2f} s CPU under cProfile "
              f"(cProfile sees the calling thread only; time in other threads shows as waits)\n")
    stats = pstats.Stats(str(out), stream=buf)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    return buf.getvalue()


# -- command line ----------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_child"]:
        return child_main(argv[1:])
    p = argparse.ArgumentParser(prog="python -m benchmarks",
                                description="Ours vs a peer, same input, same run.")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="list the registered benchmarks")
    r = sub.add_parser("run", help="run a benchmark: both sides, alternating, in fresh subprocesses")
    r.add_argument("name")
    r.add_argument("--corpus", required=True, type=Path, help="input path (a file or a directory)")
    r.add_argument("--repeat", type=int, default=1, help="rounds per side; figures are medians (default 1)")
    r.add_argument("--json", type=Path, help="also write the full result (every run) as JSON here")
    r.add_argument("--workdir", type=Path, default=DEFAULT_WORK_ROOT,
                   help=f"where run directories go (default {DEFAULT_WORK_ROOT}); removed afterwards")
    r.add_argument("--keep", action="store_true",
                   help="keep the run directory (outputs, logs) for inspection")
    pr = sub.add_parser("profile", help="run one side once under cProfile and print the top functions")
    pr.add_argument("name")
    pr.add_argument("--corpus", required=True, type=Path)
    pr.add_argument("--side", choices=SIDES, default="ours")
    pr.add_argument("--out", type=Path, default=Path("benchmark.prof"), help="cProfile stats file")
    pr.add_argument("--top", type=int, default=30)
    pr.add_argument("--workdir", type=Path, default=DEFAULT_WORK_ROOT)
    a = p.parse_args(argv)
    try:
        if a.cmd == "list":
            for name, bench in sorted(load_registry().items()):
                metrics = ", ".join(m.label for m in bench.metrics)
                print(f"{name}: {bench.description}\n    ours: {bench.ours_label}"
                      f"\n    peer: {bench.peer_label}"
                      f"\n    metrics: {metrics}")
            return 0
        bench = get_benchmark(a.name)
        if a.cmd == "profile":
            print(profile_side(bench, a.corpus.resolve(), a.side, a.out, a.workdir.resolve(), a.top))
            return 0
        result = run_benchmark(bench, a.corpus.resolve(), a.repeat, a.workdir.resolve(), a.keep,
                               progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    except BenchmarkError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(render_report(bench, result["spec"], result))
    if a.json:
        a.json.write_text(json.dumps(result, indent=1, default=str))
    return 0
