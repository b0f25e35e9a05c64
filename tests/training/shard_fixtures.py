"""A small writer of `flat` shard sets by platform_assets/packing/SHARD_FORMAT.md, for the loader's tests.

The platform's own writer (packed_shards) is built elsewhere; the lead adds an integration test against
it. This one writes exactly the documented layout: per (split, source) a directory of shards, each
`shard-NNNNN.{tokens,seqlens,seqptr[,mask]}.bin` (raw little-endian, no headers), and `index.json`
(sorted keys, indent 1) with sizes and sha256 of every file. Samples are given either as lists of
segments (`FixtureSample`) or, for large sets, as ready arrays (`ShardArrays`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SEQPTR_DTYPE = np.dtype("<i8")
SEQLEN_DTYPE = np.dtype("<i4")


@dataclass(frozen=True)
class FixtureSample:
    segments: tuple[np.ndarray, ...]
    """Token ids of each segment, laid end to end from position 0; the rest of the row is pad_id."""
    mask: np.ndarray | None = None
    """uint8 per token of the concatenated segments (1 = counts in the loss); None = all 1."""

    @property
    def tokens(self) -> np.ndarray:
        return np.concatenate(self.segments) if self.segments else np.zeros(0, np.int64)


@dataclass(frozen=True)
class ShardArrays:
    tokens: np.ndarray  # [samples, seq_len], already padded
    seqlens: np.ndarray  # int32, all segments concatenated
    seqptr: np.ndarray  # int64 [samples + 1]
    mask: np.ndarray | None = None  # uint8 [samples, seq_len]


def shard_arrays(samples: Sequence[FixtureSample], seq_len: int, pad_id: int, dtype: np.dtype,
                 has_loss_mask: bool) -> ShardArrays:
    tokens = np.full((len(samples), seq_len), pad_id, dtype=dtype)
    mask = np.zeros((len(samples), seq_len), dtype=np.uint8) if has_loss_mask else None
    seqlens: list[int] = []
    seqptr = [0]
    for i, s in enumerate(samples):
        t = s.tokens
        if len(t) > seq_len:
            raise ValueError(f"fixture sample {i}: {len(t)} tokens > seq_len {seq_len}")
        tokens[i, : len(t)] = t
        if mask is not None:
            mask[i, : len(t)] = 1 if s.mask is None else s.mask
        seqlens += [len(seg) for seg in s.segments]
        seqptr.append(len(seqlens))
    return ShardArrays(tokens, np.array(seqlens, SEQLEN_DTYPE), np.array(seqptr, SEQPTR_DTYPE), mask)


def _write(path: Path, data: np.ndarray, root: Path) -> dict:
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = np.ascontiguousarray(data).tobytes()
    path.write_bytes(raw)
    return {"path": path.relative_to(root).as_posix(), "bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}


def write_flat(root: Path, sets: Mapping[tuple[str, str], Sequence[Sequence[FixtureSample] | ShardArrays]],
               seq_len: int, *, pad_id: int = 0, eos_id: int | None = 1, vocab_size: int = 50257,
               has_loss_mask: bool = False) -> Path:
    """Write `<root>/flat/` with one set per (split, source), each a list of shards; returns the flat dir."""
    flat = root / "flat"
    token_dtype = "uint16" if vocab_size <= 65536 else "uint32"
    dtype = np.dtype("<u2" if token_dtype == "uint16" else "<u4")
    set_docs = []
    totals = {"samples": 0, "tokens": 0, "documents": 0, "pieces": 0}
    for (split, source), shards in sorted(sets.items()):
        shard_docs = []
        for k, shard in enumerate(shards):
            arr = shard if isinstance(shard, ShardArrays) else shard_arrays(shard, seq_len, pad_id, dtype,
                                                                             has_loss_mask)
            name = f"{split}/{source}/shard-{k:05d}"
            n = len(arr.seqptr) - 1
            files = {
                "tokens": _write(flat / f"{name}.tokens.bin", arr.tokens.astype(dtype), flat),
                "seqlens": _write(flat / f"{name}.seqlens.bin", arr.seqlens.astype(SEQLEN_DTYPE), flat),
                "seqptr": _write(flat / f"{name}.seqptr.bin", arr.seqptr.astype(SEQPTR_DTYPE), flat),
            }
            if has_loss_mask:
                files["mask"] = _write(flat / f"{name}.mask.bin", arr.mask.astype(np.uint8), flat)
            tokens = int(arr.seqlens.sum())
            loss = int(arr.mask.sum()) if has_loss_mask else tokens
            shard_docs.append({"name": name, "samples": n, "tokens": tokens, "loss_tokens": loss,
                               "documents": len(arr.seqlens), "bytes": sum(f["bytes"] for f in files.values()),
                               "files": files})
        samples = sum(s["samples"] for s in shard_docs)
        tokens = sum(s["tokens"] for s in shard_docs)
        docs = sum(s["documents"] for s in shard_docs)
        set_docs.append({"split": split, "source": source, "samples": samples, "tokens": tokens, "documents": docs,
                         "shards": shard_docs})
        totals = {"samples": totals["samples"] + samples, "tokens": totals["tokens"] + tokens,
                  "documents": totals["documents"] + docs, "pieces": totals["pieces"] + docs}
    totals["efficiency"] = totals["tokens"] / (totals["samples"] * seq_len) if totals["samples"] else 0.0
    index = {
        "format": "flat", "format_version": 1, "seq_len": seq_len, "token_dtype": token_dtype,
        "vocab_size": vocab_size, "pad_id": pad_id, "eos_id": eos_id, "bos_id": None,
        "has_loss_mask": has_loss_mask,
        "tokenizer": {"name": "fixture", "sha256": "0" * 64},
        "packing": {"strategy": "fixture", "overlong": "split"},
        "totals": totals,
        "sets": set_docs,
    }
    flat.mkdir(parents=True, exist_ok=True)
    (flat / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True))
    return flat


def random_samples(rng: np.random.Generator, n: int, seq_len: int, *, max_segments: int = 3,
                   vocab_size: int = 50257, with_mask: bool = False, one_segment: bool = False) -> list[FixtureSample]:
    """n samples of 1..max_segments segments (1 if one_segment) filling 50-100% of the row; masks (if asked)
    mark a random prompt prefix of each segment with 0, the rest 1."""
    out = []
    for _ in range(n):
        used = int(rng.integers(seq_len // 2, seq_len + 1))
        k = 1 if one_segment else int(rng.integers(1, min(max_segments, used) + 1))
        cuts = np.sort(rng.choice(np.arange(1, used), size=k - 1, replace=False)) if k > 1 else np.array([], int)
        bounds = np.concatenate(([0], cuts, [used]))
        tokens = rng.integers(2, vocab_size, size=used)
        segments = tuple(tokens[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True))
        mask = None
        if with_mask:
            mask = np.concatenate([(np.arange(b - a) >= rng.integers(0, b - a + 1)).astype(np.uint8)
                                   for a, b in zip(bounds[:-1], bounds[1:], strict=True)])
        out.append(FixtureSample(segments, mask))
    return out


@dataclass(frozen=True)
class FixtureSet:
    """A written flat dir and its samples by sample id (source index << 40 | index within the set)."""

    flat: Path
    samples: dict[int, FixtureSample]
    sources: tuple[str, ...]
    seq_len: int
    pad_id: int


def build_sets(root: Path, sizes: Mapping[str, Sequence[int]], seq_len: int, seed: int = 0, *,
               split: str = "train", with_mask: bool = False, one_segment: bool = False,
               extra_splits: Sequence[str] = ("validation",)) -> FixtureSet:
    """One set per source of `split`, shards of the given sample counts; each extra split gets a one-shard
    set per source too (so a loader must pick its split). Sources are taken in sorted order."""
    rng = np.random.default_rng(seed)
    sets: dict[tuple[str, str], list[list[FixtureSample]]] = {}
    by_id: dict[int, FixtureSample] = {}
    sources = tuple(sorted(sizes))
    for s, source in enumerate(sources):
        shards = [random_samples(rng, n, seq_len, with_mask=with_mask, one_segment=one_segment)
                  for n in sizes[source]]
        sets[(split, source)] = shards
        for i, sample in enumerate(x for shard in shards for x in shard):
            by_id[(s << 40) | i] = sample
        for other in extra_splits:
            sets[(other, source)] = [random_samples(rng, 3, seq_len, with_mask=with_mask, one_segment=one_segment)]
    pad_id = 0
    flat = write_flat(root, sets, seq_len, pad_id=pad_id, has_loss_mask=with_mask)
    return FixtureSet(flat, by_id, sources, seq_len, pad_id)
