"""The whole dedup stage on the real corpus at 25%, 50% and 100% of it: time, docs/s, peak RSS.

Three benchmarks, `dedup_scaling_25`, `dedup_scaling_50`, `dedup_scaling_100` (one per size, so each
size runs in fresh processes and has its own peak RSS), and a runner that does the three in one go
and prints the scaling table (time ratio 100%/25%: ~4 when linear):

    .venv/bin/python -m benchmarks.dedup_scaling --corpus /work/corpus [--repeat N] [--json OUT]

Input: every `*.jsonl` of the corpus (text and code). A size keeps the documents whose
crc32(id) mod 4 < 1, 2, 4: nested, every source at the same rate. `prepare` writes them once as the
stage's input, `cleaned_documents/text` and `cleaned_documents/code` partitions of Parquet parts
(the document schema, zstd, 8,192-row row groups), in a subprocess so the parent stays small; each
side's run directory gets hard links to them.

- ours: `platform_assets.dedup.stage.deduplicate_outputs` with default `DedupSettings()` (the asset's
  body): pass 1 streams the parts (id, source, text, ingested_at) into `Deduplicator.add_batch`,
  `finish()` (exact groups, the greedy LSH pass with exact verification), pass 2 streams the parts
  again and writes the kept documents (zstd parts) plus _exclusions, _duplicates and _signatures.
- peer: the same stage written with datasketch, as a user would: pass 1 streams (id, text), shingles
  in Python (dedup_truth.py's word 5-grams), `MinHash.bulk` per 256 documents (8,192 documents of
  sets of Python bytes would take GBs), `MinHashLSH(threshold=0.8, num_perm=128)` (its own shape),
  query-then-insert, no verification, no exact stage; pass 2 streams the parts again and writes the
  documents not removed (zstd).

Docs/s = documents in / wall seconds of the work. The input is read from the page cache (prepare
has just written it).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    DEFAULT_WORK_ROOT,
    MB,
    REPO_ROOT,
    Benchmark,
    BenchmarkError,
    Metric,
    Prepared,
    Record,
    Spec,
    Target,
    cpu_seconds_metric,
    get_benchmark,
    peak_rss_metric,
    run_benchmark,
    work_seconds_metric,
)
from benchmarks.report import render_report

SIZES = (25, 50, 100)  # percent of the corpus
PATTERN = "*.jsonl"
UPSTREAM = "cleaned_documents"
OUT_REL = "deduplicated_documents/_all"
ROW_GROUP = 8192
PEER_CHUNK = 256  # documents per MinHash.bulk call
NUM_PERM = 128
THRESHOLD = 0.8
RSS_LIMIT_MB = 4000.0
NEAR_LINEAR_MAX = 5.0  # time(100%) / time(25%): 4 is linear; up to 25% above it counts as near-linear


def corpus_files(corpus: Path) -> list[Path]:
    return [corpus] if corpus.is_file() else sorted(corpus.glob(PATTERN))


def selected(doc_id: str, percent: int) -> bool:
    return zlib.crc32(doc_id.encode("utf-8")) % 4 < percent // 25


def _partition(path: Path, doc: dict[str, Any]) -> str:
    kind = doc.get("kind") or path.name.split("_")[0]
    return "code" if kind == "code" else "text"


def write_input(files: list[str], root: str, percent: int) -> dict[str, Any]:
    """Child process: the selected documents as Parquet parts under root/cleaned_documents/<part>/."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from platform_assets.schema import DOCUMENTS_SCHEMA

    writers: dict[str, pq.ParquetWriter] = {}
    buffers: dict[str, list[dict[str, Any]]] = {}
    stats = {"docs": 0, "text_bytes": 0, "jsonl_bytes": 0, "per_partition": {}}

    def flush(part: str) -> None:
        rows = buffers.pop(part, [])
        if not rows:
            return
        if part not in writers:
            d = Path(root) / UPSTREAM / part
            d.mkdir(parents=True, exist_ok=True)
            writers[part] = pq.ParquetWriter(str(d / "part-00000.parquet"), DOCUMENTS_SCHEMA,
                                             compression="zstd")
        table = pa.Table.from_pylist(rows, schema=DOCUMENTS_SCHEMA)
        writers[part].write_table(table, row_group_size=ROW_GROUP)

    for name in files:
        path = Path(name)
        with open(path, "rb") as f:
            for line in f:
                if not line.strip():
                    continue
                doc = json.loads(line)
                if not isinstance(doc.get("text"), str) or not selected(str(doc["id"]), percent):
                    continue
                part = _partition(path, doc)
                buffers.setdefault(part, []).append({
                    "id": str(doc["id"]), "source": str(doc.get("source") or part), "text": doc["text"],
                    "modality": "text", "uri": str(doc.get("path") or f"{path}#{doc['id']}"),
                    "license": None, "meta": None, "ingested_at": None,
                })
                stats["docs"] += 1
                stats["text_bytes"] += len(doc["text"].encode("utf-8"))
                stats["jsonl_bytes"] += len(line)
                stats["per_partition"][part] = stats["per_partition"].get(part, 0) + 1
                if len(buffers[part]) >= ROW_GROUP:
                    flush(part)
    for part in list(buffers):
        flush(part)
    for w in writers.values():
        w.close()
    stats["partitions"] = sorted(writers)
    return stats


def _make_prepare(percent: int):
    def prepare(corpus: Path, run_dir: Path) -> Spec:
        files = corpus_files(corpus)
        if not files:
            raise BenchmarkError(f"no {PATTERN} files in {corpus}")
        root = run_dir / "input"
        code = ("import json, sys; from benchmarks.dedup_scaling import write_input; "
                "print(json.dumps(write_input(json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3]))))")
        proc = subprocess.run([sys.executable, "-c", code, json.dumps([str(f) for f in files]), str(root),
                               str(percent)], cwd=REPO_ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BenchmarkError(f"writing the input failed:\n{proc.stderr[-3000:]}")
        stats = json.loads(proc.stdout.strip().splitlines()[-1])
        if not stats["docs"]:
            raise BenchmarkError(f"no document selected from {corpus} at {percent}%")
        return {"corpus": str(corpus), "files": [str(f) for f in files], "percent": percent,
                "input_root": str(root), **stats}

    return prepare


def describe(spec: Spec) -> str:
    parts = ", ".join(f"{k} {v:,}" for k, v in spec["per_partition"].items())
    return (f"{spec['percent']}% of {len(spec['files'])} files: {spec['docs']:,} documents ({parts}), "
            f"{spec['text_bytes'] / MB:,.1f} MB of text ({spec['jsonl_bytes'] / MB:,.1f} MB of JSONL)")


def _link_input(spec: Spec, store: Path) -> list[str]:
    """Hard links to the prepared parts in this side's own storage root (no copy, no shared outputs)."""
    rels = []
    for part in spec["partitions"]:
        src = Path(spec["input_root"]) / UPSTREAM / part
        dst = store / UPSTREAM / part
        dst.mkdir(parents=True)
        for f in sorted(src.iterdir()):
            (dst / f.name).hardlink_to(f)
        rels.append(f"{UPSTREAM}/{part}")
    return rels


# -- ours ------------------------------------------------------------------------------------------
def run_ours(spec: Spec, run_dir: Path) -> Prepared:
    from platform_assets.dedup.settings import DedupSettings
    from platform_assets.dedup.stage import deduplicate_outputs
    from platform_assets.storage import Storage

    store = run_dir / "store"
    inputs = _link_input(spec, store)
    storage = Storage(str(store))
    settings = DedupSettings()

    def work():
        return deduplicate_outputs(storage, inputs, OUT_REL, settings)

    def finish(stage) -> dict[str, Any]:
        counts = stage.result.counts.as_dict()
        return {"docs_in": stage.rows_in, "docs_out": stage.rows_out,
                "removed_exact": counts["removed_exact"], "removed_near": counts["removed_near"],
                "counts": counts,
                "output_bytes": sum(f.stat().st_size for f in (store / OUT_REL).iterdir())}

    return Prepared(work, finish)


# -- peer ------------------------------------------------------------------------------------------
def run_peer(spec: Spec, run_dir: Path) -> Prepared:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from datasketch import MinHash, MinHashLSH

    from benchmarks.dedup_quality import truth_shingles

    store = run_dir / "store"
    parts = [store / rel / "part-00000.parquet" for rel in _link_input(spec, store)]
    out_dir = run_dir / "out"
    MinHashLSH(threshold=THRESHOLD, num_perm=NUM_PERM)  # the shape optimiser: one-off, untimed

    def work():
        lsh = MinHashLSH(threshold=THRESHOLD, num_perm=NUM_PERM)
        removed: list[str] = []
        docs_in = 0
        for path in parts:  # pass 1: signatures, query-then-insert
            for batch in pq.ParquetFile(path).iter_batches(batch_size=ROW_GROUP, columns=["id", "text"]):
                ids, texts = batch.column(0).to_pylist(), batch.column(1).to_pylist()
                docs_in += len(ids)
                for c0 in range(0, len(ids), PEER_CHUNK):
                    shingles = [truth_shingles(t) for t in texts[c0 : c0 + PEER_CHUNK]]
                    sigs = MinHash.bulk(shingles, num_perm=NUM_PERM)
                    for key, m in zip(ids[c0 : c0 + PEER_CHUNK], sigs, strict=True):
                        if lsh.query(m):
                            removed.append(key)
                        else:
                            lsh.insert(key, m, check_duplication=False)
        gone = pa.array(removed, pa.string())
        out_dir.mkdir()
        docs_out = 0
        for i, path in enumerate(parts):  # pass 2: write what was not removed
            pf = pq.ParquetFile(path)
            out = str(out_dir / f"part-{i:05d}.parquet")
            with pq.ParquetWriter(out, pf.schema_arrow, compression="zstd") as w:
                for batch in pf.iter_batches(batch_size=ROW_GROUP):
                    kept = batch.filter(pc.invert(pc.is_in(batch.column("id"), value_set=gone)))
                    docs_out += kept.num_rows
                    w.write_batch(kept)
        return docs_in, docs_out, len(removed), (lsh.b, lsh.r)

    def finish(out) -> dict[str, Any]:
        docs_in, docs_out, removed, shape = out
        return {"docs_in": docs_in, "docs_out": docs_out, "removed_exact": 0, "removed_near": removed,
                "lsh_shape": list(shape), "output_bytes": sum(f.stat().st_size for f in out_dir.iterdir())}

    return Prepared(work, finish)


def check(ours: Record, peer: Record) -> None:
    if ours["docs_in"] != peer["docs_in"]:
        raise BenchmarkError(f"documents in differ: ours {ours['docs_in']:,}, peer {peer['docs_in']:,}")


METRICS = (
    Metric("docs/s", "docs/s wall", True, lambda r, s: r["docs_in"] / r["seconds"], "{:,.0f}"),
    Metric("throughput", "MB of text/s", True, lambda r, s: s["text_bytes"] / MB / r["seconds"], "{:,.1f}"),
    work_seconds_metric(),
    cpu_seconds_metric(),
    Metric("cores used", "CPU s / wall s", None, lambda r, s: r["cpu_seconds"] / r["seconds"], "{:.2f}"),
    peak_rss_metric(),
    Metric("docs in", "", None, lambda r, s: r["docs_in"], "{:,.0f}", must_match=True),
    Metric("docs out", "", None, lambda r, s: r["docs_out"], "{:,.0f}"),
    Metric("removed as exact duplicates", "", None, lambda r, s: r["removed_exact"], "{:,.0f}"),
    Metric("removed as near duplicates", "", None, lambda r, s: r["removed_near"], "{:,.0f}"),
)


def _bench(percent: int) -> Benchmark:
    return Benchmark(
        name=f"dedup_scaling_{percent}",
        description=f"the whole dedup stage (exact + near, two passes, outputs written) on {percent}% of the "
                    "corpus",
        ours_label="platform_assets.dedup.stage.deduplicate_outputs, default DedupSettings (threshold 0.8, "
                   "exact verification)",
        peer_label="datasketch MinHash.bulk (Python word 5-grams) + MinHashLSH(threshold=0.8) "
                   "query-then-insert, no verification; second pass writes the kept documents (zstd)",
        prepare=_make_prepare(percent),
        ours=run_ours,
        peer=run_peer,
        metrics=METRICS,
        packages=("platform-assets", "pyarrow", "numpy", "datasketch"),
        check=check,
        targets=(Target("peak RSS", f"peak RSS under 4 GB ({RSS_LIMIT_MB:,.0f} MB)", max_ours=RSS_LIMIT_MB),),
        describe=describe,
    )


BENCHMARKS = tuple(_bench(p) for p in SIZES)


# -- the scaling runner ----------------------------------------------------------------------------
def scaling_table(results: dict[int, dict[str, Any]]) -> str:
    def fig(result: dict[str, Any], metric: str, side: str) -> float:
        return next(r[side] for r in result["summary"] if r["metric"] == metric)

    lines = ["| size | docs | MB of text | ours s | ours docs/s | ours peak RSS MB | peer s | peer docs/s | "
             "peer peak RSS MB |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p, res in sorted(results.items()):
        spec = res["spec"]
        lines.append(
            f"| {p}% | {spec['docs']:,} | {spec['text_bytes'] / MB:,.1f} | "
            f"{fig(res, 'wall time', 'ours'):,.2f} | "
            f"{fig(res, 'docs/s', 'ours'):,.0f} | {fig(res, 'peak RSS', 'ours'):,.0f} | "
            f"{fig(res, 'wall time', 'peer'):,.2f} | {fig(res, 'docs/s', 'peer'):,.0f} | "
            f"{fig(res, 'peak RSS', 'peer'):,.0f} |")
    lo, hi = min(results), max(results)
    if lo != hi:
        size_ratio = results[hi]["spec"]["docs"] / results[lo]["spec"]["docs"]
        for side in ("ours", "peer"):
            ratio = fig(results[hi], "wall time", side) / fig(results[lo], "wall time", side)
            bar = NEAR_LINEAR_MAX * size_ratio / 4
            verdict = "near-linear" if ratio <= bar else "NOT near-linear"
            lines.append(f"\n{side}: time {hi}% / {lo}% = {ratio:.2f}x for {size_ratio:.2f}x the documents "
                         f"({verdict}: linear is {size_ratio:.2f}x; the bar is {bar:.2f}x)")
    if hi in results:
        rss = fig(results[hi], "peak RSS", "ours")
        lines.append(f"\nours: peak RSS at {hi}% {rss:,.0f} MB: {'MET' if rss < RSS_LIMIT_MB else 'NOT MET'} "
                     f"(< {RSS_LIMIT_MB:,.0f} MB)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.dedup_scaling",
                                description="dedup_scaling_25/50/100 in one go, then the scaling table")
    p.add_argument("--corpus", required=True, type=Path)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--sizes", default=",".join(map(str, SIZES)))
    p.add_argument("--json", type=Path)
    p.add_argument("--workdir", type=Path, default=DEFAULT_WORK_ROOT)
    a = p.parse_args(argv)
    results = {}
    for percent in (int(x) for x in a.sizes.split(",")):
        bench = get_benchmark(f"dedup_scaling_{percent}")
        res = run_benchmark(bench, a.corpus.resolve(), a.repeat, a.workdir.resolve(),
                            progress=lambda msg: print(msg, file=sys.stderr, flush=True))
        print(render_report(bench, res["spec"], res) + "\n", flush=True)
        results[percent] = res
    print(scaling_table(results))
    if a.json:
        a.json.write_text(json.dumps({str(k): v for k, v in results.items()}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
