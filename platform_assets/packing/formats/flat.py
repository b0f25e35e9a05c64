"""`flat`: headerless little-endian files per shard, memory-mapped by the loader with np.memmap.

Per shard: `tokens` [samples, seq_len] token_dtype, `seqlens` int32 (all segments), `seqptr` int64
[samples + 1] (segments of sample i are seqlens[seqptr[i]:seqptr[i+1]]), and `mask` uint8
[samples, seq_len] when the set has a loss mask. No headers: dtype and shape come from index.json.
Since 1.2 a shard's `seqlens` and `seqptr` of at most INLINE_MAX_BYTES are also in its index entry
(`inline`, base64), so a reader of a remote set fetches one object per shard instead of three.
"""

from __future__ import annotations

import base64

import numpy as np
import pyarrow.fs as pafs

from platform_assets.packing.formats.base import (
    FileEntries,
    FilePerShardSetWriter,
    HashedOutput,
    SetHeader,
    ShardFormat,
    column,
    declared_layout,
)
from platform_assets.packing.samples import ShardSamples, ShardSetError
from platform_assets.storage import StagedDir

NAME = "flat"
INLINE_MAX_BYTES = 512
"""A shard's segment tables (seqlens, seqptr) up to this size each are copied into its index entry as well
(`inline`, base64), still written as files. Every object is a request round trip for a reader of a remote
set: with shards of 16 samples, 3 GETs a shard held the training loader to 4.0-4.5 M tokens/s from a local
S3 server (~1.6 ms of the server's CPU and ~1.5 ms of the client's a GET, benchmarks remote_loader_litdata)
and 1 GET to 7.2-9.1. 512 bytes holds the tables of shards up to 63 samples and bounds the index's growth
at ~1.4 KiB a shard (an entry is ~750 bytes without); bigger shards' tables stay files only, where one more
request is small beside the tokens' bytes."""
INLINE_ROLES = ("seqlens", "seqptr")


class FlatShardWriter:
    """The three or four files of one shard, streamed and hashed as runs arrive."""

    def __init__(self, staged: StagedDir, fmt_dir: str, name: str, shard: int, header: SetHeader):
        self._dtype = header.token_dtype
        roles = ["tokens", "seqlens", "seqptr"] + (["mask"] if header.has_loss_mask else [])
        self._rels = {r: f"{name}.{r}.bin" for r in roles}
        self._out = {r: HashedOutput(staged, f"{fmt_dir}/{rel}") for r, rel in self._rels.items()}
        self._segments = 0
        self._small: dict[str, bytearray | None] = {r: bytearray() for r in INLINE_ROLES}
        self._write("seqptr", np.zeros(1, "<i8"))

    def _write(self, role: str, array: np.ndarray) -> None:
        self._out[role].write(array)
        small = self._small.get(role)
        if small is not None:  # kept while it may still be inlined, dropped once it is too big
            self._small[role] = small + array.tobytes() if len(small) + array.nbytes <= INLINE_MAX_BYTES else None

    def add(self, run: ShardSamples) -> None:
        self._write("tokens", np.ascontiguousarray(run.tokens, dtype=self._dtype))
        self._write("seqlens", np.ascontiguousarray(run.seqlens, dtype="<i4"))
        self._write("seqptr", np.ascontiguousarray(run.seqptr[1:] + self._segments, dtype="<i8"))
        self._segments += len(run.seqlens)
        if "mask" in self._out:
            self._write("mask", np.ascontiguousarray(run.loss_mask, dtype=np.uint8))

    def close(self) -> FileEntries:
        entries = {r: self._out[r].entry(rel) for r, rel in self._rels.items()}
        for role, small in self._small.items():
            if small is not None:
                entries[role]["inline"] = base64.b64encode(bytes(small)).decode("ascii")
        return entries


def open_set(staged: StagedDir, fmt_dir: str, set_prefix: str, header: SetHeader) -> FilePerShardSetWriter:
    return FilePerShardSetWriter(staged, fmt_dir, set_prefix, header, FlatShardWriter)


def read(fs: pafs.FileSystem, base: str, index: dict, shard: dict) -> ShardSamples:
    if not isinstance(fs, pafs.LocalFileSystem):
        raise ShardSetError("the flat reader memory-maps local files only")
    files, n, seq_len = shard["files"], shard["samples"], index["seq_len"]
    dtype = np.dtype(index["token_dtype"])
    tokens = np.memmap(f"{base}/{files['tokens']['path']}", dtype=dtype, mode="r", shape=(n, seq_len))
    seqptr = np.memmap(f"{base}/{files['seqptr']['path']}", dtype="<i8", mode="r", shape=(n + 1,))
    seqlens_path = f"{base}/{files['seqlens']['path']}"
    # np.memmap refuses a zero-length file; a shard always has >= 1 segment, but keep the error clear
    seqlens = np.memmap(seqlens_path, dtype="<i4", mode="r") if files["seqlens"]["bytes"] else np.zeros(0, "<i4")
    mask = None
    if index["has_loss_mask"]:
        mask = np.memmap(f"{base}/{files['mask']['path']}", dtype=np.uint8, mode="r", shape=(n, seq_len))
    return ShardSamples(tokens, seqlens, seqptr, mask)


def check_file(index: dict, shard: dict, role: str, size: int) -> str | None:
    """A flat file's size follows from its shape: a truncated or padded file is caught before reading."""
    seq_len, samples = int(index["seq_len"]), shard["samples"]
    expected = {"tokens": samples * seq_len * np.dtype(index["token_dtype"]).itemsize,
                "mask": samples * seq_len, "seqptr": (samples + 1) * 8}.get(role)
    if expected is not None and size != expected:
        return f"{shard['files'][role]['path']}: {size} bytes, its shape needs {expected}"
    return None


def layout(header: SetHeader) -> dict:
    dtype = header.token_dtype.name
    files = [
        column("tokens", dtype, "[samples, seq_len]", "input_ids of every sample, row-major",
               f"raw little-endian {dtype}, no header: np.memmap(path, '{header.token_dtype.str}', 'r', "
               "shape=(samples, seq_len))"),
        column("seqlens", "int32", "[segments]", "segment lengths of all samples, concatenated",
               "raw little-endian int32, no header (segments = bytes / 4)"),
        column("seqptr", "int64", "[samples + 1]", "segments of sample i are seqlens[seqptr[i]:seqptr[i+1]]",
               "raw little-endian int64, no header"),
    ]
    if header.has_loss_mask:
        files.append(column("mask", "uint8", "[samples, seq_len]", "loss_mask of every sample, row-major",
                            "raw uint8, no header"))
    return declared_layout(
        "one headerless file per column, C order; the shard entry's `files` names it by the column's name",
        "<split>/<source>/shard-NNNNN.<column>.bin", [f["name"] for f in files], files)


# 1.1 added index.json's `layout`; 1.2 the `inline` copy of small segment tables (INLINE_MAX_BYTES); files
# and every other key are as in 1.0.
FORMAT = ShardFormat(NAME, 1, open_set, read, layout, check_file, minor=2)
