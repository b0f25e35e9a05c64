"""Reading a `flat_varlen` shard set (platform_assets/packing/SHARD_FORMAT.md): `flat` without padding on
disk. A shard's `tokens` (and `mask`) hold the non-padding tokens of its samples concatenated, and
`offsets` (int64 [samples + 1]) finds sample i at tokens[offsets[i]:offsets[i+1]]: random access is two
reads of a memmap, as for `flat`.

Only the sample source differs from `flat`: the global order, mixture, rank blocks, length bucketing and
resume are SplitReader's (they depend on the index's sample counts and the segment tables, which are
`flat`'s files unchanged). A row is copied out and padded with pad_id (mask 0) up to the width asked for,
so `collate="padded"` trims each micro-batch to its longest sample and `collate="packed"` gets seq_len
rows, both as from the padded `flat` set of the same samples. Every sample's offsets are checked against
its segment lengths when it is read (a damaged offsets file is an error naming it, never a shifted row),
and a sample longer than its row is an error naming it, never truncated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from training.data.index_fields import IndexFields
from training.data.shard_index import (
    MASK_DTYPE,
    SEQLEN_DTYPE,
    SEQPTR_DTYPE,
    TOKEN_DTYPES,
    FileEntry,
    FlatIndex,
    ShardIndexError,
)
from training.data.shard_reader import ShardDataError, SplitReader, map_file

_fields = IndexFields(ShardIndexError)
OFFSETS_DTYPE = np.int64


@dataclass(frozen=True)
class VarlenShard:
    """A `flat_varlen` shard entry: `flat`'s files plus `offsets`, tokens and mask without padding."""

    name: str
    samples: int
    token_count: int
    """Non-padding tokens of the shard (the entry's `tokens`): the length of the tokens and mask files."""
    tokens: FileEntry
    offsets: FileEntry
    seqlens: FileEntry
    seqptr: FileEntry
    mask: FileEntry | None

    @property
    def segments(self) -> int:
        return self.seqlens.bytes // np.dtype(SEQLEN_DTYPE).itemsize

    def files(self) -> tuple[FileEntry, ...]:
        return (self.tokens, self.offsets, self.seqlens, self.seqptr) + ((self.mask,) if self.mask else ())


def varlen_shard(doc: dict[str, Any], seq_len: int, itemsize: int, has_mask: bool, where: str) -> VarlenShard:
    """Parse one shard entry of a flat_varlen index (shard_index's hook for this format), each file's
    size checked against the shard's counts."""
    name = _fields.need(doc, "name", str, where)
    where = f"{where} ({name})"
    samples = _fields.count(doc, "samples", where)
    token_count = _fields.count(doc, "tokens", where)
    if token_count > samples * seq_len:
        raise ShardIndexError(f"{where}.tokens: {token_count} tokens do not fit {samples} samples of seq_len {seq_len}")
    files = _fields.need(doc, "files", dict, where)
    w = f"{where}.files"
    expected = {"tokens", "offsets", "seqlens", "seqptr"} | ({"mask"} if has_mask else set())
    if set(files) != expected:
        raise ShardIndexError(f"{w}: expected files {sorted(expected)} (has_loss_mask={has_mask}), got {sorted(files)}")

    def entry(role: str, expected_bytes: int | None) -> FileEntry:
        e = _fields.need(files, role, dict, w)
        path = _fields.relative_path(_fields.need(e, "path", str, f"{w}.{role}"), f"{w}.{role}")
        nbytes = _fields.count(e, "bytes", f"{w}.{role}")
        if expected_bytes is not None and nbytes != expected_bytes:
            raise ShardIndexError(f"{w}.{role}.bytes: {nbytes} does not fit the shard ({expected_bytes} expected "
                                  f"from its {samples} samples and {token_count} tokens)")
        return FileEntry(path, nbytes, _fields.sha256(e, f"{w}.{role}"))

    seqlens = entry("seqlens", None)
    if seqlens.bytes % np.dtype(SEQLEN_DTYPE).itemsize:
        raise ShardIndexError(f"{w}.seqlens.bytes: {seqlens.bytes} is not a whole number of int32")
    pointers = (samples + 1) * np.dtype(OFFSETS_DTYPE).itemsize
    return VarlenShard(name, samples, token_count, tokens=entry("tokens", token_count * itemsize),
                       offsets=entry("offsets", pointers), seqlens=seqlens, seqptr=entry("seqptr", pointers),
                       mask=entry("mask", token_count) if has_mask else None)


class _MappedVarlenShard:
    """The files of one flat_varlen shard, mapped read-only (as plain ndarrays, like flat's)."""

    def __init__(self, index: FlatIndex, shard: VarlenShard) -> None:
        root = self.root = index.root
        self.shard = shard
        self.pad_id = index.pad_id
        self.seq_len = index.seq_len
        # np.memmap refuses a 0-byte file: a shard of empty samples (or no samples) holds no tokens
        self.tokens = (map_file(root, shard.tokens, TOKEN_DTYPES[index.token_dtype], (shard.token_count,))
                       if shard.token_count else np.zeros(0, TOKEN_DTYPES[index.token_dtype]))
        self.mask = None
        if shard.mask is not None:
            self.mask = map_file(root, shard.mask, MASK_DTYPE, (shard.token_count,)) if shard.token_count \
                else np.zeros(0, MASK_DTYPE)
        self.offsets = map_file(root, shard.offsets, OFFSETS_DTYPE, (shard.samples + 1,))
        self.seqptr = map_file(root, shard.seqptr, SEQPTR_DTYPE, (shard.samples + 1,))
        self.seqlens = (map_file(root, shard.seqlens, SEQLEN_DTYPE, (shard.segments,)) if shard.segments
                        else np.zeros(0, SEQLEN_DTYPE))

    def row_into(self, j: int, tokens: np.ndarray, mask: np.ndarray | None) -> None:
        """Sample j's tokens into the row, pad_id after (mask 0): the row as the padded `flat` file holds it.
        Its offsets are checked against the tokens file and its segments' sum first (Python ints from
        .tolist(): a numpy sum per sample cost 2 us, a fifth of the padded loader's time)."""
        a, b = self.offsets[j: j + 2].tolist()
        p, q = self.seqptr[j: j + 2].tolist()
        if not 0 <= a <= b <= len(self.tokens) or b - a != sum(self.seqlens[p:q].tolist()):
            raise ShardDataError(f"{self.root / self.shard.offsets.path}: sample {j} holds tokens [{a}, {b}) of "
                                 f"{len(self.tokens)}, but its segments {self.seqlens[p:q].tolist()} "
                                 f"(seqptr [{p}, {q})) need {sum(self.seqlens[p:q].tolist())}")
        n = b - a
        if n > len(tokens):  # a row narrower than the sample: copying its first positions would lose the rest
            raise ShardDataError(f"{self.root / self.shard.offsets.path} (shard {self.shard.name}): sample {j} holds "
                                 f"{n} tokens, more than the {len(tokens)} positions of its row (seq_len "
                                 f"{self.seq_len}): the writer exceeded seq_len or the reader was asked for too few")
        tokens[:n] = self.tokens[a: b]
        tokens[n:] = self.pad_id
        if mask is not None:
            mask[:n] = self.mask[a: b]
            mask[n:] = 0


class VarlenSplitReader(SplitReader):
    """SplitReader over `flat_varlen` shards: same sources, sizes, skipping, verification and sample ids."""

    mapped_shard = _MappedVarlenShard  # type: ignore[assignment]
