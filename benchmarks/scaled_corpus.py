"""Inputs for `pipeline_scaling`: a sample of the real corpus and word-level perturbed copies of it.

- 1x is `base_bytes` of the real corpus's JSONL lines (default: all of it, ~524 MB), taken per
  source in proportion to its size, the lines with the smallest crc32 first (a uniform sample of
  every file, written in corpus order, byte-identical lines). Sources: `text_*.jsonl` -> `text`,
  `code_*.jsonl` -> `code` (the file name before the first `_`), one pipeline source each.
- the k-th copy (k >= 1) of each document is a deterministic word-level perturbation of it
  (`perturb`); see `pipeline_scaling`'s docstring for why it keeps the copies distinct for dedup
  and alike for cleaning. Copy k of `text_000.jsonl` is `text_000.cKK.jsonl`; a scale n is a
  directory per source with hard links to copies 0..n-1. `jaccard_check` measures the copies'
  distance with dedup's own shingles.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
import zlib
from pathlib import Path
from typing import Any

from benchmarks.harness import MB

GEN_VERSION = 2  # bump when the selection or the perturbation changes: cached inputs are keyed by it
JACCARD_SAMPLE = 200  # documents per source whose copies are compared with their originals
NEAR_THRESHOLD = 0.8  # dedup.near.threshold's default: copies must stay well under it

# -- input generation ------------------------------------------------------------------------------
_TOKEN_SPLIT = re.compile(r"(\w+)")  # dedup's tokens: maximal runs of \w (platform_assets/dedup/shingles.py)
_SYLLABLES = ("ka", "lo", "mi", "nu", "re", "ti", "vo", "ze")
_hash_cache: dict[str, int] = {}


def _token_hash(token: str) -> int:
    h = _hash_cache.get(token)
    if h is None:
        if len(_hash_cache) > 2_000_000:  # code has many distinct identifiers: bound the cache (~200 MB)
            _hash_cache.clear()
        h = _hash_cache[token] = zlib.crc32(token.lower().encode("utf-8", "surrogatepass"))
    return h


def _mix(a: int, b: int, salt: int) -> int:
    """A 32-bit hash of (a, b, salt) (murmur3's finaliser): uniform buckets from two crc32s."""
    x = (a * 0x9E3779B1 + b * 0x85EBCA77 + salt) & 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    return x ^ (x >> 16)


def perturb(text: str, k: int) -> str:
    """Copy k (>= 1) of a text: neighbouring \\w tokens swapped where hash(pair, k) % 4 == 0."""
    parts = _TOKEN_SPLIT.split(text)  # separator, token, separator, token, ..., separator
    n = len(parts) // 2
    if n == 0:
        return text  # no token at all: nothing to move (cleaning drops such texts anyway)
    hashes = [_token_hash(parts[2 * i + 1]) for i in range(n)]
    salt = (k * 0x2545F491) & 0xFFFFFFFF
    moved = 0
    i = 0
    while i < n - 1:
        if _mix(hashes[i], hashes[i + 1], salt) & 3 == 0 and hashes[i] != hashes[i + 1]:
            parts[2 * i + 1], parts[2 * i + 3] = parts[2 * i + 3], parts[2 * i + 1]
            moved += 2
            i += 2
        else:
            i += 1
    if moved * 8 < n:  # too repetitive to change by moving tokens (expected: 40% of tokens move)
        lowest = (1 << 32, 0)
        suffixed = False
        for i in range(n):
            x = _mix(hashes[i], i, salt)
            if x & 3 == 0:
                parts[2 * i + 1] += _SYLLABLES[(x >> 2) & 7]
                suffixed = True
            lowest = min(lowest, (x, i))
        if not suffixed:  # a text of one to a few tokens: change one anyway, so the copy is distinct
            parts[2 * lowest[1] + 1] += _SYLLABLES[(lowest[0] >> 2) & 7]
    return "".join(parts)


def source_of(path: Path) -> str:
    return re.sub(r"[^a-z0-9_-]", "-", path.name.split("_")[0].lower())


def corpus_files(corpus: Path) -> list[Path]:
    return [corpus] if corpus.is_file() else sorted(corpus.glob("*.jsonl"))


def _line_spans(path: Path) -> list[tuple[int, int, int]]:
    """(crc32 of the line, offset, length) of every non-blank line."""
    spans, offset = [], 0
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                spans.append((zlib.crc32(line), offset, len(line)))
            offset += len(line)
    return spans


def select_base(files: list[Path], base_bytes: int | None) -> dict[str, Any]:
    """The 1x input: per source, its share of `base_bytes` (by its JSONL size), smallest crc32 first."""
    by_source: dict[str, list[Path]] = {}
    for f in files:
        by_source.setdefault(source_of(f), []).append(f)
    total = sum(f.stat().st_size for f in files)
    plan: dict[str, Any] = {}
    for source, paths in sorted(by_source.items()):
        spans = {str(p): _line_spans(p) for p in paths}
        size = sum(length for s in spans.values() for _, _, length in s)
        target = size if base_bytes is None else base_bytes * sum(p.stat().st_size for p in paths) / total
        ranked = sorted((h, path, off, ln) for path, s in spans.items() for h, off, ln in s)
        chosen: dict[str, list[tuple[int, int]]] = {str(p): [] for p in paths}
        taken = 0
        for _, path, off, ln in ranked:
            if taken >= target:
                break
            chosen[path].append((off, ln))
            taken += ln
        plan[source] = {"files": {p: sorted(v) for p, v in chosen.items() if v}, "bytes": taken,
                        "docs": sum(len(v) for v in chosen.values())}
    return plan


def _copy_line(line: bytes, k: int) -> bytes:
    doc = json.loads(line)
    text = doc.get("text")
    if isinstance(text, str):
        doc["text"] = perturb(text, k)
        if "sha256" in doc:
            doc["sha256"] = hashlib.sha256(doc["text"].encode("utf-8", "surrogatepass")).hexdigest()
    if "id" in doc:
        doc["id"] = f"{doc['id']}~{k}"
    try:
        return (json.dumps(doc, ensure_ascii=False) + "\n").encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (from a \\ud8xx escape): keep it escaped, as the corpus does
        return (json.dumps(doc) + "\n").encode("ascii")


def write_copy(task: tuple[str, list[tuple[int, int]], int, str]) -> dict[str, int]:
    """Copy k of one corpus file's selected lines (k = 0: the lines as they are). Worker process."""
    src, spans, k, out = task
    stats = {"docs": 0, "bytes": 0, "unchanged": 0}
    tmp = out + ".tmp"
    with open(src, "rb") as f, open(tmp, "wb") as w:
        for off, ln in spans:
            f.seek(off)
            line = f.read(ln)
            if not line.endswith(b"\n"):
                line += b"\n"
            if k:
                new = _copy_line(line, k)
                stats["unchanged"] += json.loads(new).get("text") == json.loads(line).get("text")
                line = new
            w.write(line)
            stats["docs"] += 1
            stats["bytes"] += len(line)
    os.replace(tmp, out)
    return stats


def _input_key(files: list[Path], base_bytes: int | None) -> str:
    h = hashlib.sha256(json.dumps([GEN_VERSION, base_bytes, [(str(f), f.stat().st_size, f.stat().st_mtime_ns)
                                                               for f in files]]).encode()).hexdigest()[:10]
    base = "all" if base_bytes is None else f"{base_bytes / MB:g}mb"
    return f"base-{base}-{h}"


def prepare_inputs(corpus: Path, base_bytes: int | None, scales: list[int], inputs_root: Path,
                   say=print) -> dict[str, Any]:
    """Write (or reuse) copies 0..max(scales)-1 and a directory per scale; returns their description."""
    from concurrent.futures import ProcessPoolExecutor

    files = corpus_files(corpus)
    if not files:
        raise SystemExit(f"no *.jsonl files in {corpus}")
    root = inputs_root / _input_key(files, base_bytes)
    root.mkdir(parents=True, exist_ok=True)
    plan_path = root / "selection.json"
    if plan_path.exists():
        plan = json.loads(plan_path.read_text())
    else:
        plan = select_base(files, base_bytes)
        plan_path.write_text(json.dumps(plan))
    copies = max(scales)
    stats_path = root / "copies.json"
    copy_stats: dict[str, dict[str, dict[str, int]]] = json.loads(stats_path.read_text()) if stats_path.exists() else {}
    tasks, keys = [], []
    for source, sel in plan.items():
        (root / "copies" / source).mkdir(parents=True, exist_ok=True)
        for k in range(copies):
            for path, spans in sel["files"].items():
                out = root / "copies" / source / f"{Path(path).stem}.c{k:02d}.jsonl"
                key = f"{source}/{out.name}"
                if out.exists() and key in copy_stats.get(str(k), {}):
                    continue
                tasks.append((path, [tuple(s) for s in spans], k, str(out)))
                keys.append((k, key))
    if tasks:
        t0 = time.perf_counter()
        say(f"writing {len(tasks)} input files (copies up to {copies - 1}) under {root} ...")
        # imported here, not at the top: the harness's parent imports every benchmark module, and the
        # cleaning baseline side must import platform_assets from its own tree, first
        from platform_assets.contracts import usable_cores

        with ProcessPoolExecutor(max_workers=usable_cores()) as pool:
            for (k, key), st in zip(keys, pool.map(write_copy, tasks), strict=True):
                copy_stats.setdefault(str(k), {})[key] = st
                stats_path.write_text(json.dumps(copy_stats))
        say(f"  ... {time.perf_counter() - t0:.1f} s")
    scale_info = {}
    for n in scales:
        sdir = root / f"scale-{n}"
        per_source = {}
        for source in plan:
            d = sdir / source
            want = sorted(f for f in (root / "copies" / source).iterdir()
                          if f.suffix == ".jsonl" and int(f.stem.rsplit(".c", 1)[1]) < n)
            if not d.is_dir() or sorted(p.name for p in d.iterdir()) != [f.name for f in want]:
                shutil.rmtree(d, ignore_errors=True)
                d.mkdir(parents=True)
                for f in want:
                    (d / f.name).hardlink_to(f)
            per_source[source] = {"path": str(d), "files": len(want),
                                  "bytes": sum(f.stat().st_size for f in want),
                                  "docs": sum(copy_stats[str(k)][f"{source}/{f.name}"]["docs"] for f in want
                                              for k in [int(f.stem.rsplit(".c", 1)[1])])}
        scale_info[str(n)] = {"sources": per_source, "bytes": sum(s["bytes"] for s in per_source.values()),
                              "docs": sum(s["docs"] for s in per_source.values())}
    unchanged = sum(st["unchanged"] for k, per in copy_stats.items() if int(k) < copies for st in per.values())
    return {"root": str(root), "base_bytes": base_bytes, "plan": {s: {"docs": p["docs"], "bytes": p["bytes"]}
                                                                   for s, p in plan.items()},
            "scales": scale_info, "copies_identical_to_original": unchanged}


def jaccard_check(inputs: dict[str, Any], sample: int = JACCARD_SAMPLE) -> dict[str, Any]:
    """Jaccard of dedup's shingle sets (word 5-grams, lower-cased \\w tokens) between a sample of
    originals and their copies 1 and 2, and between the two copies."""
    import numpy as np

    from platform_assets.dedup.settings import DedupSettings
    from platform_assets.dedup.shingles import shingle_hashes

    spec = DedupSettings().near.shingles
    pairs: dict[str, list[float]] = {"original~copy1": [], "original~copy2": [], "copy1~copy2": []}
    no_shingles = 0
    for source in inputs["plan"]:
        d = Path(inputs["root"]) / "copies" / source
        texts = []
        for f in sorted(d.glob("*.c00.jsonl")):
            with open(f, "rb") as fh:
                for line in fh:
                    texts.append(json.loads(line)["text"])
                    if len(texts) >= sample:
                        break
            if len(texts) >= sample:
                break
        batch = [t for text in texts for t in (text, perturb(text, 1), perturb(text, 2))]
        sets = shingle_hashes(batch, spec).sets()
        for i in range(0, len(sets), 3):
            o, c1, c2 = sets[i : i + 3]
            if not o.size:  # no \w token at all (an empty file): ingest quarantines it, nothing to compare
                no_shingles += 1
                continue

            def jac(a: np.ndarray, b: np.ndarray) -> float:
                return np.intersect1d(a, b).size / np.union1d(a, b).size

            pairs["original~copy1"].append(jac(o, c1))
            pairs["original~copy2"].append(jac(o, c2))
            pairs["copy1~copy2"].append(jac(c1, c2))
    out: dict[str, Any] = {"documents_without_shingles": no_shingles}
    for name, vals in pairs.items():
        vals.sort()
        out[name] = {"n": len(vals), "mean": sum(vals) / len(vals), "median": vals[len(vals) // 2],
                     "p99": vals[min(len(vals) - 1, int(0.99 * len(vals)))], "max": vals[-1],
                     f"at_least_{NEAR_THRESHOLD}": sum(v >= NEAR_THRESHOLD for v in vals)}
    return out
