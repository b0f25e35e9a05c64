"""Zero-copy reads of one split's `flat` shard sets through np.memmap.

A sample is addressed as (source index, index within that source's set); the shards of a set are
concatenated in index order. Files are mapped lazily, per process: a DataLoader worker maps what it
reads itself, and a pickled reader (spawn start method) carries no open maps. Every file's size is
checked against the index when the reader is built (a stat, no read).

Checksums (`verify`): "none" hashes nothing; "first_open" hashes a shard's files (sha256 against the
index) the first time a process opens the shard; "always" on every open, and `drop_maps()` (called by the
loader at every iter(): every epoch and every resume) closes them, so a file that changes during a run is
caught at the next epoch. `on_corrupt="skip"` needs every rank to leave out the same shards before the
global order is computed, so `_skip_corrupt()` checks every shard when the reader is built (see
`_skip_corrupt` for why a lazily found corruption cannot be skipped).
"""

from __future__ import annotations

import hashlib
import logging
import resource
from bisect import bisect_right
from collections.abc import Iterator
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
VERIFY_MODES = ("none", "first_open", "always")
ON_CORRUPT = ("stop", "skip")

log = logging.getLogger("training.data")


class ShardDataError(ValueError):
    """A shard file disagrees with the index or the format (the message names the file)."""


class CorruptShardError(ShardDataError):
    """A shard's file differs from the index (missing, size or sha256): the message names the shard, the
    file and what differed."""


@dataclass(frozen=True)
class SkippedShard:
    """A shard left out of the split because its files differ from the index."""

    source: str
    shard: str
    """The shard's name in the index (`<split>/<source>/shard-NNNNN`)."""
    samples: int
    reason: str
    """Which file differed and how (the same words a stop would raise)."""


def file_problem(root: Path, entry: FileEntry, hash_it: bool) -> str | None:
    """How `entry`'s file differs from the index (missing, size, sha256), or None when it matches."""
    path = root / entry.path
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return f"{entry.path}: missing (listed in the index)"
    if size != entry.bytes:
        return f"{entry.path}: {size} bytes on disk, the index says {entry.bytes} (truncated or replaced file)"
    if not hash_it:
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            digest.update(chunk)
    if digest.hexdigest() != entry.sha256:
        return (f"{entry.path}: sha256 {digest.hexdigest()} does not match the index ({entry.sha256}): the file "
                f"is corrupt or from another build")
    return None


def shard_problem(root: Path, shard: Shard, hash_it: bool) -> str | None:
    """The first file of `shard` that differs from the index, described; None when all match."""
    for entry in shard.files():
        problem = file_problem(root, entry, hash_it)
        if problem is not None:
            return problem
    return None


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

    def __init__(self, index: FlatIndex, shard: Shard) -> None:
        root, rows = index.root, (shard.samples, index.seq_len)
        self.shard = shard
        self.tokens = map_file(root, shard.tokens, TOKEN_DTYPES[index.token_dtype], rows)
        self.seqptr = map_file(root, shard.seqptr, SEQPTR_DTYPE, (shard.samples + 1,))
        # a shard whose samples are all empty has a 0-byte seqlens file, which cannot be mapped
        self.seqlens = (map_file(root, shard.seqlens, SEQLEN_DTYPE, (shard.segments,)) if shard.segments
                        else np.zeros(0, SEQLEN_DTYPE))
        self.mask = map_file(root, shard.mask, MASK_DTYPE, rows) if shard.mask else None

    def row_into(self, j: int, tokens: np.ndarray, mask: np.ndarray | None) -> None:
        """Sample j's first len(tokens) positions into `tokens` (and its loss mask into `mask`): the one
        copy, uint16/uint32 -> int64 straight from the page cache."""
        tokens[:] = self.tokens[j, : len(tokens)]
        if mask is not None:
            mask[:] = self.mask[j, : len(mask)]


def map_file(root: Path, entry: FileEntry, dtype: type, shape: tuple[int, ...]) -> np.ndarray:
    """`entry`'s file mapped read-only as a plain ndarray (`.view(np.ndarray)`: see _MappedShard)."""
    return np.memmap(root / entry.path, dtype=dtype, mode="r", shape=shape).view(np.ndarray)


class SplitReader:
    """The shard sets of one split; source index = position of the set in the index (sorted by source).

    Sample i of a source counts only the shards in use: every shard unless `_skip_corrupt()` left some out.
    Sample ids keep the index's numbering (a skipped shard leaves a gap), so they name the same sample
    whatever was skipped."""

    mapped_shard: type[_MappedShard] = _MappedShard
    """How a shard's files are mapped and a sample's row copied out (flat_varlen_reader maps its own)."""

    def __init__(self, index: FlatIndex, split: str, verify: str = "none", on_corrupt: str = "stop") -> None:
        if verify not in VERIFY_MODES:
            raise ValueError(f"verify: expected one of {list(VERIFY_MODES)}, got {verify!r}")
        if on_corrupt not in ON_CORRUPT:
            raise ValueError(f"on_corrupt: expected one of {list(ON_CORRUPT)}, got {on_corrupt!r}")
        self.index = index
        self.split = split
        self.verify = verify
        self.sets = index.split_sets(split)
        self.sources = tuple(s.source for s in self.sets)
        self.skipped: tuple[SkippedShard, ...] = ()
        self._use_shards([tuple(range(len(s.shards))) for s in self.sets])
        self._mapped: dict[tuple[int, int], _MappedShard] = {}
        self._verified: set[tuple[int, int]] = set()
        """Shards hashed by this process (or, for on_corrupt='skip', when the reader was built: pickled along)."""
        self.samples_read = 0
        """Samples this process has read (tokens rows): the work a resume must not repeat."""
        if on_corrupt == "skip":
            self._skip_corrupt()
        self._open_files()

    def _use_shards(self, used: list[tuple[int, ...]]) -> None:
        self._used = used
        """Per source: the shard numbers read, in index order."""
        counts = [[self.sets[src].shards[k].samples for k in ks] for src, ks in enumerate(used)]
        self.sizes = np.array([sum(c) for c in counts], dtype=np.int64)
        # first sample of every used shard within its source; bisect_right(starts, i) - 1 is sample i's shard
        # (a 0-sample shard shares its start with the next one and is never picked). Python ints: bisect on a
        # list costs ~0.2 us a lookup, np.searchsorted ~3 us.
        self._starts = [np.cumsum([0] + c[:-1]).tolist() for c in counts]
        # the index's own first sample of each used shard: sample ids number samples as the index does
        self._index_starts = [[sum(sh.samples for sh in s.shards[:k]) for k in ks]
                              for s, ks in zip(self.sets, used, strict=True)]
        self._size_list = self.sizes.tolist()

    def _used_shards(self) -> Iterator[tuple[int, int, Shard]]:
        for src, ks in enumerate(self._used):
            for k in ks:
                yield src, k, self.sets[src].shards[k]

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_mapped"] = {}  # maps are per process: a spawned worker opens its own
        return state

    def _open_files(self) -> None:
        """Check every used file's size against the index (a stat each) and make room for their descriptors:
        a missing or truncated file is an error naming it before any sample is read."""
        for _, _, sh in self._used_shards():
            problem = shard_problem(self.index.root, sh, hash_it=False)
            if problem is not None:
                raise self._corrupt(sh, problem)
        self._ensure_open_file_limit()

    def _corrupt(self, sh: Shard, problem: str) -> CorruptShardError:
        return CorruptShardError(f"{self.index.root}/{problem} (shard {sh.name} of {self.index.index_path}; "
                                 f"on_corrupt='skip' leaves such shards out)")

    def _ensure_open_file_limit(self) -> None:
        """Python's mmap keeps a descriptor per mapped file (until 3.13's trackfd=False), and a process
        that reads at random maps every file of the split sooner or later: 3-4 per shard, so 1,000 shards
        pass the common soft limit of 1,024. Raise the soft limit (up to the hard one, which needs no
        privilege) before that fails in a worker with EMFILE; if even the hard limit is too low, say so."""
        needed = sum(len(sh.files()) for _, _, sh in self._used_shards() if sh.samples) + FD_HEADROOM
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY or needed <= soft:
            return
        if hard != resource.RLIM_INFINITY and needed > hard:
            raise ShardDataError(f"split {self.split!r} of {self.index.index_path} maps {needed - FD_HEADROOM} files "
                                 f"(one descriptor each, + {FD_HEADROOM} spare) but the open-file limit is {hard}: "
                                 f"raise it (ulimit -Hn) or pack fewer, larger shards")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))

    def _skip_corrupt(self) -> tuple[SkippedShard, ...]:
        """Leave out every shard whose files differ from the index: a missing or truncated file always (a
        stat), a changed byte when `verify` is not "none" (sha256 of every file: 1.5 GB/s per core measured
        here from the page cache, so ~1 s per GB per rank with the reads).

        Called when the loader is built, before the global order, on every rank from the same files, so
        every rank and worker (they get this reader pickled) and every resume over the same files agrees on
        what is left out and the order stays one. A corruption found later, lazily in one process, is not
        skipped: leaving a shard out shifts every later sample of its source, and the ranks that never read
        it would keep the old order; `_open` stops with an error instead."""
        hash_it = self.verify != "none"
        used: list[tuple[int, ...]] = []
        skipped = []
        for src, ks in enumerate(self._used):
            keep = []
            for k in ks:
                sh = self.sets[src].shards[k]
                problem = shard_problem(self.index.root, sh, hash_it)
                if problem is None:
                    keep.append(k)
                    if hash_it:
                        self._verified.add((src, k))
                else:
                    skipped.append(SkippedShard(self.sources[src], sh.name, sh.samples, problem))
                    log.warning("skipping corrupt shard %s of %s (%d samples): %s", sh.name, self.index.index_path,
                                sh.samples, problem)
            used.append(tuple(keep))
        self.skipped = tuple(skipped)
        self._use_shards(used)
        return self.skipped

    def _check(self, src: int, k: int, sh: Shard, hash_it: bool) -> None:
        problem = shard_problem(self.index.root, sh, hash_it)
        if problem is not None:
            raise self._corrupt(sh, problem)
        if hash_it:
            self._verified.add((src, k))

    def drop_maps(self) -> None:
        """Close this process's maps: the next read opens (and with verify="always", hashes) again."""
        self._mapped.clear()

    def _shard(self, src: int, k: int) -> _MappedShard:
        m = self._mapped.get((src, k))
        if m is None:
            sh = self.sets[src].shards[k]
            hash_it = self.verify == "always" or (self.verify == "first_open" and (src, k) not in self._verified)
            # a stat before every map even unverified: a file truncated since the build would map short and
            # fault (SIGBUS) on the missing pages instead of raising
            self._check(src, k, sh, hash_it)
            m = self.mapped_shard(self.index, sh)
            self._mapped[(src, k)] = m
        return m

    def _locate(self, src: int, i: int) -> tuple[_MappedShard, int]:
        if not 0 <= i < self._size_list[src]:
            raise IndexError(f"sample {i} is outside source {self.sources[src]!r} ({self._size_list[src]} samples)")
        starts = self._starts[src]
        u = bisect_right(starts, i) - 1
        k = self._used[src][u]
        m = self._mapped.get((src, k)) or self._shard(src, k)
        return m, i - starts[u]

    def _index_position(self, src: int, i: int) -> int:
        """Sample i of the used shards, numbered as the index numbers the source's samples."""
        u = bisect_right(self._starts[src], i) - 1
        return self._index_starts[src][u] + i - self._starts[src][u]

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
        for src, k, sh in self._used_shards():
            if sh.samples:
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
        renumber = bool(self.skipped)  # ids number samples as the index does, gaps for skipped shards included
        for b, (s, i) in enumerate(zip(src.tolist(), idx.tolist(), strict=True)):
            m, j = self._locate(s, i)
            m.row_into(j, tokens[b], None if mask is None else mask[b])
            segs.append(self._segments(m, j))
            where.append((m, j))
            ids.append((s << SOURCE_SHIFT) | (self._index_position(s, i) if renumber else i))
        self.samples_read += n
        return self._checked(SampleBatch.from_segments(tokens, mask, segs, np.array(ids, dtype=np.int64)), where)
