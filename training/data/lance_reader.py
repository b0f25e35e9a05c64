"""Reading a `lance` shard set (platform_assets/packing/SHARD_FORMAT.md): one Lance dataset per
(split, source), shard k = fragment k, rows in sample order.

The loader's global order, batch plan and resume are those of `flat` (they depend on the index's sample
counts only); only how a micro-batch's rows are fetched differs: `dataset.take(rows)` once per source
of the micro-batch instead of a memmap row copy per sample. The small per-shard segment tables
(`seqlens`, 4 bytes a segment) are read once per shard and process, like flat's mapped seqptr/seqlens.

Checksums work as for flat: a shard's files are its data file, the manifest and transaction of the
version that added it (and the version hint for the last shard), hashed against the index by
`verify`. Datasets are opened per process, at the version of the last shard in use (so a skipped
last shard's manifest is never read), and dropped on pickling: a DataLoader worker opens its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from training.data.index_fields import IndexFields
from training.data.shard_index import MASK_DTYPE, TOKEN_DTYPES, FileEntry, FlatIndex, ShardIndexError
from training.data.shard_reader import SOURCE_SHIFT, SampleBatch, ShardDataError, SplitReader

_fields = IndexFields(ShardIndexError)
DATASET_SUFFIX = ".lance"
ROLES = ("data", "manifest", "transaction")  # every shard; the last one also has "version_hint"


@dataclass(frozen=True)
class LanceShard:
    """A `lance` shard entry: its files (checked and hashed like flat's), the data file first."""

    name: str
    samples: int
    data: FileEntry
    others: tuple[FileEntry, ...]

    @property
    def dataset(self) -> str:
        """The set's dataset directory, relative to the index."""
        return self.data.path.rpartition(f"{DATASET_SUFFIX}/data/")[0] + DATASET_SUFFIX

    # where shard_reader's messages name a flat file, a lance shard names its data file
    seqlens = seqptr = tokens = property(lambda self: self.data)

    def files(self) -> tuple[FileEntry, ...]:
        return (self.data, *self.others)


def lance_shard(doc: dict[str, Any], seq_len: int, itemsize: int, has_mask: bool, where: str) -> LanceShard:
    """Parse one shard entry of a lance index (shard_index's hook for format `lance`)."""
    name = _fields.need(doc, "name", str, where)
    where = f"{where} ({name})"
    samples = _fields.count(doc, "samples", where)
    files = _fields.need(doc, "files", dict, where)
    w = f"{where}.files"
    missing = [r for r in ROLES if r not in files]
    unknown = sorted(set(files) - set(ROLES) - {"version_hint"})
    if missing or unknown:
        raise ShardIndexError(f"{w}: expected files {list(ROLES)} (+ version_hint), got {sorted(files)}")

    def entry(role: str) -> FileEntry:
        e = _fields.need(files, role, dict, w)
        path = _fields.relative_path(_fields.need(e, "path", str, f"{w}.{role}"), f"{w}.{role}")
        return FileEntry(path, _fields.count(e, "bytes", f"{w}.{role}"), _fields.sha256(e, f"{w}.{role}"))

    data = entry("data")
    if f"{DATASET_SUFFIX}/data/" not in data.path:
        raise ShardIndexError(f"{w}.data.path: {data.path!r} is not a data file of a <split>/<source>.lance dataset")
    others = tuple(entry(r) for r in sorted(files) if r != "data")
    return LanceShard(name, samples, data, others)


class _OpenShard:
    """One lance shard in this process: its segment tables and where its rows start in the dataset."""

    def __init__(self, shard: LanceShard, src: int, first_row: int, seqlens: np.ndarray, seqptr: np.ndarray):
        self.shard, self.src, self.first_row = shard, src, first_row
        self.seqlens, self.seqptr = seqlens, seqptr


class LanceSplitReader(SplitReader):
    """SplitReader over `lance` datasets: same sources, sizes, skipping, verification and sample ids;
    rows come from `LanceDataset.take`."""

    def __init__(self, index: FlatIndex, split: str, verify: str = "none", on_corrupt: str = "stop") -> None:
        self._datasets: dict[int, Any] = {}
        super().__init__(index, split, verify, on_corrupt)
        # dataset row of each shard's first sample: fragments hold every shard of the index, skipped or not
        self._first_rows = [np.cumsum([0] + [sh.samples for sh in s.shards[:-1]]).tolist() for s in self.sets]

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_datasets"] = {}  # Lance handles (and their runtime) are per process
        return state

    def _ensure_open_file_limit(self) -> None:
        pass  # Lance opens data files through its object store as it reads: no descriptor kept per shard

    def drop_maps(self) -> None:
        super().drop_maps()
        self._datasets.clear()

    def _dataset(self, src: int) -> Any:
        ds = self._datasets.get(src)
        if ds is None:
            import lance

            used = self._used[src]
            version = (max(used) + 1) if used else 1  # the version that added the last shard in use
            ds = lance.dataset(str(self.index.root / self.sets[src].shards[0].dataset), version=version)
            self._datasets[src] = ds
        return ds

    def _shard(self, src: int, k: int) -> _OpenShard:  # type: ignore[override]
        m = self._mapped.get((src, k))
        if m is None:
            sh = self.sets[src].shards[k]
            hash_it = self.verify == "always" or (self.verify == "first_open" and (src, k) not in self._verified)
            self._check(src, k, sh, hash_it)
            frag = self._dataset(src).get_fragment(k)
            if frag is None or frag.count_rows() != sh.samples:
                raise ShardDataError(f"{self.index.root / sh.data.path}: fragment {k} of {sh.dataset} does not "
                                     f"hold the shard's {sh.samples} samples")
            lists = frag.to_table(columns=["seqlens"])["seqlens"].combine_chunks()
            seqptr = np.zeros(sh.samples + 1, np.int64)
            np.cumsum(lists.value_lengths().to_numpy(zero_copy_only=False), out=seqptr[1:])
            seqlens = lists.flatten().to_numpy().astype(np.int32)
            m = _OpenShard(sh, src, self._first_rows[src][k], seqlens, seqptr)
            self._mapped[(src, k)] = m  # type: ignore[assignment]
        return m

    def read(self, src: np.ndarray, idx: np.ndarray, width: int | None = None) -> SampleBatch:
        """Samples (src[b], idx[b]), their first `width` positions: one `take` per source in the batch."""
        width = self.index.seq_len if width is None else width
        n, seq_len = len(src), self.index.seq_len
        tokens = np.empty((n, width), dtype=np.int64)
        mask = np.empty((n, width), dtype=MASK_DTYPE) if self.index.has_loss_mask else None
        columns = ["input_ids"] + (["loss_mask"] if mask is not None else [])
        segs, where, ids, rows = [], [], [], np.empty(n, np.int64)
        renumber = bool(self.skipped)
        src_list = src.tolist()
        for b, (s, i) in enumerate(zip(src_list, idx.tolist(), strict=True)):
            m, j = self._locate(s, i)
            rows[b] = m.first_row + j
            segs.append(self._segments(m, j))
            where.append((m, j))
            ids.append((s << SOURCE_SHIFT) | (self._index_position(s, i) if renumber else i))
        src_arr = np.asarray(src_list, np.int64)
        for s in np.unique(src_arr).tolist():
            at = np.flatnonzero(src_arr == s)
            table = self._dataset(s).take(rows[at].tolist(), columns=columns)
            got = table["input_ids"].combine_chunks().flatten().to_numpy()
            dtype = TOKEN_DTYPES[self.index.token_dtype]
            tokens[at] = got.astype(dtype, copy=False).reshape(len(at), seq_len)[:, :width]
            if mask is not None:
                mask[at] = table["loss_mask"].combine_chunks().flatten().to_numpy().reshape(len(at), seq_len)[:, :width]
        self.samples_read += n
        return self._checked(SampleBatch.from_segments(tokens, mask, segs, np.array(ids, dtype=np.int64)),
                             where)  # type: ignore[arg-type]
