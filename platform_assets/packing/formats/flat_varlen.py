"""`flat_varlen`: the `flat` files without padding on disk: each shard's samples, non-padding tokens only,
concatenated, with an offsets array that finds sample i in O(1) (np.memmap, no scan).

Per shard: `tokens` [tokens] token_dtype (sample i is tokens[offsets[i]:offsets[i+1]]), `offsets` int64
[samples + 1], `seqlens` int32 and `seqptr` int64 [samples + 1] as in `flat`, and `mask` uint8 [tokens]
(aligned with `tokens`) when the set has a loss mask. A sample's length (offsets[i+1] - offsets[i]) is the
sum of its segment lengths; the training loader checks that on every read.

Why a format of its own and not a minor of `flat`: a `flat` reader would read these files as
[samples, seq_len] matrices (a misread, which SHARD_FORMAT.md's compatibility policy forbids a minor to
cause); a new format name is refused cleanly by every older reader ("unknown format"). What it saves is the
padding: with `packing.strategy: none` (one document per sample) on the real corpus at 2048, 416.5 MB
instead of 502.7 MB with overlong `split` and 31.9 MB instead of 85.1 MB with `filter`, whose padded set
is 63% pad_id (benchmarks/RESULTS.md, `unpadded_shards`).
"""

from __future__ import annotations

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

NAME = "flat_varlen"


class FlatVarlenShardWriter:
    """The four or five files of one shard, streamed and hashed as runs arrive."""

    def __init__(self, staged: StagedDir, fmt_dir: str, name: str, shard: int, header: SetHeader):
        self._dtype = header.token_dtype
        roles = ["tokens", "offsets", "seqlens", "seqptr"] + (["mask"] if header.has_loss_mask else [])
        self._rels = {r: f"{name}.{r}.bin" for r in roles}
        self._out = {r: HashedOutput(staged, f"{fmt_dir}/{rel}") for r, rel in self._rels.items()}
        self._segments = 0
        self._tokens = 0
        self._out["seqptr"].write(np.zeros(1, "<i8"))
        self._out["offsets"].write(np.zeros(1, "<i8"))

    def add(self, run: ShardSamples) -> None:
        used = run.used()
        # the samples' non-padding positions, row-major: boolean indexing concatenates them in order
        keep = np.arange(run.seq_len)[None, :] < used[:, None]
        self._out["tokens"].write(np.ascontiguousarray(run.tokens[keep], dtype=self._dtype))
        self._out["offsets"].write(np.ascontiguousarray(np.cumsum(used) + self._tokens, dtype="<i8"))
        self._out["seqlens"].write(np.ascontiguousarray(run.seqlens, dtype="<i4"))
        self._out["seqptr"].write(np.ascontiguousarray(run.seqptr[1:] + self._segments, dtype="<i8"))
        self._segments += len(run.seqlens)
        self._tokens += int(used.sum())
        if "mask" in self._out:
            self._out["mask"].write(np.ascontiguousarray(run.loss_mask[keep], dtype=np.uint8))

    def close(self) -> FileEntries:
        return {r: self._out[r].entry(rel) for r, rel in self._rels.items()}


def open_set(staged: StagedDir, fmt_dir: str, set_prefix: str, header: SetHeader) -> FilePerShardSetWriter:
    return FilePerShardSetWriter(staged, fmt_dir, set_prefix, header, FlatVarlenShardWriter)


def _load(fs: pafs.FileSystem, path: str, dtype: str) -> np.ndarray:
    with fs.open_input_file(path) as f:
        return np.frombuffer(f.read(), dtype=dtype)


def read(fs: pafs.FileSystem, base: str, index: dict, shard: dict) -> ShardSamples:
    """The shard as padded samples (pad_id after each sample's tokens), so it compares with every other
    format; read with plain numpy, independently of the writer."""
    files, n, seq_len = shard["files"], shard["samples"], index["seq_len"]
    tokens = _load(fs, f"{base}/{files['tokens']['path']}", np.dtype(index["token_dtype"]).newbyteorder("<").str)
    offsets = _load(fs, f"{base}/{files['offsets']['path']}", "<i8")
    seqlens = _load(fs, f"{base}/{files['seqlens']['path']}", "<i4")
    seqptr = _load(fs, f"{base}/{files['seqptr']['path']}", "<i8")
    if len(offsets) != n + 1 or offsets[0] != 0 or offsets[-1] != len(tokens) or np.any(np.diff(offsets) < 0):
        raise ShardSetError(f"{base}/{files['offsets']['path']}: offsets must rise from 0 to the {len(tokens)} "
                            f"tokens in {n + 1} entries")
    lengths = np.diff(offsets)
    if np.any(lengths > seq_len):
        raise ShardSetError(f"{base}/{files['offsets']['path']}: a sample of {int(lengths.max())} tokens, "
                            f"more than seq_len {seq_len}")
    keep = np.arange(seq_len)[None, :] < lengths[:, None]
    padded = np.full((n, seq_len), index["pad_id"], dtype=tokens.dtype)
    padded[keep] = tokens
    mask = None
    if index["has_loss_mask"]:
        flat_mask = _load(fs, f"{base}/{files['mask']['path']}", "u1")
        if len(flat_mask) != len(tokens):
            raise ShardSetError(f"{base}/{files['mask']['path']}: {len(flat_mask)} entries for {len(tokens)} tokens")
        mask = np.zeros((n, seq_len), dtype=np.uint8)
        mask[keep] = flat_mask
    return ShardSamples(padded, seqlens, seqptr, mask)


def check_file(index: dict, shard: dict, role: str, size: int) -> str | None:
    """Sizes follow from the shard entry's counts: `tokens` (non-padding tokens) and `samples`."""
    tokens, samples = shard["tokens"], shard["samples"]
    expected = {"tokens": tokens * np.dtype(index["token_dtype"]).itemsize, "mask": tokens,
                "offsets": (samples + 1) * 8, "seqptr": (samples + 1) * 8}.get(role)
    if expected is not None and size != expected:
        return f"{shard['files'][role]['path']}: {size} bytes, the shard's counts need {expected}"
    return None


def layout(header: SetHeader) -> dict:
    dtype = header.token_dtype.name
    files = [
        column("tokens", dtype, "[tokens]", "the non-padding tokens of every sample, concatenated in sample order",
               f"raw little-endian {dtype}, no header: np.memmap(path, '{header.token_dtype.str}', 'r'); "
               "`tokens` is the shard entry's count"),
        column("offsets", "int64", "[samples + 1]", "sample i is tokens[offsets[i]:offsets[i+1]]",
               "raw little-endian int64, no header"),
        column("seqlens", "int32", "[segments]", "segment lengths of all samples, concatenated",
               "raw little-endian int32, no header (segments = bytes / 4)"),
        column("seqptr", "int64", "[samples + 1]", "segments of sample i are seqlens[seqptr[i]:seqptr[i+1]]",
               "raw little-endian int64, no header"),
    ]
    if header.has_loss_mask:
        files.append(column("mask", "uint8", "[tokens]", "loss_mask of every token of `tokens`, aligned with it",
                            "raw uint8, no header"))
    return declared_layout(
        "one headerless file per column, no padding stored; the shard entry's `files` names it by the column's name",
        "<split>/<source>/shard-NNNNN.<column>.bin", [f["name"] for f in files], files)


# 1.1 like every format (index.json declares `layout`). Not a default: adding it to the defaults would change
# packed_shards' pinned output; list it (`packing.formats: [flat, flat_varlen]`) to write it.
FORMAT = ShardFormat(NAME, 1, open_set, read, layout, check_file, minor=1, default=False)
