"""Zero-copy reads of one split's `flat` shard sets through np.memmap.

A sample is addressed as (source index, index within that source's set); the shards of a set are
concatenated in index order. Files are mapped lazily, per process: a DataLoader worker maps what it
reads itself, and a pickled reader (spawn start method) carries no open maps. Every file's size is
checked against the index when the reader is built (a stat, no read); `verify_checksums` hashes them.
"""

from __future__ import annotations

import hashlib
import resource
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from training.data.shard_index import (
    MASK_DTYPE,
    SEQLEN_DTYPE,
    SEQPTR_DTYPE,
    TOKEN_DTYPES,
    FileEntry,
    FlatIndex,
    Shard,
)

_HASH_CHUNK = 1 << 20  # 1 MiB reads: hashing runs at disk speed without holding a whole shard in memory
FD_HEADROOM = 256  # descriptors beyond the mapped files: DataLoader pipes and shared memory, sockets, logs


class ShardDataError(ValueError):
    """A shard file disagrees with the index or the format (the message names the file)."""


@dataclass(frozen=True)
class SampleBatch:
    """Raw samples, before collation: rows in the order they were asked for."""

    tokens: np.ndarray
    """[B, width] int64: the first `width` positions of each sample (pad_id after its segments)."""
    mask: np.ndarray | None
    """[B, width] uint8 loss mask, or None when the shard set has none (every token counts)."""
    seqlens: np.ndarray
    """int64: the segment lengths of all B samples, concatenated in row order."""
    segments: np.ndarray
    """int64 [B]: how many of `seqlens` belong to each row."""
    segment_rows: np.ndarray
    """int64 [len(seqlens)]: the row of each segment."""
    lengths: np.ndarray
    """int64 [B]: non-padding tokens of each row (the sum of its segment lengths)."""
    sample_ids: np.ndarray
    """int64 [B]: source index << SOURCE_SHIFT | index within that source's set."""

    @classmethod
    def from_segments(cls, tokens: np.ndarray, mask: np.ndarray | None, segs: list[np.ndarray],
                      sample_ids: np.ndarray) -> SampleBatch:
        counts = np.array([len(x) for x in segs], dtype=np.int64)
        seqlens = np.concatenate(segs, dtype=np.int64) if segs else np.zeros(0, np.int64)
        rows = np.repeat(np.arange(len(segs), dtype=np.int64), counts)
        lengths = np.bincount(rows, weights=seqlens, minlength=len(segs)).astype(np.int64)  # exact below 2^53
        return cls(tokens, mask, seqlens, counts, rows, lengths, sample_ids)


SOURCE_SHIFT = 40  # sample ids: 2^40 (~10^12) samples per source, 2^23 sources fit in an int64


class _MappedShard:
    """The four (three without a mask) files of one shard, mapped read-only as plain ndarrays.

    `.view(np.ndarray)` drops the memmap subclass (its __array_finalize__ costs microseconds on every
    slice); the view's base keeps the map open."""

    def __init__(self, root: Path, shard: Shard, seq_len: int, token_dtype: str) -> None:
        def mapped(entry: FileEntry, dtype: type, shape: tuple[int, ...]) -> np.ndarray:
            return np.memmap(root / entry.path, dtype=dtype, mode="r", shape=shape).view(np.ndarray)

        self.shard = shard
        self.tokens = mapped(shard.tokens, TOKEN_DTYPES[token_dtype], (shard.samples, seq_len))
        self.seqptr = mapped(shard.seqptr, SEQPTR_DTYPE, (shard.samples + 1,))
        # a shard whose samples are all empty has a 0-byte seqlens file, which cannot be mapped
        self.seqlens = (mapped(shard.seqlens, SEQLEN_DTYPE, (shard.segments,)) if shard.segments
                        else np.zeros(0, SEQLEN_DTYPE))
        self.mask = mapped(shard.mask, MASK_DTYPE, (shard.samples, seq_len)) if shard.mask else None


class SplitReader:
    """The shard sets of one split; source index = position of the set in the index (sorted by source)."""

    def __init__(self, index: FlatIndex, split: str) -> None:
        self.index = index
        self.split = split
        self.sets = index.split_sets(split)
        self.sources = tuple(s.source for s in self.sets)
        self.sizes = np.array([s.samples for s in self.sets], dtype=np.int64)
        # first sample of every shard within its set; bisect_right(starts, i) - 1 is sample i's shard (a
        # 0-sample shard shares its start with the next one and is never picked). Python ints: bisect on a
        # list costs ~0.2 us a lookup, np.searchsorted ~3 us.
        self._starts = [np.cumsum([0] + [sh.samples for sh in s.shards[:-1]]).tolist() for s in self.sets]
        self._size_list = self.sizes.tolist()
        self._mapped: dict[tuple[int, int], _MappedShard] = {}
        self.samples_read = 0
        """Samples this process has read (tokens rows): the work a resume must not repeat."""
        self._check_sizes()
        self._ensure_open_file_limit()

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_mapped"] = {}  # maps are per process: a spawned worker opens its own
        return state

    def _ensure_open_file_limit(self) -> None:
        """Python's mmap keeps a descriptor per mapped file (until 3.13's trackfd=False), and a process
        that reads at random maps every file of the split sooner or later: 3-4 per shard, so 1,000 shards
        pass the common soft limit of 1,024. Raise the soft limit (up to the hard one, which needs no
        privilege) before that fails in a worker with EMFILE; if even the hard limit is too low, say so."""
        needed = sum(len(sh.files()) for s in self.sets for sh in s.shards if sh.samples) + FD_HEADROOM
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY or needed <= soft:
            return
        if hard != resource.RLIM_INFINITY and needed > hard:
            raise ShardDataError(f"split {self.split!r} of {self.index.index_path} maps {needed - FD_HEADROOM} files "
                                 f"(one descriptor each, + {FD_HEADROOM} spare) but the open-file limit is {hard}: "
                                 f"raise it (ulimit -Hn) or pack fewer, larger shards")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))

    def _check_sizes(self) -> None:
        for s in self.sets:
            for sh in s.shards:
                for f in sh.files():
                    path = self.index.root / f.path
                    try:
                        size = path.stat().st_size
                    except FileNotFoundError:
                        raise ShardDataError(f"{path}: missing (listed in {self.index.index_path})") from None
                    if size != f.bytes:
                        raise ShardDataError(f"{path}: {size} bytes on disk, the index says {f.bytes} "
                                             f"(truncated or replaced file)")

    def verify_checksums(self) -> None:
        """sha256 of every file of this split against the index; the first mismatch is an error naming it."""
        for s in self.sets:
            for sh in s.shards:
                for f in sh.files():
                    path = self.index.root / f.path
                    digest = hashlib.sha256()
                    with open(path, "rb") as fh:
                        while chunk := fh.read(_HASH_CHUNK):
                            digest.update(chunk)
                    if digest.hexdigest() != f.sha256:
                        raise ShardDataError(f"{path}: sha256 {digest.hexdigest()} does not match the index "
                                             f"({f.sha256}): the file is corrupt or from another build")

    def _shard(self, src: int, k: int) -> _MappedShard:
        m = self._mapped.get((src, k))
        if m is None:
            m = _MappedShard(self.index.root, self.sets[src].shards[k], self.index.seq_len, self.index.token_dtype)
            self._mapped[(src, k)] = m
        return m

    def _locate(self, src: int, i: int) -> tuple[_MappedShard, int]:
        if not 0 <= i < self._size_list[src]:
            raise IndexError(f"sample {i} is outside source {self.sources[src]!r} ({self._size_list[src]} samples)")
        starts = self._starts[src]
        k = bisect_right(starts, i) - 1
        m = self._mapped.get((src, k)) or self._shard(src, k)
        return m, i - starts[k]

    def _segments(self, m: _MappedShard, j: int) -> np.ndarray:
        a, b = m.seqptr[j: j + 2].tolist()
        if not 0 <= a <= b <= len(m.seqlens):
            raise ShardDataError(f"{self.index.root / m.shard.seqptr.path}: sample {j} points at segments "
                                 f"[{a}, {b}) of {len(m.seqlens)}")
        return m.seqlens[a:b]

    def _checked(self, batch: SampleBatch, where: list[tuple[_MappedShard, int]]) -> SampleBatch:
        """`batch` if its segment tables follow the format, else an error naming the file and sample."""
        if (not len(batch.lengths) or int(batch.lengths.max()) <= self.index.seq_len) and \
                (not len(batch.seqlens) or int(batch.seqlens.min()) > 0):
            return batch
        bad = batch.lengths > self.index.seq_len
        bad[batch.segment_rows[batch.seqlens <= 0]] = True
        if bad.any():
            b = int(np.argmax(bad))
            m, j = where[b]
            lens = batch.seqlens[batch.segment_rows == b].tolist()
            raise ShardDataError(f"{self.index.root / m.shard.seqlens.path}: sample {j} has segment lengths "
                                 f"{lens} (each must be > 0, their sum <= seq_len {self.index.seq_len})")
        return batch

    def lengths(self, src: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """Non-padding tokens of each sample (the sum of its segment lengths); reads no tokens."""
        where = [self._locate(s, i) for s, i in zip(src.tolist(), idx.tolist(), strict=True)]
        segs = [self._segments(m, j) for m, j in where]
        ids = np.zeros(len(segs), np.int64)
        return self._checked(SampleBatch.from_segments(np.zeros((len(segs), 0), np.int64), None, segs, ids),
                             where).lengths

    def check_one_segment_per_sample(self) -> None:
        """Padded collation treats a sample as one document: refuse sets that pack several per sample."""
        for src, s in enumerate(self.sets):
            for k, sh in enumerate(s.shards):
                if not sh.samples:
                    continue
                counts = np.diff(self._shard(src, k).seqptr)
                bad = np.flatnonzero(counts != 1)
                if len(bad):
                    raise ShardDataError(
                        f"{self.index.root / sh.seqptr.path}: sample {int(bad[0])} has {int(counts[bad[0]])} "
                        f"segments; collate='padded' needs one document per sample (use collate='packed' for "
                        f"packed sequences)")

    def read(self, src: np.ndarray, idx: np.ndarray, width: int | None = None) -> SampleBatch:
        """Samples (src[b], idx[b]), their first `width` positions (default: all seq_len)."""
        width = self.index.seq_len if width is None else width
        n = len(src)
        tokens = np.empty((n, width), dtype=np.int64)
        mask = np.empty((n, width), dtype=MASK_DTYPE) if self.index.has_loss_mask else None
        segs, where, ids = [], [], []
        for b, (s, i) in enumerate(zip(src.tolist(), idx.tolist(), strict=True)):
            m, j = self._locate(s, i)
            tokens[b] = m.tokens[j, :width]  # the one copy: uint16/uint32 -> int64 straight from the page cache
            if mask is not None:
                mask[b] = m.mask[j, :width]
            segs.append(self._segments(m, j))
            where.append((m, j))
            ids.append((s << SOURCE_SHIFT) | i)
        self.samples_read += n
        return self._checked(SampleBatch.from_segments(tokens, mask, segs, np.array(ids, dtype=np.int64)), where)
