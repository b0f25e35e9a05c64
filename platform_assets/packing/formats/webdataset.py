"""`webdataset`: a POSIX (ustar) tar per shard, one member group per sample, `.npy` members.
Readable by `webdataset.WebDataset(url).decode()`; member metadata is fixed (mtime 0, uid/gid 0, no
user names, mode 0644) so a rebuild is byte-identical."""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pyarrow.fs as pafs

from platform_assets.packing.formats.base import (
    FileEntries,
    FilePerShardSetWriter,
    HashedOutput,
    SetHeader,
    ShardFormat,
    declared_layout,
    sample_columns,
)
from platform_assets.packing.samples import ShardSamples, ShardSetError
from platform_assets.storage import StagedDir
from platform_assets.tar_members import member_key_and_field

NAME = "webdataset"
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
    def __init__(self, staged: StagedDir, fmt_dir: str, name: str, shard: int, header: SetHeader):
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

    def close(self) -> FileEntries:
        # end of archive: two zero blocks, then zeros to a whole record (as tarfile and GNU tar do)
        end = 2 * _TAR_BLOCK
        self._out.write(b"\0" * (end + (-(self._out.size + end) % _TAR_RECORD)))
        return {"data": self._out.entry(self._rel)}


def open_set(staged: StagedDir, fmt_dir: str, set_prefix: str, header: SetHeader) -> FilePerShardSetWriter:
    return FilePerShardSetWriter(staged, fmt_dir, set_prefix, header, WebDatasetShardWriter)


def read(fs: pafs.FileSystem, base: str, index: dict, shard: dict) -> ShardSamples:
    with fs.open_input_stream(f"{base}/{shard['files']['data']['path']}", compression=None) as f:
        data = f.read()
    if len(data) != shard["files"]["data"]["bytes"]:
        # tarfile reads a tar cut between members as a shorter, valid archive: the size must say it
        raise ShardSetError(f"{shard['name']}: tar is {len(data)} bytes, index says {shard['files']['data']['bytes']} "
                            f"(truncated or replaced)")
    members: dict[str, dict[str, np.ndarray]] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for m in tar.getmembers():
            key, field = member_key_and_field(m, shard["name"])
            members.setdefault(key, {})[field] = np.load(io.BytesIO(tar.extractfile(m).read()), allow_pickle=False)
    keys = sorted(members)
    if len(keys) != shard["samples"]:
        raise ShardSetError(f"{shard['name']}: tar holds {len(keys)} samples, index says {shard['samples']}")
    seqlens = [members[k]["seqlens.npy"] for k in keys]
    seqptr = np.zeros(len(keys) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in seqlens], out=seqptr[1:])
    return ShardSamples(
        tokens=np.stack([members[k]["input_ids.npy"] for k in keys]),
        seqlens=np.concatenate(seqlens).astype(np.int32),
        seqptr=seqptr,
        loss_mask=np.stack([members[k]["loss_mask.npy"] for k in keys]) if index["has_loss_mask"] else None,
    )


def layout(header: SetHeader) -> dict:
    npy = "member <key>.{name}.npy: numpy .npy format 1.0 (little-endian, its header repeats dtype and shape)"
    encodings = {c: npy.format(name=c) for c in ("input_ids", "seqlens", "loss_mask")}
    return declared_layout(
        "POSIX ustar tar; per sample, in sample order, one member per column in column order; <key> = "
        "<shard:05d>_<sample:07d> (sample counted within the shard); mtime 0, uid/gid 0, mode 0644",
        "<split>/<source>/shard-NNNNN.tar", ["data"], sample_columns(header, encodings))


# 1.1 added index.json's `layout`; files and every other key are as in 1.0.
FORMAT = ShardFormat(NAME, 1, open_set, read, layout, minor=1)
