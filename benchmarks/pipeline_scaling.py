"""The main graph (ingest -> packed_shards) on 1x, 4x and 16x inputs: wall, CPU and peak RSS per stage.

Issue #13: peak RSS should stay flat (within 10%) across the three sizes and under 2 GB, and time
should grow near-linearly with the input. This is not an ours-vs-peer benchmark (there is no peer
for the whole graph), so it does not use the harness's two-sided shape; it is a runnable module:

    .venv/bin/python -m benchmarks.pipeline_scaling --base-mb 32 --scales 1,4,16 --json out.json

Input (cached under the work dir, `benchmarks/.work/pipeline_scaling/inputs/`):
- 1x is `--base-mb` MB of the real corpus's JSONL lines (default: all of it, ~524 MB), taken per
  source in proportion to its size, the lines with the smallest crc32 first (a uniform sample of
  every file, written in corpus order, byte-identical lines). Sources: `text_*.jsonl` -> `text`,
  `code_*.jsonl` -> `code` (the file name before the first `_`), one pipeline source each.
- the k-th copy (k >= 1) of each document is a deterministic word-level perturbation of it
  (`perturb`): the text is split into \\w+ tokens (dedup's own tokens); scanning left to right, a
  token and the next one swap places when a hash of (the two tokens, k) falls into 1 of 4 buckets.
  The bag of tokens and characters stays the same, so what cleaning measures on a bag (language
  scores, stop words, word lengths, symbol and alpha ratios) barely moves, while ~40% of tokens
  move and the 5-gram shingles change: Jaccard to the original ~0.1 (printed for a sample, against
  dedup's 0.8 threshold), so near-dedup keeps the copies. The decision depends on the two tokens,
  not on their position, so two near-duplicate originals get the same swaps and stay near
  duplicates (dedup removes about n times what it removes at 1x). A text with too few distinct
  neighbours to move 1 token in 8 (tables of one repeated word) instead gets a syllable appended to
  the tokens whose (hash, position, k) falls into the bucket. Copy k of `text_000.jsonl` is
  `text_000.cKK.jsonl`; a scale n is a directory per source with hard links to copies 0..n-1.

Per scale: a pipeline config (storage in the run dir; the two sources; the sample's cleaning recipe;
the GPT-2 tokenizer.json as a pretrained tokenizer, so no tokenizer training; packing, splits,
dedup, io at their defaults; no media, DVC or training), then every asset of the main graph in
order, each in its own fresh `python -m benchmarks.pipeline_scaling _stage` process that loads
`platform_assets.definitions` and calls `dagster.materialize([that asset], partition_key=...)` on a
SQLite instance of the run (assets read their inputs from storage, so one asset at a time works):
raw_documents, cleaned_documents and dedup_signatures per source, dedup_band_buckets (its 8
partitions in one range run), deduplicated_documents, dataset_splits, tokenizer, tokenized_documents,
packed_shards. Every check of every stage must pass (the run stops otherwise).

Measured per stage, from the parent:
- wall s: the stage process from spawn to exit (interpreter, imports and ~4-9 s of Dagster
  definitions loading included); work s: the `materialize` call alone, timed inside the child.
- CPU s: user + sys of the whole process tree (`os.wait4`'s rusage: the child and every
  descendant it reaped, i.e. cleaning's `io.workers` spawned processes).
- peak tree RSS: the largest sum of RSS over the process tree, sampled with psutil every 50 ms
  (shared pages are counted once per process that maps them); peak tree PSS: the same sum of PSS
  (`/proc/<pid>/smaps_rollup`: a page shared by k processes counts 1/k in each), the tree's memory
  with shared pages counted once: cleaning's workers share the forkserver's pages copy-on-write, and
  a child Dagster forks before it execs (its compute-log `tail -F`) shows the whole parent's RSS for a
  moment (+200-230 MB in a sample at 1x: dedup 594 against 413-446 at the other scales); max process
  RSS: the largest single process's high-water mark (`ru_maxrss` of wait4: exact, not sampled).
- peak RSS (HWM), the measure the flatness and limit verdicts lead with: the stage process's
  high-water mark (`ru_maxrss` it reads itself when its work is done) plus the other processes'
  VmHWM at their last sample, summed over those alive in the same sample (Dagster's two compute-log
  `tail -F` and their two `watch_orphans.py`, ~26 MB together; cleaning's forkserver, workers and
  resource tracker). Sampling misses brief peaks, more in short
  runs: dedup's python at 1x (7 s) sampled 359-377 MB of its 393, at 16x (111 s) 407 of 413, so the
  sampled ratio read 1.11x where the process's own was 1.05x. A sum of per-process peaks is at or
  above the tree's true peak; the sampled sums stay in the report beside it. At the tree's peak
  sample each process's RSS is recorded too (`peak_tree_processes`).
- the machine's load: 1-min load average at the start of each stage, and the cores other processes
  used while it ran (/proc/stat minus the tree's own CPU), as the harness records them.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import DEFAULT_WORK_ROOT, GPT2_TOKENIZER_JSON, MB, REPO_ROOT, proc_status_bytes
from benchmarks.pipeline_scaling_report import render, stage_summary, verdict
from benchmarks.report import cpu_busy_seconds, machine_info
from benchmarks.scaled_corpus import jaccard_check, prepare_inputs

DEFAULT_CORPUS = REPO_ROOT.parent / "corpus"  # /work/corpus beside the checkout (benchmarks/README.md)
WORK_SUBDIR = "pipeline_scaling"
SAMPLE_INTERVAL_S = 0.05

# The main graph in order: (asset, per source?). media_shards, dataset_version, training_run are
# not part of it (no media, no DVC, no training here).
STAGES: tuple[tuple[str, bool], ...] = (
    ("raw_documents", True),
    ("cleaned_documents", True),
    ("dedup_signatures", True),
    ("dedup_band_buckets", False),  # its 8 static partitions in one range run, as the CLI runs them
    ("deduplicated_documents", False),
    ("dataset_splits", False),
    ("tokenizer", False),
    ("tokenized_documents", False),
    ("packed_shards", False),
)
# Materialization metadata worth keeping in the report (scalars only)
KEEP_METADATA = ("rows", "bytes", "documents_in", "quarantined", "tokens", "sequences", "efficiency", "files",
                 "text_bytes", "workers", "removed", "shards")

# The sample's cleaning recipe (configs/sample.yaml): Gopher's repetition and quality rules (English
# only) and language ID at 0.5. FineWeb's default recipe would remove most of the code source (C4's
# curly-bracket rule alone drops every C file) and trip the blocking removal-rate gate (0.6).
CLEANING = {"quality": [{"preset": "gopher_repetition"}, {"preset": "gopher_quality"}],
            "language": {"min_score": 0.5}}


# -- one stage in a fresh process ------------------------------------------------------------------
def _cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime + ch.ru_utime + ch.ru_stime


def _scalar(value: Any) -> Any:
    v = getattr(value, "value", value)
    if isinstance(v, bool | int | float) or (isinstance(v, str) and len(v) < 200):
        return v
    return None


def stage_main(argv: list[str]) -> int:
    """`_stage ASSET PARTITION RESULT`: materialize one asset (PARTITION `-`: unpartitioned) with the
    config in $PLATFORM_CONFIG on the instance in $DAGSTER_HOME; write what happened to RESULT."""
    asset, partition, result_path = argv
    partition = None if partition == "-" else partition
    import dagster as dg

    import platform_assets  # noqa: F401  (first, as every platform process: it picks Arrow's memory pool)
    from platform_assets.definitions import defs

    definitions = defs()
    instance = dg.DagsterInstance.get()
    assets_def = definitions.resolve_assets_def(asset)
    if partition is not None:
        name = assets_def.partitions_def.name
        if partition not in instance.get_dynamic_partitions(name):
            instance.add_dynamic_partitions(name, [partition])
    gc.collect()
    cpu0, t0 = _cpu_seconds(), time.perf_counter()
    # the resolved asset carries the resources the definitions bind (the pipeline resource reads
    # $PLATFORM_CONFIG), so none are passed again
    # a statically partitioned stage without a partition: all its partitions in one range run (the CLI's way)
    from platform_assets.defs.dedup_band_buckets.assets import ALL_BUCKETS_RUN_TAGS

    tags = ALL_BUCKETS_RUN_TAGS if partition is None and asset == "dedup_band_buckets" else None
    result = dg.materialize([assets_def], partition_key=partition, instance=instance, raise_on_error=False,
                            tags=tags)
    work, cpu = time.perf_counter() - t0, _cpu_seconds() - cpu0
    metadata: dict[str, Any] = {}
    for mat in result.asset_materializations_for_node(asset):
        metadata.update({k: s for k, v in mat.metadata.items() if k in KEEP_METADATA and (s := _scalar(v)) is not None})
    checks = [{"name": c.check_name, "passed": bool(c.passed)} for c in result.get_asset_check_evaluations()]
    failure = None
    if not result.success:
        events = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
        failure = str(events[0].event_specific_data.error.message if events else "run failed")[:2000]
    Path(result_path).write_text(json.dumps({
        "success": result.success, "failure": failure, "work_seconds": work, "work_cpu_seconds": cpu,
        # the kernel's exact high-water mark of this process's RSS (Linux: KiB)
        "stage_process_hwm_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "metadata": metadata, "checks": checks}, indent=1))
    return 0 if result.success else 1


def run_stage(asset: str, partition: str | None, run_dir: Path, env: dict[str, str]) -> dict[str, Any]:
    """Spawn the stage process, sample its tree's RSS every 50 ms, reap it with wait4."""
    import psutil

    label = asset + (f"[{partition}]" if partition else "")
    result_path = run_dir / f"{label}.result.json"
    log_path = run_dir / f"{label}.log"
    cmd = [sys.executable, "-m", "benchmarks.pipeline_scaling", "_stage", asset, partition or "-", str(result_path)]
    load = os.getloadavg()[0]
    busy0, t0 = cpu_busy_seconds(), time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    root = psutil.Process(proc.pid)
    peak_tree = peak_pss = peak_procs = samples = 0
    peak_members: list[dict[str, Any]] = []  # the processes of the peak tree sample, what a gap is made of
    # pid -> (name, VmHWM at its last sample, first and last sample it was seen in): every process the tree had
    hwm: dict[int, tuple[str, int, int, int]] = {}
    stage_rss_max = 0  # the stage process's largest RSS sample
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            tree = []
        total = total_pss = 0
        members = []
        for p in tree:
            try:
                mem = p.memory_full_info()
                name = p.name()
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                continue
            total, total_pss = total + mem.rss, total_pss + getattr(mem, "pss", mem.rss)
            members.append({"pid": p.pid, "name": name, "rss_bytes": mem.rss})
            # VmHWM: the kernel's peak RSS of the process (of its program since its last exec)
            if (high := proc_status_bytes("VmHWM", p.pid)) is not None:
                hwm[p.pid] = (name, high, hwm[p.pid][2] if p.pid in hwm else samples, samples)
            if p.pid == proc.pid:
                stage_rss_max = max(stage_rss_max, mem.rss)
        if total > peak_tree:
            peak_tree, peak_members = total, members
        peak_procs, samples = max(peak_procs, len(tree)), samples + 1
        peak_pss = max(peak_pss, total_pss)
        time.sleep(SAMPLE_INTERVAL_S)
    wall = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    busy1 = cpu_busy_seconds()
    cpu = usage.ru_utime + usage.ru_stime  # the child and every descendant it reaped (Linux wait4)
    rec: dict[str, Any] = {
        "stage": label, "asset": asset, "partition": partition, "pid": proc.pid, "exit_code": proc.returncode,
        "wall_seconds": wall, "cpu_seconds": cpu, "peak_tree_rss_bytes": peak_tree,
        "peak_tree_pss_bytes": peak_pss, "max_process_rss_bytes": usage.ru_maxrss * 1024, "processes": peak_procs,
        "peak_tree_processes": peak_members,
        "process_high_water_marks": [{"pid": pid, "name": name, "hwm_bytes": high, "samples": [first, last]}
                                     for pid, (name, high, first, last) in hwm.items()],
        "rss_samples": samples,
        "loadavg_1m_at_start": load,
        "others_cpu_cores": (max(0.0, (busy1 - busy0 - cpu) / wall) if busy0 is not None and busy1 is not None
                             else None),
    }
    if result_path.exists():
        rec.update(json.loads(result_path.read_text()))
    # peak RSS from high-water marks: the stage process's own (read by itself when its work is done;
    # Linux keeps RSS counters per CPU and folds them in lazily, so its samples may exceed it by a few
    # pages: the larger counts) plus the most that the other processes alive together ever add: each
    # one's VmHWM at its last sample (after its exec: a child sampled between fork and exec reads its
    # parent's), summed over those seen in the same sample. Not sampled, so a brief peak is not missed
    # (a 50 ms sample of a 7 s dedup run at 1x read 359-377 MB of its python's 393); a sum of peaks
    # that need not coincide, so not below the tree's true peak.
    if "stage_process_hwm_bytes" in rec:
        rec["stage_process_peak_bytes"] = max(rec["stage_process_hwm_bytes"], stage_rss_max,
                                              hwm[proc.pid][1] if proc.pid in hwm else 0)
        others = [(first, last, high) for pid, (_, high, first, last) in hwm.items() if pid != proc.pid]
        rec["peak_hwm_rss_bytes"] = rec["stage_process_peak_bytes"] + most_alive_together(others)
    if proc.returncode != 0 or not rec.get("success") or not all(c["passed"] for c in rec.get("checks", [])):
        tail = log_path.read_text(errors="replace").strip().splitlines()[-30:]
        failed = [c["name"] for c in rec.get("checks", []) if not c["passed"]]
        raise SystemExit(f"{label} failed (exit {proc.returncode}; failed checks: {failed or 'none'}; "
                         f"{rec.get('failure')}):\n  " + "\n  ".join(tail))
    return rec


def most_alive_together(spans: list[tuple[int, int, int]]) -> int:
    """The largest sum of `size` over spans (first, last, size) that share a sample: processes that
    lived at the same time (a sweep over their starts and ends; an end counts after a start at the
    same sample, spans are inclusive)."""
    events = sorted([(first, 0, size) for first, _, size in spans] + [(last, 1, -size) for _, last, size in spans])
    best = total = 0
    for _, _, delta in events:
        total += delta
        best = max(best, total)
    return best


def peak_tree_members(members: list[dict[str, Any]]) -> str:
    """`python 412 + tail 2 + tail 2 MB`: the processes of the peak tree sample, largest first."""
    ranked = sorted(members, key=lambda m: -m["rss_bytes"])
    return " + ".join(f"{m['name']} {m['rss_bytes'] / MB:,.0f}" for m in ranked) + " MB"


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """`--set io.batch_rows=1024` -> {"io": {"batch_rows": 1024}} (values parsed as YAML)."""
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--set {item!r}: expected section.key=value")
        node = out
        *path, last = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[last] = yaml.safe_load(value)
    return out


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for k, v in extra.items():
        merged[k] = _merge(merged[k], v) if isinstance(v, dict) and isinstance(merged.get(k), dict) else v
    return merged


def write_config(run_dir: Path, sources: dict[str, dict[str, Any]], tokenizer: Path,
                 overrides: dict[str, Any] | None = None) -> Path:
    import yaml

    cfg = {
        "storage": {"root": str(run_dir / "data")},
        "sources": [{"name": name, "format": "jsonl", "path": s["path"]} for name, s in sources.items()],
        "cleaning": CLEANING,
        "tokenizer": {"source": "pretrained", "path": str(tokenizer)},
    }
    cfg = _merge(cfg, overrides or {})
    path = run_dir / "pipeline.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def copies_removed_as_duplicates(storage_root: Path) -> dict[str, int]:
    """Dedup's removals, and those whose kept document is a copy of the same corpus document (the
    perturbation failed to make it distinct): read from _duplicates and the cleaned parts' meta."""
    import pyarrow.parquet as pq

    dedup_dir = storage_root / "deduplicated_documents" / "_all"
    dups = pq.read_table(dedup_dir / "_duplicates.parquet", columns=["kept_id", "removed_id", "rule"])
    wanted = set(dups.column("kept_id").to_pylist()) | set(dups.column("removed_id").to_pylist())
    origin: dict[str, str] = {}
    for part in sorted((storage_root / "cleaned_documents").glob("*/part-*.parquet")):
        for batch in pq.ParquetFile(part).iter_batches(columns=["id", "meta"], batch_size=8192):
            for doc_id, meta in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True):
                if doc_id in wanted and meta:
                    origin[doc_id] = str(json.loads(meta).get("id", doc_id)).split("~")[0]
    same = sum(origin.get(k) is not None and origin.get(k) == origin.get(r)
               for k, r in zip(dups.column("kept_id").to_pylist(), dups.column("removed_id").to_pylist(), strict=True))
    rules = dups.column("rule").to_pylist()
    return {"removed": dups.num_rows, "removed_exact": rules.count("exact_duplicate"),
            "removed_near": rules.count("near_duplicate"), "removed_as_copy_of_own_original": same}


def run_scale(n: int, inputs: dict[str, Any], work: Path, tokenizer: Path, keep: bool, say=print,
              overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    info = inputs["scales"][str(n)]
    run_dir = work / "runs" / f"{Path(inputs['root']).name}-x{n}"
    shutil.rmtree(run_dir, ignore_errors=True)
    (run_dir / "dagster_home").mkdir(parents=True)
    (run_dir / "dagster_home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    config = write_config(run_dir, info["sources"], tokenizer, overrides)
    env = dict(os.environ)
    env.update({"PLATFORM_CONFIG": str(config), "DAGSTER_HOME": str(run_dir / "dagster_home"),
                "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)})
    records = []
    try:
        for asset, per_source in STAGES:
            for partition in (list(info["sources"]) if per_source else [None]):
                t = time.strftime("%H:%M:%S")
                rec = run_stage(asset, partition, run_dir, env)
                rec["input_bytes"] = info["sources"][partition]["bytes"] if partition else info["bytes"]
                records.append(rec)
                say(f"[{t} x{n}] {rec['stage']}: wall {rec['wall_seconds']:.1f} s (work {rec['work_seconds']:.1f} s), "
                    f"CPU {rec['cpu_seconds']:.1f} s (work {rec['work_cpu_seconds']:.1f} s), "
                    f"peak tree RSS {rec['peak_tree_rss_bytes'] / MB:,.0f} MB "
                    f"(PSS {rec['peak_tree_pss_bytes'] / MB:,.0f}), "
                    f"max process {rec['max_process_rss_bytes'] / MB:,.0f} MB, "
                    f"peak RSS (HWM) {(rec.get('peak_hwm_rss_bytes') or 0) / MB:,.0f} MB, "
                    f"at the tree's peak {peak_tree_members(rec['peak_tree_processes'])}, "
                    f"{len(rec['checks'])} checks passed; load {rec['loadavg_1m_at_start']:.2f}, others "
                    f"{rec['others_cpu_cores'] or 0:.2f} cores")
                if asset == "deduplicated_documents":
                    rec["duplicates"] = copies_removed_as_duplicates(run_dir / "data")
                    say(f"         dedup: {rec['duplicates']}")
    finally:
        if not keep:
            shutil.rmtree(run_dir, ignore_errors=True)
    return {"scale": n, "input_bytes": info["bytes"], "docs": info["docs"], "sources": info["sources"],
            "stages": records}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_stage"]:
        return stage_main(argv[1:])
    p = argparse.ArgumentParser(prog="python -m benchmarks.pipeline_scaling", description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help=f"JSONL corpus (default {DEFAULT_CORPUS})")
    p.add_argument("--base-mb", type=float, default=None, help="MB of the corpus that make 1x (default: all of it)")
    p.add_argument("--scales", default="1,4,16", help="comma-separated multiples of the base (default 1,4,16)")
    p.add_argument("--tokenizer", type=Path, default=GPT2_TOKENIZER_JSON, help="pretrained tokenizer.json")
    p.add_argument("--json", type=Path, help="write the full result here")
    p.add_argument("--workdir", type=Path, default=DEFAULT_WORK_ROOT,
                   help=f"inputs are cached and runs happen under <workdir>/{WORK_SUBDIR} "
                        f"(default {DEFAULT_WORK_ROOT})")
    p.add_argument("--keep", action="store_true", help="keep each scale's run directory (outputs, stage logs)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a key of the generated pipeline config (YAML value), e.g. "
                        "--set packing.strategy=streaming_best_fit; repeatable")
    a = p.parse_args(argv)
    scales = sorted({int(x) for x in a.scales.split(",")})
    if scales[0] < 1:
        p.error("scales are multiples >= 1")
    if not a.tokenizer.is_file():
        p.error(f"tokenizer {a.tokenizer} not found")
    work = a.workdir.resolve() / WORK_SUBDIR
    say = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    load_before = os.getloadavg()[0]
    base_bytes = None if a.base_mb is None else int(a.base_mb * MB)
    inputs = prepare_inputs(a.corpus.resolve(), base_bytes, scales, work / "inputs", say)
    jaccard = jaccard_check(inputs) if max(scales) > 1 else None
    if jaccard:
        say("Jaccard to the original (sample): " + "; ".join(
            f"{k} mean {v['mean']:.3f} max {v['max']:.3f}" for k, v in jaccard.items() if isinstance(v, dict)))
    overrides = parse_overrides(a.set)
    runs = [run_scale(n, inputs, work, a.tokenizer.resolve(), a.keep, say, overrides) for n in scales]
    summary = stage_summary(runs) if len(runs) > 1 else []
    result = {
        "benchmark": "pipeline_scaling", "corpus": str(a.corpus.resolve()),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "command": "python -m benchmarks.pipeline_scaling " + " ".join(argv), "overrides": overrides,
        "machine": machine_info(("platform-assets", "dagster", "pyarrow", "tokenizers", "psutil")),
        "load": {"before": load_before, "after": os.getloadavg()[0]},
        "inputs": inputs, "jaccard": jaccard, "scales": runs, "summary": summary,
        "verdict": verdict(summary) if summary else None,
    }
    print(render(result))
    if a.json:
        a.json.write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
