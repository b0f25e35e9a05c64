"""MinHash signatures of ~2 KB documents on one core: ours vs datasketch `MinHash.bulk`, ours vs rensa.

Two benchmarks (the harness compares ours with one peer at a time), same input, same parameters:

- `minhash_signatures_datasketch`: peer `datasketch.MinHash.bulk(shingle_sets, num_perm=128, seed=1)`;
- `minhash_signatures_rensa`: peer `rensa.RMinHash.digest_matrix_from_token_sets(shingle_lists,
  num_perm=128, seed=1)` (full-set R-MinHash, rensa's bulk API: one call per batch, no Python object
  per document; not the sampling "rho" pipeline, which skips tokens).

Input: the corpus's `text_*.jsonl` documents cut into ~2 KB pieces (UTF-8 bytes; cut at the last
whitespace between 1,800 and 2,000 bytes, else the first up to 2,200, else at 2,000 on a character
boundary; pieces under 1,000 bytes, i.e. short documents and tails, are dropped), then an even stride
over all pieces picks `MINHASH_BENCH_DOCS` of them (default 60,000), so every source is represented.

Shingling is the same on both sides: dedup_truth.py's definition (lower-cased text, tokens = `\\w+`,
the set of word 5-grams, a document with 1-4 tokens is one shingle). Ours does it vectorised from the
Arrow text column (`platform_assets.dedup.shingles.shingle_hashes`), then `MinHasher.signatures`,
slice by slice exactly as `Deduplicator.add_batch` does. The peers do it in Python
(`re.findall(r"\\w+", text.lower())`, 5-grams joined by a space), which is what their users write;
datasketch gets a set of UTF-8 bytes per document (its API), rensa a list of str (its fast path).
`check` asserts that both sides saw the same number of distinct shingles (up to 1e-4: Arrow's
`utf8_lower` is Python's simple case mapping, `str.lower` the full one).

One core: OMP/OpenBLAS/MKL/numexpr/Rayon threads are set to 1 for both children (Arrow sizes its
pool from OMP_NUM_THREADS too); "cores used" (CPU s / wall s) shows it held. The headline figure is
docs per CPU-second (per core) for the whole path, text -> signature; the phase split (shingling vs
signatures, CPU time of each phase) is measured inside the work and gives the signature-only rate,
the figure quoted for the peers in the issue (datasketch bulk ~1,500/s, rensa ~110,000/s).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    MB,
    Benchmark,
    BenchmarkError,
    Metric,
    Prepared,
    Record,
    Spec,
    Target,
    cpu_seconds_metric,
    peak_rss_metric,
)

N_DOCS_DEFAULT = 60_000
CHUNK_BYTES = 2000
CHUNK_MIN_CUT = 1800  # look for whitespace to cut at in [1800, 2000], then (2000, 2200]
CHUNK_MAX_CUT = 2200
CHUNK_MIN_BYTES = 1000  # shorter pieces (tails, short documents) are dropped
TEXT_PATTERN = "text_*.jsonl"
NUM_PERM = 128
SEED = 1
SHINGLE_SIZE = 5
PEER_BATCH = 8192  # documents per peer call: the stages' io.batch_rows
SHINGLE_TOLERANCE = 1e-4
ONE_CORE_ENV = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "RAYON_NUM_THREADS": "1",
}
_TOKEN = re.compile(r"\w+")
_SPACES = (b" ", b"\n", b"\t", b"\r")


# -- the peers' shingling: dedup_truth.py's definition, in plain Python ---------------------------
def python_shingles(text: str, k: int = SHINGLE_SIZE) -> list[str]:
    """Word k-grams of `text` as strings (tokens joined by one space; may repeat). 1..k-1 tokens:
    one shingle of all of them; no token: no shingle (dedup_truth.py gives such a document the
    empty tuple; ours gives it no shingle, so the two counts stay comparable)."""
    toks = _TOKEN.findall(text.lower())
    if len(toks) >= k:
        return [" ".join(toks[j : j + k]) for j in range(len(toks) - k + 1)]
    return [" ".join(toks)] if toks else []


# -- input -----------------------------------------------------------------------------------------
def text_files(corpus: Path) -> list[Path]:
    if corpus.is_file():
        return [corpus]
    return sorted(corpus.glob(TEXT_PATTERN))


def _cut(data: bytes) -> Iterator[bytes]:
    """~2 KB pieces of one document's UTF-8 bytes, cut at whitespace where there is some."""
    i, n = 0, len(data)
    while n - i >= CHUNK_MIN_BYTES:
        if n - i <= CHUNK_MAX_CUT:
            yield data[i:]
            return
        j = max(data.rfind(s, i + CHUNK_MIN_CUT, i + CHUNK_BYTES) for s in _SPACES)
        if j < 0:
            found = [k for k in (data.find(s, i + CHUNK_BYTES, i + CHUNK_MAX_CUT) for s in _SPACES) if k >= 0]
            j = min(found) if found else -1
        if j < 0:
            j = i + CHUNK_BYTES
            while data[j] & 0xC0 == 0x80:  # back up to the first byte of a character
                j -= 1
        yield data[i:j]
        i = j


def _pieces(files: list[Path]) -> Iterator[bytes]:
    for path in files:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    yield from _cut(json.loads(line)["text"].encode("utf-8"))


def prepare(corpus: Path, run_dir: Path) -> Spec:
    files = text_files(corpus)
    if not files:
        raise BenchmarkError(f"no {TEXT_PATTERN} files in {corpus}")
    want = int(os.environ.get("MINHASH_BENCH_DOCS", N_DOCS_DEFAULT))
    total = sum(1 for _ in _pieces(files))  # two streaming passes: the parent stays small
    if total == 0:
        raise BenchmarkError(f"no document of {CHUNK_MIN_BYTES}+ bytes in {corpus}")
    n = min(want, total)
    out = run_dir / "chunks.jsonl"
    taken = nbytes = 0
    next_pick = 0  # piece index of the j-th pick: floor(j * total / n)
    with open(out, "w", encoding="utf-8") as f:
        for idx, piece in enumerate(_pieces(files)):
            if idx == next_pick:
                f.write(json.dumps(piece.decode("utf-8")) + "\n")
                taken += 1
                nbytes += len(piece)
                next_pick = taken * total // n if taken < n else -1
    return {"corpus": str(corpus), "files": [str(p) for p in files], "chunks": str(out), "docs": taken,
            "pieces_available": total, "input_bytes": nbytes}


def describe(spec: Spec) -> str:
    return (f"{spec['docs']:,} pieces of {spec['input_bytes'] / spec['docs']:,.0f} B on average "
            f"({spec['input_bytes'] / MB:,.1f} MB), an even stride over {spec['pieces_available']:,} pieces "
            f"of {len(spec['files'])} text files")


def _read_chunks(spec: Spec) -> list[str]:
    with open(spec["chunks"], encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _clock() -> float:
    return time.process_time()  # CPU time of the process: the phase split is per core


# -- ours ------------------------------------------------------------------------------------------
def distinct_shingles_ours(texts: Any, settings: Any) -> int:
    """Sum over documents of the number of distinct shingle hashes (untimed check)."""
    import numpy as np

    from platform_assets.dedup.shingles import compute_in_slices, shingle_hashes, texts_to_array

    text = texts_to_array(texts)
    total = 0
    for a, b in compute_in_slices(text):
        sh = shingle_hashes(text[a:b], settings)
        doc = sh.doc_index().astype(np.uint64)
        # 64-bit hashes: (doc, hash) pairs are distinct iff the hashes are, within a document
        order = np.lexsort((sh.hashes, doc))
        h, d = sh.hashes[order], doc[order]
        if len(h):
            total += int(1 + np.count_nonzero((h[1:] != h[:-1]) | (d[1:] != d[:-1])))
    return total


def run_ours(spec: Spec, run_dir: Path) -> Prepared:
    import numpy as np
    import pyarrow as pa

    from platform_assets.contracts import IOSettings
    from platform_assets.dedup.minhash import MinHasher
    from platform_assets.dedup.settings import DedupSettings
    from platform_assets.dedup.shingles import compute_in_slices, shingle_hashes, texts_to_array

    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    settings = DedupSettings()
    batch_rows = IOSettings().batch_rows
    near = settings.near
    texts = pa.array(_read_chunks(spec), type=pa.large_string())
    hasher = MinHasher(near.num_perm, near.seed, near.algorithm)
    # one-off per process (Unicode tables, ~0.2 s), not per document: built here, untimed
    hasher.signatures(shingle_hashes(texts.slice(0, 64), near.shingles))

    def work():
        sigs, shingle_cpu = [], 0.0
        for b0 in range(0, len(texts), batch_rows):  # the stage's record batches
            text = texts_to_array(texts.slice(b0, batch_rows))
            for a, b in compute_in_slices(text):
                c0 = _clock()
                shingles = shingle_hashes(text[a:b], near.shingles)
                c1 = _clock()
                sigs.append(hasher.signatures(shingles))
                shingle_cpu += c1 - c0
        return np.concatenate(sigs), shingle_cpu

    def finish(out) -> dict[str, Any]:
        sigs, shingle_cpu = out
        return {
            "docs": int(sigs.shape[0]),
            "num_perm": int(sigs.shape[1]),
            "shingle_cpu_seconds": shingle_cpu,
            "distinct_shingles": distinct_shingles_ours(texts, near.shingles),
        }

    return Prepared(work, finish)


# -- peers -----------------------------------------------------------------------------------------
def run_datasketch(spec: Spec, run_dir: Path) -> Prepared:
    import numpy as np
    from datasketch import MinHash

    texts = _read_chunks(spec)
    MinHash.bulk([[b"warm up"]], num_perm=NUM_PERM, seed=SEED)

    def work():
        sigs, shingle_cpu, distinct = [], 0.0, 0
        for b0 in range(0, len(texts), PEER_BATCH):
            c0 = _clock()
            sets = [{s.encode("utf-8") for s in python_shingles(t)} for t in texts[b0 : b0 + PEER_BATCH]]
            shingle_cpu += _clock() - c0
            distinct += sum(map(len, sets))
            sigs += [m.hashvalues for m in MinHash.bulk(sets, num_perm=NUM_PERM, seed=SEED)]
        return np.vstack(sigs), shingle_cpu, distinct

    def finish(out) -> dict[str, Any]:
        sigs, shingle_cpu, distinct = out
        return {"docs": int(sigs.shape[0]), "num_perm": int(sigs.shape[1]),
                "shingle_cpu_seconds": shingle_cpu, "distinct_shingles": distinct}

    return Prepared(work, finish)


def run_rensa(spec: Spec, run_dir: Path) -> Prepared:
    from rensa import RMinHash

    texts = _read_chunks(spec)
    RMinHash.digest_matrix_from_token_sets([["warm up"]], NUM_PERM, SEED)

    def work():
        mats, shingle_cpu = [], 0.0
        for b0 in range(0, len(texts), PEER_BATCH):
            c0 = _clock()
            lists = [python_shingles(t) for t in texts[b0 : b0 + PEER_BATCH]]
            shingle_cpu += _clock() - c0
            mats.append(RMinHash.digest_matrix_from_token_sets(lists, NUM_PERM, SEED))
        return mats, shingle_cpu

    def finish(out) -> dict[str, Any]:
        mats, shingle_cpu = out
        return {
            "docs": sum(m.len() for m in mats),
            "num_perm": mats[0].get_num_perm() if mats else NUM_PERM,
            "shingle_cpu_seconds": shingle_cpu,
            "distinct_shingles": sum(len(set(python_shingles(t))) for t in texts),
        }

    return Prepared(work, finish)


# -- comparison ------------------------------------------------------------------------------------
def check(ours: Record, peer: Record) -> None:
    if ours["docs"] != peer["docs"] or ours["num_perm"] != peer["num_perm"]:
        raise BenchmarkError(f"documents x slots differ: ours {ours['docs']:,} x {ours['num_perm']}, "
                             f"peer {peer['docs']:,} x {peer['num_perm']}")
    a, b = ours["distinct_shingles"], peer["distinct_shingles"]
    if abs(a - b) > SHINGLE_TOLERANCE * max(a, b, 1):
        raise BenchmarkError(f"distinct shingles differ: ours {a:,}, peer {b:,}: not the same shingling")


def _per_core(r: Record, s: Spec) -> float:
    return s["docs"] / r["cpu_seconds"]


def _signature_only(r: Record, s: Spec) -> float:
    return s["docs"] / max(r["cpu_seconds"] - r["shingle_cpu_seconds"], 1e-9)


def _shingling_only(r: Record, s: Spec) -> float:
    return s["docs"] / max(r["shingle_cpu_seconds"], 1e-9)


METRICS = (
    Metric("docs/s per core, text -> signature", "docs/CPU s", True, _per_core, "{:,.0f}"),
    Metric("docs/s, text -> signature", "docs/s wall", True, lambda r, s: s["docs"] / r["seconds"],
           "{:,.0f}"),
    Metric("docs/s per core, signatures only", "docs/CPU s", True, _signature_only, "{:,.0f}"),
    Metric("docs/s per core, shingling only", "docs/CPU s", True, _shingling_only, "{:,.0f}"),
    Metric("MB/s per core", "MB/CPU s", True, lambda r, s: s["input_bytes"] / MB / r["cpu_seconds"],
           "{:,.1f}"),
    cpu_seconds_metric(),
    Metric("cores used", "CPU s / wall s", None, lambda r, s: r["cpu_seconds"] / r["seconds"], "{:.2f}"),
    peak_rss_metric(),
    Metric("docs", "", None, lambda r, s: r["docs"], "{:,.0f}", must_match=True),
    Metric("distinct shingles", "", None, lambda r, s: r["distinct_shingles"], "{:,.0f}"),
)
TARGETS = (
    Target("docs/s per core, text -> signature",
           "at least 30,000 docs/s per core on ~2 KB documents, shingling included", min_ours=30_000),
)
OURS_LABEL = ("platform_assets.dedup: shingles.shingle_hashes + MinHasher.signatures (one_permutation, "
              "128 slots, seed 1), per 1 MiB slice of 8,192-row batches, as Deduplicator.add_batch")


def _bench(name: str, peer, peer_label: str, package: str) -> Benchmark:
    return Benchmark(
        name=name,
        description="MinHash signatures of ~2 KB real-text documents on one core (word 5-grams, 128 slots)",
        ours_label=OURS_LABEL,
        peer_label=peer_label,
        prepare=prepare,
        ours=run_ours,
        peer=peer,
        metrics=METRICS,
        packages=("platform-assets", "numpy", "pyarrow", package),
        check=check,
        targets=TARGETS,
        env=ONE_CORE_ENV,
        describe=describe,
    )


BENCHMARKS = (
    _bench("minhash_signatures_datasketch", run_datasketch,
           "datasketch MinHash.bulk(sets of UTF-8 shingles, num_perm=128, seed=1), 8,192 documents per call; "
           "shingles by re.findall(r'\\w+', text.lower()) + ' '.join of 5-grams", "datasketch"),
    _bench("minhash_signatures_rensa", run_rensa,
           "rensa RMinHash.digest_matrix_from_token_sets(lists of str shingles, 128, seed=1), 8,192 "
           "documents per call (full-set R-MinHash); shingles as for datasketch", "rensa"),
)
