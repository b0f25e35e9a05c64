"""Near-dedup quality against exact Jaccard ground truth: ours (exact + near, default settings) vs
a plain datasketch MinHashLSH, at similarity thresholds 0.8 and 0.5.

Two benchmarks, one per real file set:

- `dedup_quality_py`: `--corpus` is a pyenv `versions` directory (e.g. /root/.pyenv/versions); the
  newest `DEDUP_QUALITY_PY_VERSIONS` (default 3) `*/lib/python3.*` standard libraries give their
  `.py` files: top-level only (`DEDUP_QUALITY_PY_SCOPE=top`, the default) or the whole library
  without `site-packages` and test folders (`=stdlib`). The same module across versions is the
  near-duplicate population.
- `dedup_quality_text`: `--corpus` is the shared corpus; the documents of `text_*.jsonl` from the
  sources in `DEDUP_QUALITY_SOURCES` (comma-separated; default below; `all` for every source), up
  to 200 KB each, in file order, each written to a file for the ground-truth script.

Ground truth (in `prepare`, once per run): `../shared/data/scripts/dedup_truth.py OUT NAME FILE_LIST`
(lower-cased `\\w+` tokens, exact Jaccard of word 5-gram sets for every pair sharing a shingle,
pairs with J >= 0.3 written with their intersection and union). A truth pair at threshold t is a
pair with inter/union >= t.

Each side, once per threshold t in (0.8, 0.5), runs a complete, independent dedup of the file set:

- ours: `Deduplicator(DedupSettings(near=NearSettings(threshold=t)))`, defaults otherwise (exact
  dedup on, 128 slots, LSH shaped for t - 0.2, exact verification), 8,192-row batches, documents
  ordered by id (`keep: oldest` with no timestamps: ties broken by id). In the same child, after
  the MinHash runs and timed apart, the same with `near.method: simhash` (64-bit fingerprints within
  `DEDUP_QUALITY_SIMHASH_K` bits, default 3: the stage's default), once with the default exact
  Jaccard verification ("SimHash") and once trusting the distance (`verify: none`, "SimHash,
  unverified"). Their rows are ours only (the peer column says nan): SimHash beside MinHash on the
  same ground truth. "wall time" is ours' MinHash runs only, as before; the SimHash runs have their
  own rows; peak RSS covers the whole child;
- peer: what a plain datasketch user gets: `MinHash.bulk` over the same shingles (dedup_truth.py's,
  computed in Python), `MinHashLSH(threshold=t, num_perm=128)` with datasketch's own bands/rows for t,
  and the usual greedy loop over the documents in the same order: query; a non-empty answer makes
  the document a duplicate (no verification), linked to the candidate with the highest estimated
  Jaccard (a help to the peer: any candidate would do for it); otherwise insert it.

Scores at threshold t (the same definitions for both sides):

- precision: of the links the stage reports (each removed document -> the document it was removed
  for: `DedupResult.duplicates` removed_id -> kept_id), the fraction that are truth pairs at t;
- recall (the target's): of the truth pairs at t, the fraction whose two documents end in one
  cluster (one removed for the other, or both for the same kept document): the pair was found;
- recall, resolved (the dedup outcome): of the truth pairs at t, the fraction of which at most one
  document is kept. Lower "recall" but full "resolved" means a chain: A kept, B removed for A, C
  similar to B but below t to A, so C is kept (correctly: the output holds no pair at t) and the
  pair B~C is in two clusters. The greedy pass never chains by design (see near_dedup.py);
- cluster precision (stricter, secondary): of all pairs of documents inside one output cluster, the
  fraction that are truth pairs (greedy clusters do not chain, but two members each >= t to the
  kept one may be below t to each other).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    MB,
    REPO_ROOT,
    Benchmark,
    BenchmarkError,
    Metric,
    Prepared,
    Record,
    Spec,
    Target,
    peak_rss_metric,
)

THRESHOLDS = (0.8, 0.5)
TRUTH_SCRIPT = Path(
    os.environ.get("DEDUP_TRUTH_SCRIPT", REPO_ROOT.parent / "shared/data/scripts/dedup_truth.py")
)
PY_VERSIONS_DEFAULT = 3
TEXT_SOURCES_DEFAULT = ("debian /usr/share/doc", "postgresql-doc-15", "python3.11-doc _sources", "perl-doc",
                        "fortunes")
TEXT_MAX_BYTES = 200_000  # per document: keeps the pure-Python ground truth at ~2 GB, ~30 s
NUM_PERM = 128
SEED = 1
BATCH_ROWS = 8192
_VERSION_DIR = re.compile(r"^python3\.(\d+)$")
_SKIP_DIRS = {"site-packages", "test", "tests"}


# -- inputs + ground truth (parent) ----------------------------------------------------------------
def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", name))


def python_libraries(corpus: Path, n_versions: int) -> list[Path]:
    """The newest `n_versions` `<version>/lib/python3.X` directories under `corpus`."""
    libs = [p for p in corpus.glob("*/lib/python3.*") if p.is_dir() and _VERSION_DIR.match(p.name)]
    libs.sort(key=lambda p: (_version_key(p.parent.parent.name), p.name), reverse=True)
    return sorted(libs[:n_versions], key=lambda p: _version_key(p.parent.parent.name))


def python_files(lib: Path, scope: str) -> list[Path]:
    if scope == "top":
        return sorted(p for p in lib.glob("*.py") if p.is_file())
    if scope != "stdlib":
        raise BenchmarkError(f"DEDUP_QUALITY_PY_SCOPE must be top or stdlib, not {scope!r}")
    out = []
    for dirpath, dirnames, filenames in os.walk(lib):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        out += [Path(dirpath) / f for f in filenames if f.endswith(".py")]
    return sorted(out)


def run_truth(paths: list[str], run_dir: Path, name: str) -> dict[str, Any]:
    """Run dedup_truth.py on `paths`; return its outputs' locations, stats and the id of each path."""
    if not TRUTH_SCRIPT.is_file():
        raise BenchmarkError(f"ground-truth script not found: {TRUTH_SCRIPT} (set DEDUP_TRUTH_SCRIPT)")
    out = run_dir / "truth"
    file_list = run_dir / f"{name}.files"
    file_list.write_text("".join(p + "\n" for p in paths))
    # its own process (numpy, scipy, ~2 GB of shingle tuples): the parent stays small
    proc = subprocess.run([sys.executable, str(TRUTH_SCRIPT), str(out), name, str(file_list)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise BenchmarkError(f"dedup_truth.py failed:\n{proc.stderr[-3000:]}")
    docs = []
    with open(out / f"{name}.manifest.jsonl") as f:
        for line in f:
            m = json.loads(line)
            docs.append({"id": m["id"], "path": m["path"], "n_tokens": m["n_tokens"]})
    stats = json.loads((out / f"{name}.stats.json").read_text())
    pairs = out / f"{name}.pairs.jsonl"
    truth_pairs = {}
    for t in THRESHOLDS:
        truth_pairs[str(t)] = _truth_pairs(str(pairs), t, docs)
    return {"truth_pairs_file": str(pairs), "truth_stats": stats, "docs": docs, "truth_counts": truth_pairs}


def _truth_pairs(pairs_file: str, t: float, docs: list[dict[str, Any]]) -> dict[str, int]:
    n = wordless = 0
    with open(pairs_file) as f:
        for line in f:
            p = json.loads(line)
            if p["inter"] >= t * p["union"]:
                n += 1
                wordless += docs[p["a"]]["n_tokens"] == 0 and docs[p["b"]]["n_tokens"] == 0
    return {"pairs": n, "pairs_between_wordless_docs": wordless}


def prepare_py(corpus: Path, run_dir: Path) -> Spec:
    n_versions = int(os.environ.get("DEDUP_QUALITY_PY_VERSIONS", PY_VERSIONS_DEFAULT))
    scope = os.environ.get("DEDUP_QUALITY_PY_SCOPE", "top")
    libs = python_libraries(corpus, n_versions)
    if not libs:
        raise BenchmarkError(
            f"no */lib/python3.* directories under {corpus} (pass a pyenv versions directory)"
        )
    paths = [str(p) for lib in libs for p in python_files(lib, scope)]
    spec = {"set": "python", "corpus": str(corpus), "libraries": [str(p) for p in libs], "scope": scope}
    spec.update(run_truth(paths, run_dir, "py"))
    spec["input_bytes"] = sum(Path(d["path"]).stat().st_size for d in spec["docs"])
    for d in spec["docs"]:
        d["source"] = Path(d["path"]).relative_to(corpus).parts[0]  # the Python version
    return spec


def prepare_text(corpus: Path, run_dir: Path) -> Spec:
    files = [corpus] if corpus.is_file() else sorted(corpus.glob("text_*.jsonl"))
    if not files:
        raise BenchmarkError(f"no text_*.jsonl files in {corpus}")
    raw = os.environ.get("DEDUP_QUALITY_SOURCES", ",".join(TEXT_SOURCES_DEFAULT))
    sources = None if raw.strip() == "all" else {s.strip() for s in raw.split(",") if s.strip()}
    docs_dir = run_dir / "docs"
    docs_dir.mkdir()
    paths, origin = [], {}
    for path in files:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                d = json.loads(line)
                if sources is not None and d.get("source") not in sources:
                    continue
                data = d["text"].encode("utf-8")
                if len(data) > TEXT_MAX_BYTES:
                    continue
                p = docs_dir / f"{len(paths):07d}.txt"  # sorted like the truth script sorts them
                p.write_bytes(data)
                paths.append(str(p))
                origin[str(p)] = (d.get("id"), d.get("source"))
    if len(paths) < 2:
        raise BenchmarkError(f"fewer than two documents selected from {corpus} (sources: {raw})")
    spec = {"set": "text", "corpus": str(corpus), "files": [str(p) for p in files],
            "sources": sorted(sources) if sources else "all", "max_bytes": TEXT_MAX_BYTES}
    spec.update(run_truth(paths, run_dir, "text"))
    spec["input_bytes"] = sum(Path(d["path"]).stat().st_size for d in spec["docs"])
    for d in spec["docs"]:
        d["corpus_id"], d["source"] = origin[d["path"]]
    return spec


def describe(spec: Spec) -> str:
    if spec["set"] == "python":
        versions = ", ".join(Path(p).parent.parent.name for p in spec["libraries"])
        where = f"{spec['scope']} .py files of {versions}"
    else:
        where = f"text documents of {spec['sources']} up to {spec['max_bytes']:,} B"
    counts = "; ".join(
        f"J >= {t}: {c['pairs']:,} pairs ({c['pairs_between_wordless_docs']} between documents "
        "without a word)"
        for t, c in spec["truth_counts"].items()
    )
    return f"{len(spec['docs']):,} files, {spec['input_bytes'] / MB:,.1f} MB, {where}; ground truth {counts}"


def _read_texts(spec: Spec) -> list[str]:
    out = []
    for d in spec["docs"]:
        with open(d["path"], "rb") as f:
            out.append(f.read().decode("utf-8", "replace"))  # as dedup_truth.py decodes
    return out


def _doc_key(i: int) -> str:
    return f"{i:08d}"  # string order = truth id order


# -- scoring (children, untimed) -------------------------------------------------------------------
def score(spec: Spec, t: float, links: list[tuple[int, int]], cluster: list[int]) -> dict[str, Any]:
    """Precision of the links, recall of truth pairs by co-clustering, precision over cluster pairs."""
    truth = set()
    with open(spec["truth_pairs_file"]) as f:
        for line in f:
            p = json.loads(line)
            if p["inter"] >= t * p["union"]:
                truth.add((p["a"], p["b"]))
    predicted = {(min(a, b), max(a, b)) for a, b in links}
    true_links = len(predicted & truth)
    found = sum(cluster[a] == cluster[b] for a, b in truth)
    both_kept = sum(cluster[a] == a and cluster[b] == b for a, b in truth)
    sizes = Counter(cluster)
    cluster_pairs = sum(n * (n - 1) // 2 for n in sizes.values())
    return {
        "links": len(predicted),
        "true_links": true_links,
        "precision": true_links / len(predicted) if predicted else 1.0,
        "truth_pairs": len(truth),
        "truth_pairs_found": found,
        "recall": found / len(truth) if truth else 1.0,
        "truth_pairs_both_kept": both_kept,
        "recall_resolved": 1 - both_kept / len(truth) if truth else 1.0,
        "cluster_pairs": cluster_pairs,
        "cluster_precision": found / cluster_pairs if cluster_pairs else 1.0,
        "removed": len(cluster) - len(sizes),
    }


# -- ours ------------------------------------------------------------------------------------------
SIMHASH_VARIANTS = {"simhash": {"method": "simhash"}, "simhash_unverified": {"method": "simhash", "verify": "none"}}


def simhash_k() -> int:
    return int(os.environ.get("DEDUP_QUALITY_SIMHASH_K", "3"))


def run_ours(spec: Spec, run_dir: Path) -> Prepared:
    import time

    import pyarrow as pa

    from platform_assets.dedup.deduplicator import Deduplicator
    from platform_assets.dedup.settings import DedupSettings, NearSettings

    texts = _read_texts(spec)
    ids = [_doc_key(d["id"]) for d in spec["docs"]]
    table = pa.table({
        "id": pa.array(ids, pa.string()),
        "source": pa.array([d["source"] for d in spec["docs"]], pa.string()),
        "text": pa.array(texts, pa.large_string()),
        "ingested_at": pa.nulls(len(ids), pa.timestamp("ms", tz="UTC")),
    })
    del texts
    settings = {t: DedupSettings(near=NearSettings(threshold=t)) for t in THRESHOLDS}
    max_distance = simhash_k()
    variants = {name: {t: DedupSettings(near=NearSettings(threshold=t, **near, simhash={"max_distance": max_distance}))
                       for t in THRESHOLDS} for name, near in SIMHASH_VARIANTS.items()}
    Deduplicator(settings[THRESHOLDS[0]]).add_batch(table.slice(0, 8))  # one-off tables, untimed

    def run(by_threshold):
        out = {}
        for t in THRESHOLDS:
            dedup = Deduplicator(by_threshold[t])
            for batch in table.to_batches(max_chunksize=BATCH_ROWS):
                dedup.add_batch(batch)
            out[t] = dedup.finish()
        return out

    def work():
        start = time.perf_counter()
        out = {"minhash": run(settings)}
        seconds = {"minhash": time.perf_counter() - start}
        for name, by_threshold in variants.items():
            start = time.perf_counter()
            out[name] = run(by_threshold)
            seconds[name] = time.perf_counter() - start
        return out, seconds

    def scored(results) -> dict[str, Any]:
        measured: dict[str, Any] = {}
        for t, result in results.items():
            dup = result.duplicates
            removed = [int(x) for x in dup["removed_id"].to_pylist()]
            kept = [int(x) for x in dup["kept_id"].to_pylist()]
            cluster = list(range(len(ids)))
            for r, k in zip(removed, kept, strict=True):
                cluster[r] = k
            measured[str(t)] = score(spec, t, list(zip(removed, kept, strict=True)), cluster)
            measured[str(t)]["counts"] = result.counts.as_dict()
        return measured

    def finish(done) -> dict[str, Any]:
        results, seconds = done
        measured = scored(results["minhash"])
        measured["minhash_seconds"] = seconds["minhash"]
        measured["simhash_max_distance"] = max_distance
        for name in SIMHASH_VARIANTS:
            measured[name] = scored(results[name])
            measured[f"{name}_seconds"] = seconds[name]
        return measured

    return Prepared(work, finish)


# -- peer ------------------------------------------------------------------------------------------
def truth_shingles(text: str, k: int = 5) -> set[bytes]:
    """dedup_truth.py's shingle set, as UTF-8 bytes (a document without a word: the empty shingle)."""
    toks = re.findall(r"\w+", text.lower())
    if len(toks) >= k:
        return {" ".join(toks[j : j + k]).encode() for j in range(len(toks) - k + 1)}
    return {" ".join(toks).encode()}


def run_peer(spec: Spec, run_dir: Path) -> Prepared:
    from datasketch import MinHash, MinHashLSH

    texts = _read_texts(spec)
    keys = [_doc_key(d["id"]) for d in spec["docs"]]
    order = sorted(range(len(keys)), key=keys.__getitem__)  # ours' order: id ascending
    for t in THRESHOLDS:
        MinHashLSH(threshold=t, num_perm=NUM_PERM)  # datasketch's shape optimiser: one-off, untimed

    def work():
        out = {}
        for t in THRESHOLDS:
            sigs = []
            for b0 in range(0, len(texts), BATCH_ROWS):
                shingles = [truth_shingles(x) for x in texts[b0 : b0 + BATCH_ROWS]]
                sigs += MinHash.bulk(shingles, num_perm=NUM_PERM, seed=SEED)
            lsh = MinHashLSH(threshold=t, num_perm=NUM_PERM)
            links: list[tuple[int, int]] = []
            for i in order:
                cand = lsh.query(sigs[i])
                if cand:
                    best = max(cand, key=lambda c: (sigs[i].jaccard(sigs[c]), -c))
                    links.append((i, best))
                else:
                    lsh.insert(i, sigs[i], check_duplication=False)
            out[t] = (links, (lsh.b, lsh.r))
        return out

    def finish(results) -> dict[str, Any]:
        measured = {}
        for t, (links, shape) in results.items():
            cluster = list(range(len(keys)))
            for r, k in links:  # greedy: every target is an accepted document, so one level
                cluster[r] = k
            measured[str(t)] = score(spec, t, links, cluster)
            measured[str(t)]["counts"] = {"lsh_bands": shape[0], "lsh_rows": shape[1]}
        return measured

    return Prepared(work, finish)


def check(ours: Record, peer: Record) -> None:
    for t in THRESHOLDS:
        a, b = ours[str(t)]["truth_pairs"], peer[str(t)]["truth_pairs"]
        if a != b:
            raise BenchmarkError(f"the sides read different ground truths at {t}: {a} vs {b} pairs")
        for name in SIMHASH_VARIANTS:
            if ours[name][str(t)]["truth_pairs"] != a:
                raise BenchmarkError(f"{name} was scored against another ground truth at {t}")


def f1(scores: dict[str, Any]) -> float:
    """Harmonic mean of precision and (strict) recall."""
    p, r = scores["precision"], scores["recall"]
    return 2 * p * r / (p + r) if p + r else 0.0


def _ours_only(name: str, field: str, t: float | None = None):
    """A figure of the SimHash runs (ours' record only; the peer's is nan)."""
    def value(r: Record, s: Spec) -> float:
        if name not in r:
            return float("nan")
        scores = r[name][str(t)]
        return f1(scores) if field == "f1" else scores[field]
    return value


def _simhash_metrics() -> list[Metric]:
    out: list[Metric] = []
    for name, label in (("simhash", "SimHash"), ("simhash_unverified", "SimHash, unverified")):
        for t in THRESHOLDS:
            out += [
                Metric(f"{label} precision @{t}", "", None, _ours_only(name, "precision", t), "{:.4f}"),
                Metric(f"{label} recall @{t}", "", None, _ours_only(name, "recall", t), "{:.4f}"),
                Metric(f"{label} recall, resolved @{t}", "", None, _ours_only(name, "recall_resolved", t),
                       "{:.4f}"),
                Metric(f"{label} F1 @{t}", "", None, _ours_only(name, "f1", t), "{:.4f}"),
                Metric(f"{label} documents removed @{t}", "", None, _ours_only(name, "removed", t), "{:,.0f}"),
            ]
        out.append(Metric(f"{label} wall time", "s", None,
                          lambda r, s, n=name: r.get(f"{n}_seconds", float("nan")), "{:,.2f}"))
    return out


def _metrics() -> tuple[Metric, ...]:
    out: list[Metric] = []
    for t in THRESHOLDS:
        k = str(t)
        out += [
            Metric(f"precision @{t}", "", True, lambda r, s, k=k: r[k]["precision"], "{:.4f}"),
            Metric(f"recall @{t}", "", True, lambda r, s, k=k: r[k]["recall"], "{:.4f}"),
            Metric(f"F1 @{t}", "", True, lambda r, s, k=k: f1(r[k]), "{:.4f}"),
            Metric(f"recall, resolved @{t}", "", True, lambda r, s, k=k: r[k]["recall_resolved"], "{:.4f}"),
            Metric(f"cluster precision @{t}", "", True, lambda r, s, k=k: r[k]["cluster_precision"],
                   "{:.4f}"),
            Metric(f"truth pairs @{t}", "", None, lambda r, s, k=k: r[k]["truth_pairs"], "{:,.0f}",
                   must_match=True),
            Metric(f"links (removed -> matched) @{t}", "", None, lambda r, s, k=k: r[k]["links"], "{:,.0f}"),
            Metric(f"false links @{t}", "", False, lambda r, s, k=k: r[k]["links"] - r[k]["true_links"],
                   "{:,.0f}"),
            Metric(f"truth pairs in two clusters @{t}", "", False,
                   lambda r, s, k=k: r[k]["truth_pairs"] - r[k]["truth_pairs_found"], "{:,.0f}"),
            Metric(f"truth pairs both kept @{t}", "", False, lambda r, s, k=k: r[k]["truth_pairs_both_kept"],
                   "{:,.0f}"),
            Metric(f"documents removed @{t}", "", None, lambda r, s, k=k: r[k]["removed"], "{:,.0f}"),
        ]
    # ours' work also runs SimHash (timed apart): the comparable time is its MinHash runs
    wall = Metric("wall time", "s", False, lambda r, s: r.get("minhash_seconds", r["seconds"]), "{:,.2f}")
    return (*out, wall, *_simhash_metrics(), peak_rss_metric())


TARGETS = tuple(
    Target(f"{m} @{t}", f"{m} at threshold {t} >= 0.95", min_ours=0.95)
    for t in THRESHOLDS for m in ("precision", "recall")
)
OURS_LABEL = ("platform_assets.dedup.Deduplicator, default settings but the threshold (exact dedup, 128-slot "
              "one-permutation MinHash, LSH tuned for t - 0.2, exact verification); SimHash rows: the same "
              "with near.method simhash (max_distance DEDUP_QUALITY_SIMHASH_K, default 3), with and without "
              "exact verification")
PEER_LABEL = ("datasketch MinHash.bulk (num_perm=128) + MinHashLSH(threshold=t) with its default bands x "
              "rows, greedy query-then-insert in id order, no verification")


def _bench(name: str, prepare, what: str) -> Benchmark:
    return Benchmark(
        name=name,
        description=f"near-dedup precision/recall vs exact Jaccard ground truth at J >= 0.8 and 0.5 ({what})",
        ours_label=OURS_LABEL,
        peer_label=PEER_LABEL,
        prepare=prepare,
        ours=run_ours,
        peer=run_peer,
        metrics=_metrics(),
        packages=("platform-assets", "datasketch", "numpy", "scipy"),
        check=check,
        targets=TARGETS,
        describe=describe,
    )


BENCHMARKS = (
    _bench("dedup_quality_py", prepare_py, "stdlib .py files of several Python versions"),
    _bench("dedup_quality_text", prepare_text, "text documents of the shared corpus"),
)
