"""Raw JSONL -> packed token shards, whole pipeline, one core: ours vs datatrove (issue #13).

    .venv/bin/python -m benchmarks run pipeline_end_to_end      (E2E_BENCH_MB: input size, default 32)

Input: an even sample of the real corpus (`*.jsonl` beside the checkout, or the corpus argument):
E2E_BENCH_MB MB of JSONL lines, per source (`text_*`, `code_*`) in proportion to its size, the lines
with the smallest crc32 first (`scaled_corpus.prepare_inputs` at 1x, as pipeline_scaling uses it).
Both sides read the same bytes.

ours: the main graph from raw_documents to packed_shards with the defaults, exactly as
pipeline_scaling runs it (its `run_scale`: its config builder with the two sources, the sample's
cleaning recipe, the GPT-2 tokenizer.json as a pretrained tokenizer; each asset in a fresh process via
`dagster.materialize`). Ours does more than the peer: quarantine, language ID, exact + near dedup with
exact-Jaccard verification, train/val/test splits, every asset check, manifests and Parquet/Lance
outputs, and Dagster's per-process definitions loading (~4-9 s per stage, 9 stages); none removed.

peer: datatrove's LocalPipelineExecutor, tasks=1 workers=1, four pipelines run in order:
 1. JsonlReader (one per source) -> GopherRepetitionFilter -> GopherQualityFilter -> C4QualityFilter
    -> FineWebQualityFilter -> JsonlWriter (the kept documents, uncompressed) -> MinhashDedupSignature
 2. MinhashDedupBuckets (tasks = bands: datatrove requires one task per band; still workers=1)   3. MinhashDedupCluster
 4. JsonlReader (the kept documents) -> MinhashDedupFilter -> DocumentTokenizer (GPT-2 from the
    local tokenizer.json: datatrove's load_tokenizer takes a file path; EOS after each document).
The filters and the signature step use the offline nltk tokenizer of cleaning_quality_rules (untrained
Punkt: no download; datatrove's default English tokenizer for MinHash needs spacy, not installed).
MinHash: n_grams = our shingle size (5), buckets x hashes = our LSH shape (bands x rows, from
platform_assets.dedup's defaults), seed 1. Differences: datatrove shingles normalised words with
xxhash64 (str encoded as UTF-8, see `_xxhash_accepts_str`), ours lower-cased \\w tokens with one-permutation
hashing and verifies candidates by exact Jaccard; datatrove has no language ID stage.

Measured the same way for both (the harness): CPU = user + sys of the side's whole process tree
(every stage process ours spawns is reaped by its parent, so it is in RUSAGE_CHILDREN); peak RSS =
ru_maxrss of wait4, the largest single process of the tree; the machine's load at the start and the
cores other processes used. MB per CPU-second = input MB / CPU s. Target: ours >= 20x datatrove.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    GPT2_TOKENIZER_JSON,
    MB,
    REPO_ROOT,
    Benchmark,
    Metric,
    Prepared,
    Spec,
    Target,
    cpu_seconds_metric,
    peak_rss_metric,
    work_seconds_metric,
)

DEFAULT_MB = 32.0  # both sides finish in a few minutes on one core
TARGET_RATIO = 20.0
EOS = "<|endoftext|>"


def tokenizer_path() -> Path:
    return Path(os.environ.get("E2E_TOKENIZER", str(GPT2_TOKENIZER_JSON)))


def ours_lsh_shape() -> dict[str, int]:
    """Our near-dedup defaults (shingle size, bands, rows, seed), read in a throwaway process so the
    parent stays free of heavy imports (its RSS would be inherited by each child's ru_maxrss)."""
    code = ("import json; from platform_assets.dedup.settings import NearSettings; "
            "from platform_assets.dedup.lsh_index import lsh_shape; s = NearSettings(); b, r = lsh_shape(s); "
            "print(json.dumps({'shingle_size': s.shingles.size, 'bands': b, 'rows': r, 'seed': s.seed}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def prepare(corpus: Path, run_dir: Path) -> Spec:
    from benchmarks.scaled_corpus import prepare_inputs

    mb = float(os.environ.get("E2E_BENCH_MB", DEFAULT_MB))
    inputs = prepare_inputs(corpus, int(mb * MB), [1], run_dir / "inputs", say=lambda _m: None)
    info = inputs["scales"]["1"]
    tok = tokenizer_path()
    if not tok.is_file():
        raise SystemExit(f"tokenizer {tok} not found (set E2E_TOKENIZER)")
    return {"inputs": inputs, "sources": {k: {"path": v["path"], "bytes": v["bytes"]}
                                          for k, v in info["sources"].items()},
            "input_bytes": info["bytes"], "docs": info["docs"], "tokenizer": str(tok),
            "minhash": ours_lsh_shape()}


# -- ours ------------------------------------------------------------------------------------------
def run_ours(spec: Spec, run_dir: Path) -> Prepared:
    from benchmarks import pipeline_scaling

    def work() -> dict[str, Any]:
        result = pipeline_scaling.run_scale(1, spec["inputs"], run_dir, Path(spec["tokenizer"]), keep=False,
                                            say=lambda _m: None)
        stages = {rec["stage"]: rec for rec in result["stages"]}
        return {"documents_kept": int(stages["deduplicated_documents"]["metadata"]["rows"]),
                "tokens_written": int(stages["tokenized_documents"]["metadata"]["tokens"]),
                "stages": [{k: rec.get(k) for k in ("stage", "wall_seconds", "cpu_seconds",
                                                     "max_process_rss_bytes", "metadata")}
                           for rec in result["stages"]]}

    return Prepared(work)


# -- peer: datatrove -------------------------------------------------------------------------------
def _xxhash_accepts_str() -> None:
    """datatrove's default MinHash hash (xxhash64) passes str to xxhash, which the installed xxhash
    (3.x) refuses ("Strings must be encoded before hashing"); older xxhash encoded str as UTF-8
    itself. Restore that here rather than switch to datatrove's sha1 option, which is slower and
    would flatter ours."""
    import xxhash
    from datatrove.utils.hashes import xxhash as dt_xxhash

    try:
        xxhash.xxh64_intdigest("probe")
    except TypeError:
        dt_xxhash.xxhash64 = lambda data: xxhash.xxh64_intdigest(data.encode() if isinstance(data, str) else data)
        dt_xxhash.xxhash32 = lambda data: xxhash.xxh32_intdigest(data.encode() if isinstance(data, str) else data)


def run_peer(spec: Spec, run_dir: Path) -> Prepared:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup import (
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.dedup.minhash import MinhashConfig
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.tokens import DocumentTokenizer
    from datatrove.pipeline.writers import JsonlWriter

    from benchmarks.cleaning_quality_rules import datatrove_filters, offline_nltk_tokenizer

    _xxhash_accepts_str()
    mh = spec["minhash"]
    config = MinhashConfig(n_grams=mh["shingle_size"], num_buckets=mh["bands"], hashes_per_bucket=mh["rows"],
                           seed=mh["seed"])
    d = run_dir
    readers = [JsonlReader(src["path"], glob_pattern="*.jsonl", id_key="id", text_key="text")
               for src in spec["sources"].values()]
    steps = [
        [*readers, *datatrove_filters("gopher"), JsonlWriter(str(d / "kept"), compression=None),
         MinhashDedupSignature(output_folder=str(d / "sigs"), config=config,
                               language=offline_nltk_tokenizer())],
        [MinhashDedupBuckets(input_folder=str(d / "sigs"), output_folder=str(d / "buckets"), config=config)],
        [MinhashDedupCluster(input_folder=str(d / "buckets"), output_folder=str(d / "remove_ids"), config=config)],
        [JsonlReader(str(d / "kept"), glob_pattern="*.jsonl"),
         MinhashDedupFilter(input_folder=str(d / "remove_ids")),
         DocumentTokenizer(output_folder=str(d / "tokens"), tokenizer_name_or_path=spec["tokenizer"],
                           eos_token=EOS)],
    ]
    # MinhashDedupBuckets asserts tasks % num_buckets == 0 (one task per band): bands tasks, run one
    # after another by the single worker; every other step is one task
    tasks = [1, mh["bands"], 1, 1]
    executors = [LocalPipelineExecutor(pipeline=p, tasks=tasks[i], workers=1, logging_dir=str(d / f"logs{i}"))
                 for i, p in enumerate(steps)]

    def work() -> None:
        for ex in executors:
            ex.run()

    def finish(_: None) -> dict[str, Any]:
        # DocumentTokenizer's output: uint16 tokens (.ds) and one uint64 end offset per document (.ds.index)
        ds = sorted((d / "tokens").rglob("*.ds"))
        index = sorted((d / "tokens").rglob("*.ds.index"))
        if not ds or not index:
            raise RuntimeError(f"datatrove wrote no token files under {d / 'tokens'}")
        return {"documents_kept": sum(p.stat().st_size for p in index) // 8,
                "tokens_written": sum(p.stat().st_size for p in ds) // 2}

    return Prepared(work, finish)


def _mb_per_cpu_s(r: dict[str, Any], s: Spec) -> float:
    return s["input_bytes"] / MB / r["cpu_seconds"]


BENCHMARK = Benchmark(
    name="pipeline_end_to_end",
    description="raw JSONL -> packed token shards on one core, whole pipeline (issue #13)",
    ours_label="main graph raw_documents -> packed_shards, defaults (one process per asset via dagster.materialize;"
               " does more: language ID, splits, checks, manifests)",
    peer_label="datatrove LocalPipelineExecutor tasks=1 workers=1: JsonlReader -> Gopher/C4/FineWeb filters -> "
               "MinHash signature/buckets/cluster/filter -> DocumentTokenizer (GPT-2, local file)",
    prepare=prepare,
    ours=run_ours,
    peer=run_peer,
    metrics=(
        Metric("input", "MB", None, lambda r, s: s["input_bytes"] / MB, "{:,.1f}", must_match=True),
        cpu_seconds_metric(),
        Metric("throughput per core", "MB per CPU-s", True, _mb_per_cpu_s, "{:,.3f}"),
        work_seconds_metric(),
        peak_rss_metric(),
        Metric("documents kept", "", None, lambda r, s: r["documents_kept"], "{:,.0f}"),
        Metric("tokens written", "", None, lambda r, s: r["tokens_written"], "{:,.0f}"),
    ),
    packages=("platform-assets", "dagster", "datatrove", "nltk", "tokenizers"),
    targets=(Target("throughput per core", f"MB per CPU-second at least {TARGET_RATIO:g}x datatrove's",
                    min_ratio=TARGET_RATIO),),
    env={"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "RAYON_NUM_THREADS": "1",
         "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
         "NLTK_DATA": "{run_dir}/nltk_data"},
    describe=lambda s: f"{s['input_bytes'] / MB:,.1f} MB, {s['docs']:,} documents, sources {sorted(s['sources'])}",
)
