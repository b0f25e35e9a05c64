"""Writing packed samples as shard sets: flat token files, Parquet and WebDataset tars, with their indexes.

The layout and every byte-level rule come from SHARD_FORMAT.md. Samples arrive as runs of
consecutive samples per (split, source); each format's shard files are written as a stream (a run
at most `ROWS_PER_ROW_GROUP` samples long) and hashed while written, so memory is one run per
(split, source), never a whole shard, and no file is read back to fill in its sha256.
Nothing here depends on time, thread order or dict order: the same samples give the same bytes.
"""

from __future__ import annotations

import hashlib
import io
import re
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from platform_assets.config import SOURCE_NAME_PATTERN
from platform_assets.packing.shard_index import (
    FORMAT_VERSION,
    FORMATS,
    INDEX_NAME,
    ROWS_PER_ROW_GROUP,
    ShardSamples,
    ShardSetError,
    concat_samples,
    index_bytes,
    token_dtype,
)
from platform_assets.storage import StagedDir

_NAME_RE = re.compile(SOURCE_NAME_PATTERN)  # split and source become path components


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

    def index_head(self, fmt: str) -> dict:
        return {
            "format": fmt,
            "format_version": FORMAT_VERSION,
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


class HashedOutput:
    """A write-only file that counts and sha256-hashes what passes through (tarfile and Parquet write
    through it into a staged file)."""

    def __init__(self, staged: StagedDir, name: str):
        self._out = staged.open_output(name)
        self._hash = hashlib.sha256()
        self.size = 0
        self.closed = False

    def write(self, data: bytes | memoryview | np.ndarray) -> int:
        view = memoryview(data).cast("B")
        self._hash.update(view)
        self._out.write(view)
        self.size += len(view)
        return len(view)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        pass

    def close(self) -> None:
        if not self.closed:
            self._out.close()
            self.closed = True

    def entry(self, rel: str) -> dict:
        """The index's file entry (closes the file)."""
        self.close()
        return {"path": rel, "bytes": self.size, "sha256": self._hash.hexdigest()}


class ShardFileWriter(Protocol):
    def add(self, run: ShardSamples) -> None: ...
    def close(self) -> dict[str, dict]: ...


class FlatShardWriter:
    """Four headerless little-endian files per shard: tokens, seqlens, seqptr (and mask)."""

    def __init__(self, staged: StagedDir, fmt_dir: str, name: str, shard: int, header: ShardSetHeader):
        self._dtype = header.token_dtype
        roles = ["tokens", "seqlens", "seqptr"] + (["mask"] if header.has_loss_mask else [])
        self._rels = {r: f"{name}.{r}.bin" for r in roles}
        self._out = {r: HashedOutput(staged, f"{fmt_dir}/{rel}") for r, rel in self._rels.items()}
        self._segments = 0
        self._out["seqptr"].write(np.zeros(1, "<i8"))

    def add(self, run: ShardSamples) -> None:
        self._out["tokens"].write(np.ascontiguousarray(run.tokens, dtype=self._dtype))
        self._out["seqlens"].write(np.ascontiguousarray(run.seqlens, dtype="<i4"))
        self._out["seqptr"].write(np.ascontiguousarray(run.seqptr[1:] + self._segments, dtype="<i8"))
        self._segments += len(run.seqlens)
        if "mask" in self._out:
            self._out["mask"].write(np.ascontiguousarray(run.loss_mask, dtype=np.uint8))

    def close(self) -> dict[str, dict]:
        return {r: self._out[r].entry(rel) for r, rel in self._rels.items()}


def _list_array(values: np.ndarray, offsets: np.ndarray, value_type: pa.DataType) -> pa.ListArray:
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values, value_type))


class ParquetShardWriter:
    """One row per sample, one row group per run (the set writer cuts runs at ROWS_PER_ROW_GROUP)."""

    def __init__(self, staged: StagedDir, fmt_dir: str, name: str, shard: int, header: ShardSetHeader):
        fields = [pa.field("input_ids", pa.list_(pa.int32())), pa.field("seqlens", pa.list_(pa.int32()))]
        if header.has_loss_mask:
            fields.append(pa.field("loss_mask", pa.list_(pa.uint8())))
        self._schema = pa.schema(fields)
        self._rel = f"{name}.parquet"
        self._out = HashedOutput(staged, f"{fmt_dir}/{self._rel}")
        # No min/max statistics: they say nothing useful about token ids and cost a pass over every
        # value. Zstd at pyarrow's default level, as SHARD_FORMAT.md says.
        self._writer = pq.ParquetWriter(self._out, self._schema, compression="zstd", use_dictionary=False,
                                        write_statistics=False)

    def add(self, run: ShardSamples) -> None:
        n, seq_len = run.tokens.shape
        row_offsets = np.arange(0, (n + 1) * seq_len, seq_len, dtype=np.int64)
        if row_offsets[-1] >= 2**31:
            raise ShardSetError(f"{n} samples of {seq_len} tokens overflow a Parquet list's int32 offsets")
        columns = [
            _list_array(run.tokens.reshape(-1).astype(np.int32), row_offsets, pa.int32()),
            _list_array(run.seqlens.astype(np.int32), run.seqptr, pa.int32()),
        ]
        if run.loss_mask is not None:
            columns.append(_list_array(run.loss_mask.reshape(-1), row_offsets, pa.uint8()))
        self._writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=self._schema))

    def close(self) -> dict[str, dict]:
        self._writer.close()
        return {"data": self._out.entry(self._rel)}


_TAR_BLOCK = 512
_TAR_RECORD = 20 * _TAR_BLOCK  # tar's default blocking factor: an archive is padded to whole records


def ustar_header(name: str, size: int) -> bytes:
    """A POSIX ustar header for a regular file with the fixed metadata of SHARD_FORMAT.md (mode 0644,
    uid/gid 0, mtime 0, no user/group names), field for field what the standard library's tarfile
    writes for it. Built here because tarfile spends ~90 us per member on generic work, which for
    ~200k members (100k samples) was the largest cost of the whole stage."""
    raw = name.encode("ascii")
    if len(raw) > 100:
        raise ShardSetError(f"tar member name over 100 bytes: {name!r}")
    head = b"".join([
        raw.ljust(100, b"\0"), b"0000644\0", b"0000000\0", b"0000000\0", b"%011o\0" % size, b"00000000000\0",
        b" " * 8,  # the checksum counts its own field as spaces
        b"0",  # regular file
        b"\0" * 100, b"ustar\x0000", b"\0" * 32, b"\0" * 32, b"\0" * 8, b"\0" * 8, b"\0" * 155, b"\0" * 12,
    ])
    return head[:148] + b"%06o\0 " % sum(head) + head[156:]


class _NpyHeaders:
    """The .npy header (format 1.0) of each (dtype, shape), computed once: the member is header + raw
    bytes, exactly what numpy.save writes for a C-contiguous array."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, tuple[int, ...]], bytes] = {}

    def encode(self, array: np.ndarray) -> bytes:
        key = (array.dtype.str, array.shape)
        header = self._cache.get(key)
        if header is None:
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.zeros(array.shape, array.dtype), version=(1, 0), allow_pickle=False)
            header = self._cache[key] = buf.getvalue()[: buf.tell() - array.nbytes]
        return header + np.ascontiguousarray(array).tobytes()


class WebDatasetShardWriter:
    """A POSIX (ustar) tar with one member group per sample, in sample order; every member's metadata is
    fixed (mtime 0, uid/gid 0, no user names, mode 0644) so a rebuild is byte-identical."""

    def __init__(self, staged: StagedDir, fmt_dir: str, name: str, shard: int, header: ShardSetHeader):
        self._dtype = header.token_dtype
        self._shard = shard
        self._sample = 0
        self._rel = f"{name}.tar"
        self._out = HashedOutput(staged, f"{fmt_dir}/{self._rel}")
        self._npy = _NpyHeaders()

    def add(self, run: ShardSamples) -> None:
        tokens = run.tokens.astype(self._dtype, copy=False)
        seqlens = run.seqlens.astype("<i4", copy=False)
        parts: list[bytes] = []
        for i in range(run.samples):
            key = f"{self._shard:05d}_{self._sample:07d}"
            members = [("input_ids", tokens[i]), ("seqlens", seqlens[run.seqptr[i] : run.seqptr[i + 1]])]
            if run.loss_mask is not None:
                members.append(("loss_mask", run.loss_mask[i]))
            for field, array in members:
                data = self._npy.encode(array)
                parts += [ustar_header(f"{key}.{field}.npy", len(data)), data, b"\0" * (-len(data) % _TAR_BLOCK)]
            self._sample += 1
        self._out.write(b"".join(parts))  # one write per run: ~8 MiB for 1024 samples of 2048 tokens

    def close(self) -> dict[str, dict]:
        # end of archive: two zero blocks, then zeros to a whole record (as tarfile and GNU tar do)
        end = 2 * _TAR_BLOCK
        self._out.write(b"\0" * (end + (-(self._out.size + end) % _TAR_RECORD)))
        return {"data": self._out.entry(self._rel)}


_FILE_WRITERS = {"flat": FlatShardWriter, "parquet": ParquetShardWriter, "webdataset": WebDatasetShardWriter}


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

    One numpy gather per run (two index arrays of 8 B per token: 32 MiB for 1024 x 2048), no Python
    loop per token or per piece.
    """
    seq_ptr = np.asarray(seq_ptr, dtype=np.int64)
    piece_len = np.asarray(piece_len, dtype=np.int64)
    n = len(seq_ptr) - 1
    counts = np.diff(seq_ptr)
    ends = np.cumsum(piece_len)
    starts = ends - piece_len  # piece starts in the run's concatenated tokens
    row_first = starts[seq_ptr[:-1]] if n else np.zeros(0, np.int64)  # where each sample's first piece starts
    dst = np.repeat(np.arange(n, dtype=np.int64) * seq_len - row_first, counts) + starts
    total = int(ends[-1]) if len(ends) else 0
    # token t of piece p: source piece_src[p] + (t - starts[p]), destination dst[p] + (t - starts[p])
    within = np.arange(total, dtype=np.int64)
    src_idx = np.repeat(np.asarray(piece_src, dtype=np.int64) - starts, piece_len) + within
    dst_idx = np.repeat(dst - starts, piece_len) + within
    tokens = np.full(n * seq_len, pad_id, dtype=dtype)
    tokens[dst_idx] = values[src_idx]
    mask = None
    if mask_values is not None:
        mask = np.zeros(n * seq_len, dtype=np.uint8)
        mask[dst_idx] = mask_values[src_idx]
        mask = mask.reshape(n, seq_len)
    return ShardSamples(tokens.reshape(n, seq_len), piece_len.astype(np.int32), seq_ptr - seq_ptr[0], mask)


def _take(run: ShardSamples, docs: pa.Array, start: int, stop: int) -> tuple[ShardSamples, pa.Array]:
    lo, hi = int(run.seqptr[start]), int(run.seqptr[stop])
    part = ShardSamples(
        run.tokens[start:stop],
        run.seqlens[lo:hi],
        run.seqptr[start : stop + 1] - lo,
        None if run.loss_mask is None else run.loss_mask[start:stop],
    )
    return part, docs.slice(lo, hi - lo)


class ShardGroupWriter:
    """The shards of one (split, source): shard k holds samples [k * samples_per_shard, ...)."""

    def __init__(self, owner: ShardSetWriter, split: str, source: str):
        self.split, self.source = split, source
        self._owner = owner
        self._pending: list[tuple[ShardSamples, pa.Array]] = []
        self._pending_samples = 0
        self._files: dict[str, ShardFileWriter] | None = None
        self._shard_runs_docs: list[pa.Array] = []
        self._shard_stats = {"samples": 0, "tokens": 0, "loss_tokens": 0}
        self.shards: dict[str, list[dict]] = {fmt: [] for fmt in owner.formats}
        self.documents: list[pa.Array] = []  # every segment's document id: the set's distinct count
        self.closed = False

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

    def _room(self) -> int:
        """Samples until the next row-group or shard boundary."""
        in_shard = self._shard_stats["samples"]
        return min(ROWS_PER_ROW_GROUP - in_shard % ROWS_PER_ROW_GROUP, self._owner.samples_per_shard - in_shard)

    def _flush(self, count: int) -> None:
        runs = [r for r, _ in self._pending]
        joined = concat_samples(runs)
        docs = pa.concat_arrays([d for _, d in self._pending]) if len(self._pending) > 1 else self._pending[0][1]
        head, head_docs = _take(joined, docs, 0, count)
        rest = joined.samples - count
        self._pending = [_take(joined, docs, count, joined.samples)] if rest else []
        self._pending_samples = rest
        if self._files is None:
            number = len(self.shards[self._owner.formats[0]])
            name = f"{self._prefix}/shard-{number:05d}"
            o = self._owner
            self._files = {f: _FILE_WRITERS[f](o.staged, f, name, number, o.header) for f in o.formats}
        for writer in self._files.values():
            writer.add(head)
        self._shard_runs_docs.append(head_docs)
        self._shard_stats["samples"] += head.samples
        self._shard_stats["tokens"] += head.token_count
        self._shard_stats["loss_tokens"] += head.loss_tokens
        if self._shard_stats["samples"] == self._owner.samples_per_shard:
            self._close_shard()

    def _close_shard(self) -> None:
        number = len(self.shards[self._owner.formats[0]])
        name = f"{self._prefix}/shard-{number:05d}"
        docs = pa.chunked_array(self._shard_runs_docs, pa.string())
        stats = {"name": name, **self._shard_stats, "documents": pc.count_distinct(docs).as_py()}
        for fmt, writer in self._files.items():
            files = writer.close()
            self.shards[fmt].append({**stats, "files": files, "bytes": sum(f["bytes"] for f in files.values())})
        self.documents.extend(self._shard_runs_docs)
        self._files, self._shard_runs_docs = None, []
        self._shard_stats = {"samples": 0, "tokens": 0, "loss_tokens": 0}

    def close(self) -> None:
        if self.closed:
            return
        if self._pending_samples:
            self._flush(self._pending_samples)
        if self._files is not None:
            self._close_shard()
        self.closed = True

    def set_entry(self, fmt: str) -> dict:
        shards = self.shards[fmt]
        return {
            "split": self.split,
            "source": self.source,
            "samples": sum(s["samples"] for s in shards),
            "tokens": sum(s["tokens"] for s in shards),
            "documents": pc.count_distinct(pa.chunked_array(self.documents, pa.string())).as_py(),
            "shards": shards,
        }


class ShardSetWriter:
    """Shards of every (split, source) in every configured format, and one index.json per format."""

    def __init__(self, staged: StagedDir, formats: list[str], header: ShardSetHeader, samples_per_shard: int):
        unknown = [f for f in formats if f not in FORMATS]
        if unknown or not formats:
            raise ShardSetError(f"formats must be a non-empty subset of {list(FORMATS)}, got {formats}")
        if samples_per_shard < 1:
            raise ShardSetError(f"samples_per_shard must be positive, got {samples_per_shard}")
        dtype = header.token_dtype
        if not 0 <= header.pad_id <= np.iinfo(dtype).max:
            raise ShardSetError(f"pad_id {header.pad_id} does not fit the token dtype {dtype.name}")
        self.staged = staged
        self.formats = sorted(set(formats), key=FORMATS.index)
        self.header = header
        self.samples_per_shard = samples_per_shard
        self._groups: dict[tuple[str, str], ShardGroupWriter] = {}

    def group(self, split: str, source: str) -> ShardGroupWriter:
        for what, value in (("split", split), ("source", source)):
            if not _NAME_RE.match(value):
                raise ShardSetError(f"{what} {value!r} cannot name a shard directory (pattern {SOURCE_NAME_PATTERN})")
        key = (split, source)
        if key in self._groups:
            raise ShardSetError(f"shards of {split}/{source} were already written")
        self._groups[key] = ShardGroupWriter(self, split, source)
        return self._groups[key]

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
            pieces = sum(len(g_docs) for g in groups for g_docs in g.documents)
            index = self.header.index_head(fmt)
            index["sets"] = sets
            index["totals"] = {
                "samples": samples,
                "tokens": tokens,
                "documents": sum(s["documents"] for s in sets),  # the sets are disjoint by (split, source)
                "pieces": pieces,
                "efficiency": round(tokens / (samples * self.header.seq_len), 6) if samples else 0.0,
            }
            self.staged.write_bytes(f"{fmt}/{INDEX_NAME}", index_bytes(index))
            indexes[fmt] = index
        return indexes
