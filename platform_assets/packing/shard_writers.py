"""Writing packed samples as shard sets in every configured format, with one index.json per format.

The layout and every byte-level rule come from SHARD_FORMAT.md; the formats themselves are the
registry's (`packing/formats/`). Samples arrive as runs of consecutive samples per (split, source);
this module cuts them at row-group and shard boundaries and hands each run to every format's set
writer, so memory is one run per (split, source), never a whole shard. Nothing here depends on time,
thread order or dict order: the same samples give the same bytes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import xxhash

from platform_assets.contracts import SHARD_INDEX_FILE, SOURCE_NAME_PATTERN, SOURCE_NAME_RE, Counts
from platform_assets.packing.formats import REGISTRY, SetHeader, format_names
from platform_assets.packing.formats.base import SetWriter
from platform_assets.packing.samples import (
    ROWS_PER_ROW_GROUP,
    ShardSamples,
    ShardSetError,
    concat_samples,
    token_dtype,
)
from platform_assets.packing.shard_index import index_bytes
from platform_assets.packing.spilled_keys import SpilledKeys
from platform_assets.storage import StagedDir

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShardSetHeader:
    """What every sample of a shard set shares; it heads each format's index.json."""

    seq_len: int
    vocab_size: int
    pad_id: int
    eos_id: int | None
    bos_id: int | None
    has_loss_mask: bool
    tokenizer: dict  # name, sha256 (of tokenizer.json)
    packing: dict  # the packing settings, as JSON

    @property
    def token_dtype(self) -> np.dtype:
        return token_dtype(self.vocab_size)

    def set_header(self) -> SetHeader:
        return SetHeader(self.seq_len, self.token_dtype, self.has_loss_mask)

    def index_head(self, fmt: str) -> dict:
        return {
            "format": fmt,
            "format_version": REGISTRY[fmt].version,
            "format_minor": REGISTRY[fmt].minor,
            "layout": REGISTRY[fmt].layout(self.set_header()),
            "seq_len": self.seq_len,
            "token_dtype": self.token_dtype.name,
            "vocab_size": self.vocab_size,
            "pad_id": self.pad_id,
            "eos_id": self.eos_id,
            "bos_id": self.bos_id,
            "has_loss_mask": self.has_loss_mask,
            "tokenizer": self.tokenizer,
            "packing": self.packing,
        }


GATHER_SAMPLES = 128
"""Samples whose index arrays are built at once in `gather_samples`: two int64 indexes per token are
16 B a position, 4 MiB for 128 x 2048 (a whole run of 1024 at once took ~80 MiB of temporaries)."""


def gather_samples(
    seq_len: int,
    pad_id: int,
    dtype: np.dtype,
    seq_ptr: np.ndarray,
    piece_src: np.ndarray,
    piece_len: np.ndarray,
    values: np.ndarray,
    mask_values: np.ndarray | None,
) -> ShardSamples:
    """Samples from pieces, vectorised: piece p of sample j (pieces seq_ptr[j]:seq_ptr[j+1], in
    order) is values[piece_src[p] : piece_src[p] + piece_len[p]], laid end to end from position 0.

    One numpy gather per GATHER_SAMPLES samples, no Python loop per token or per piece.
    """
    seq_ptr = np.asarray(seq_ptr, dtype=np.int64)
    piece_len = np.asarray(piece_len, dtype=np.int64)
    piece_src = np.asarray(piece_src, dtype=np.int64)
    n = len(seq_ptr) - 1
    tokens = np.full((n, seq_len), pad_id, dtype=dtype)
    mask = np.zeros((n, seq_len), dtype=np.uint8) if mask_values is not None else None
    for a in range(0, n, GATHER_SAMPLES):
        b = min(a + GATHER_SAMPLES, n)
        p0, p1 = int(seq_ptr[a]), int(seq_ptr[b])
        lens = piece_len[p0:p1]
        ends = np.cumsum(lens)
        starts = ends - lens  # piece starts in the block's concatenated tokens
        # where each sample's first piece starts, and each piece's place in the block's positions
        row_first = starts[seq_ptr[a:b] - p0]
        dst = np.repeat(np.arange(b - a, dtype=np.int64) * seq_len - row_first, np.diff(seq_ptr[a : b + 1])) + starts
        total = int(ends[-1]) if len(ends) else 0
        # token t of piece p: source piece_src[p] + (t - starts[p]), destination dst[p] + (t - starts[p])
        within = np.arange(total, dtype=np.int64)
        src_idx = np.repeat(piece_src[p0:p1] - starts, lens)
        src_idx += within
        dst_idx = np.repeat(dst - starts, lens)
        dst_idx += within
        del within
        block = tokens[a:b].reshape(-1)  # a view: rows a..b are contiguous
        block[dst_idx] = values[src_idx]
        if mask is not None:
            mask[a:b].reshape(-1)[dst_idx] = mask_values[src_idx]
    return ShardSamples(tokens, piece_len.astype(np.int32), seq_ptr - seq_ptr[0], mask)


def _take(run: ShardSamples, docs: pa.Array, start: int, stop: int) -> tuple[ShardSamples, pa.Array]:
    lo, hi = int(run.seqptr[start]), int(run.seqptr[stop])
    part = ShardSamples(
        run.tokens[start:stop],
        run.seqlens[lo:hi],
        run.seqptr[start : stop + 1] - lo,
        None if run.loss_mask is None else run.loss_mask[start:stop],
    )
    return part, docs.slice(lo, hi - lo)


def document_digests(ids: pa.Array) -> np.ndarray:
    """xxh3-128 of each id (16-byte values), what a set's distinct documents are counted on: 16 B a
    document where the ids themselves cost ~60 (Arrow strings of 32 hex characters, one array per
    shard: the pool grew 26 -> 45 MB over the 16x corpus's 325,855 documents). Exact unless two ids
    share a 128-bit digest (~n^2 / 2^129: 1e-21 for a billion documents), as exact dedup's text keys.
    The set keeps them in hash partitions on disk (spilled_keys.py), not in memory."""
    return np.frombuffer(b"".join(map(xxhash.xxh3_128_digest, ids.cast(pa.binary()).to_pylist())), "V16")


@dataclass
class ShardCounts(Counts):
    """What a shard holds so far, merged run by run; its fields are the shard entry's counts."""

    samples: int = 0
    tokens: int = 0  # non-padding
    loss_tokens: int = 0


class ShardGroupWriter:
    """The shards of one (split, source): shard k holds samples [k * samples_per_shard, ...)."""

    def __init__(self, owner: ShardSetWriter, split: str, source: str, documents: int):
        self.split, self.source = split, source
        self._owner = owner
        self._pending: list[tuple[ShardSamples, pa.Array]] = []
        self._pending_samples = 0
        header = owner.header.set_header()
        self._writers: dict[str, SetWriter] = {
            fmt: REGISTRY[fmt].open_set(owner.staged, fmt, self._prefix, header) for fmt in owner.formats}
        self._expected_documents = documents
        self._shard_counts = ShardCounts()
        self._closed_shards: list[dict] = []  # per shard: name, samples, tokens, loss_tokens, documents
        self.shards: dict[str, list[dict]] = {fmt: [] for fmt in owner.formats}
        # The digests of the segments' documents (document_digests), a run's at a time: the set's distinct
        # documents are counted on them at the end, the open shard's at its close. Both wait on disk in
        # the run's spill directory (spilled_keys.py): a shard of short documents holds many segments
        # (8 M documents of 1-8 tokens: ~450 a sample, 3.7 M in a shard of 8,192 samples), which the
        # writer kept as id strings until the shard closed (~60 B each: 1,160 -> 533 MB for that input
        # with 16-byte digests in memory, flat with them on disk). A shard holds at most the set's
        # documents (`documents`), which sizes both stores' partitions.
        self._number = len(owner._groups)
        self._document_keys = SpilledKeys(owner.spill_dir, f"documents-{self._number:05d}", "V16", documents)
        self._shard_keys = self._open_shard_keys()
        self._shard_segments = 0
        self.documents = 0  # the set's distinct documents, once closed
        self.pieces = 0  # segments in the closed shards
        self.closed = False

    def _open_shard_keys(self) -> SpilledKeys:
        name = f"shard-documents-{self._number:05d}-{len(self._closed_shards):05d}"
        return SpilledKeys(self._owner.spill_dir, name, "V16", self._expected_documents)

    @property
    def _prefix(self) -> str:
        return f"{self.split}/{self.source}"

    def add(self, run: ShardSamples, segment_documents: pa.Array) -> None:
        """Append consecutive samples; `segment_documents` names each segment's document (its id)."""
        if self.closed:
            raise ShardSetError(f"{self._prefix}: shards already closed")
        if len(segment_documents) != len(run.seqlens):
            raise ShardSetError(f"{len(segment_documents)} document ids for {len(run.seqlens)} segments")
        header = self._owner.header
        if run.seq_len != header.seq_len:
            raise ShardSetError(f"samples of {run.seq_len} positions in a set of seq_len {header.seq_len}")
        if (run.loss_mask is not None) != header.has_loss_mask:
            raise ShardSetError(f"{self._prefix}: loss_mask {'given' if run.loss_mask is not None else 'missing'}"
                                f" but the set's has_loss_mask is {header.has_loss_mask}")
        run.validate()
        if run.samples == 0:
            return
        self._pending.append((run, segment_documents))
        self._pending_samples += run.samples
        while self._pending_samples >= self._room():
            self._flush(self._room())

    def samples_to_boundary(self) -> int:
        """Samples that `add` takes, beyond those pending, up to the next row-group or shard boundary
        (1..ROWS_PER_ROW_GROUP). A run of exactly this many is written as it is; a run across a
        boundary is joined with the next one into a copy (concat_samples), and the copy's tail stays
        pending: 8 MiB a run at 1024 x 2048 uint16, two of them alive while the next flush joins."""
        return self._room() - self._pending_samples

    def _room(self) -> int:
        """Samples until the next row-group or shard boundary."""
        in_shard = self._shard_counts.samples
        return min(ROWS_PER_ROW_GROUP - in_shard % ROWS_PER_ROW_GROUP, self._owner.samples_per_shard - in_shard)

    def _flush(self, count: int) -> None:
        runs = [r for r, _ in self._pending]
        joined = concat_samples(runs)
        docs = pa.concat_arrays([d for _, d in self._pending]) if len(self._pending) > 1 else self._pending[0][1]
        head, head_docs = _take(joined, docs, 0, count)
        rest = joined.samples - count
        self._pending = [_take(joined, docs, count, joined.samples)] if rest else []
        self._pending_samples = rest
        number = len(self._closed_shards)
        for writer in self._writers.values():
            writer.add(head, number)
        digests = document_digests(head_docs)
        self._shard_keys.add(digests)
        self._document_keys.add(digests)
        self._shard_segments += len(digests)
        self._shard_counts.merge(ShardCounts(head.samples, head.token_count, head.loss_tokens))
        if self._shard_counts.samples == self._owner.samples_per_shard:
            self._close_shard()

    def abort(self) -> None:
        """The stage failed before close: formats that work beside the caller (lance's write thread) stop
        and drop their partial output; the others' staged files go with the staged directory."""
        self._document_keys.close()
        self._shard_keys.close()
        for fmt, writer in self._writers.items():
            abort = getattr(writer, "abort", None)
            if abort is not None:
                try:
                    abort()
                except Exception:  # noqa: BLE001 - the stage's own error is the one to raise
                    log.exception("aborting the %s writer of %s failed", fmt, self._prefix)

    def _close_shard(self) -> None:
        name = f"{self._prefix}/shard-{len(self._closed_shards):05d}"
        documents = self._shard_keys.distinct()
        self._shard_keys.close()
        self._closed_shards.append({"name": name, **self._shard_counts.as_dict(), "documents": documents})
        self.pieces += self._shard_segments
        self._shard_keys, self._shard_segments = self._open_shard_keys(), 0
        self._shard_counts = ShardCounts()

    def close(self) -> None:
        if self.closed:
            return
        if self._pending_samples:
            self._flush(self._pending_samples)
        if self._shard_counts.samples:
            self._close_shard()
        for fmt, writer in self._writers.items():
            files = writer.close_set()
            if len(files) != len(self._closed_shards):
                raise ShardSetError(f"{fmt} wrote {len(files)} shards for {self._prefix}, "
                                    f"expected {len(self._closed_shards)}")
            self.shards[fmt] = [{**stats, "files": f, "bytes": sum(e["bytes"] for e in f.values())}
                                for stats, f in zip(self._closed_shards, files, strict=True)]
        self.documents = self._document_keys.distinct()
        self._document_keys.close()
        self._shard_keys.close()  # the next shard's, opened by the last close: empty
        self.closed = True

    def set_entry(self, fmt: str) -> dict:
        shards = self.shards[fmt]
        return {
            "split": self.split,
            "source": self.source,
            "samples": sum(s["samples"] for s in shards),
            "tokens": sum(s["tokens"] for s in shards),
            "documents": self.documents,
            "shards": shards,
        }


class ShardSetWriter:
    """Shards of every (split, source) in every configured format, and one index.json per format."""

    def __init__(self, staged: StagedDir, formats: list[str], header: ShardSetHeader, samples_per_shard: int,
                 spill_dir: Path | None = None):
        """`spill_dir`: where each set's document digests wait for the count (spilled_keys.py; the
        caller removes it); None keeps them in memory."""
        registered = format_names()
        unknown = [f for f in formats if f not in registered]
        if unknown or not formats:
            raise ShardSetError(f"formats must be a non-empty subset of the registered {list(registered)}, "
                                f"got {formats}")
        if samples_per_shard < 1:
            raise ShardSetError(f"samples_per_shard must be positive, got {samples_per_shard}")
        dtype = header.token_dtype
        if not 0 <= header.pad_id <= np.iinfo(dtype).max:
            raise ShardSetError(f"pad_id {header.pad_id} does not fit the token dtype {dtype.name}")
        self.staged = staged
        self.formats = sorted(set(formats), key=registered.index)
        self.header = header
        self.samples_per_shard = samples_per_shard
        self.spill_dir = spill_dir
        self._groups: dict[tuple[str, str], ShardGroupWriter] = {}

    def group(self, split: str, source: str, documents: int = 0) -> ShardGroupWriter:
        """The writer of one (split, source); `documents`: about how many it will hold (input rows),
        which sizes the partitions of its distinct-document count."""
        for what, value in (("split", split), ("source", source)):
            if not SOURCE_NAME_RE.match(value):
                raise ShardSetError(f"{what} {value!r} cannot name a shard directory (pattern {SOURCE_NAME_PATTERN})")
        key = (split, source)
        if key in self._groups:
            raise ShardSetError(f"shards of {split}/{source} were already written")
        self._groups[key] = ShardGroupWriter(self, split, source, documents)
        return self._groups[key]

    def abort(self) -> None:
        """Give up every group's writers (a failure before `close`): no write thread outlives the stage."""
        for key in sorted(self._groups):
            self._groups[key].abort()

    def close(self) -> dict[str, dict]:
        """Close every group and write each format's index.json; returns the indexes by format."""
        groups = [self._groups[k] for k in sorted(self._groups)]
        for g in groups:
            g.close()
        indexes = {}
        for fmt in self.formats:
            sets = [g.set_entry(fmt) for g in groups]
            samples = sum(s["samples"] for s in sets)
            tokens = sum(s["tokens"] for s in sets)
            pieces = sum(g.pieces for g in groups)
            index = self.header.index_head(fmt)
            index["sets"] = sets
            index["totals"] = {
                "samples": samples,
                "tokens": tokens,
                "documents": sum(s["documents"] for s in sets),  # the sets are disjoint by (split, source)
                "pieces": pieces,
                "efficiency": round(tokens / (samples * self.header.seq_len), 6) if samples else 0.0,
            }
            self.staged.write_bytes(f"{fmt}/{SHARD_INDEX_FILE}", index_bytes(index))
            indexes[fmt] = index
        return indexes
