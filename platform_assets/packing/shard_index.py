"""What a packed shard set holds and how to check it: the samples model, `index.json`, verification,
and a small reader per format (see SHARD_FORMAT.md, the contract with `training/`).

The readers here are deliberately independent of the writers (numpy.memmap for flat, pyarrow.parquet
for parquet, the standard library's tarfile + numpy.load for webdataset): reading a shard back through
them and comparing is a real check of the written bytes, not the writer agreeing with itself.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath

import numpy as np
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from platform_assets.storage import MANIFEST_NAME, list_files, resolve_filesystem

FORMATS = ("flat", "parquet", "webdataset")
FORMAT_VERSION = 1
INDEX_NAME = "index.json"
# A Parquet row group holds at most this many samples: 1024 x 2048 int32 tokens = 8 MiB uncompressed,
# small enough for a loader to read one group at a time, large enough to keep per-group overhead <0.1%.
ROWS_PER_ROW_GROUP = 1024
FLAT_FILES = ("tokens", "seqlens", "seqptr", "mask")  # `mask` only when has_loss_mask
_HASH_CHUNK = 8 * 2**20


class ShardSetError(ValueError):
    """An index or a shard that does not follow SHARD_FORMAT.md."""


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 while every id fits (GPT-2's 50257 does: half the bytes of int32), else uint32."""
    if vocab_size <= 0:
        raise ShardSetError(f"vocab_size must be positive, got {vocab_size}")
    if vocab_size > 2**32:
        raise ShardSetError(f"vocab_size {vocab_size} does not fit uint32 token ids")
    return np.dtype("<u2") if vocab_size <= 65536 else np.dtype("<u4")


@dataclass(frozen=True)
class ShardSamples:
    """Consecutive packed samples as every format stores them (a whole shard or a run of it).

    Sample i holds the segments seqlens[seqptr[i]:seqptr[i+1]] laid end to end from position 0, then
    padding up to seq_len; loss_mask (when the set has one) is 1 where a token counts in the loss.
    """

    tokens: np.ndarray  # [samples, seq_len], token dtype
    seqlens: np.ndarray  # int32 [segments]
    seqptr: np.ndarray  # int64 [samples + 1], seqptr[0] == 0
    loss_mask: np.ndarray | None  # uint8 [samples, seq_len], or None for a set without masks

    @property
    def samples(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def seq_len(self) -> int:
        return int(self.tokens.shape[1])

    @property
    def token_count(self) -> int:
        """Non-padding tokens."""
        return int(self.seqlens.sum(dtype=np.int64))

    @property
    def loss_tokens(self) -> int:
        return self.token_count if self.loss_mask is None else int(self.loss_mask.sum(dtype=np.int64))

    def used(self) -> np.ndarray:
        """Non-padding positions of each sample (int64 [samples])."""
        ends = np.concatenate([[0], np.cumsum(self.seqlens, dtype=np.int64)])
        return ends[self.seqptr[1:]] - ends[self.seqptr[:-1]]

    def sample_seqlens(self, i: int) -> np.ndarray:
        return self.seqlens[self.seqptr[i] : self.seqptr[i + 1]]

    def validate(self) -> None:
        """Raise ShardSetError if the arrays do not describe valid samples."""
        if self.tokens.ndim != 2:
            raise ShardSetError(f"tokens must be [samples, seq_len], got shape {self.tokens.shape}")
        n = self.samples
        if self.seqptr.shape != (n + 1,) or self.seqptr[0] != 0 or self.seqptr[-1] != len(self.seqlens):
            raise ShardSetError(f"seqptr must have {n + 1} entries from 0 to {len(self.seqlens)} segments")
        if np.any(np.diff(self.seqptr) < 1):
            raise ShardSetError("every sample needs at least one segment (seqptr must increase)")
        if len(self.seqlens) and self.seqlens.min() < 1:
            raise ShardSetError("segment lengths must be positive")
        used = self.used()
        if n and used.max() > self.seq_len:
            raise ShardSetError(f"a sample's segments hold {used.max()} tokens, more than seq_len {self.seq_len}")
        if self.loss_mask is not None:
            if self.loss_mask.shape != self.tokens.shape:
                raise ShardSetError(f"loss_mask shape {self.loss_mask.shape} != tokens shape {self.tokens.shape}")
            padding = np.arange(self.seq_len)[None, :] >= used[:, None]
            if np.any(self.loss_mask[padding]):
                raise ShardSetError("loss_mask must be 0 on padding")


def concat_samples(parts: list[ShardSamples]) -> ShardSamples:
    """Consecutive runs of samples as one (seqptr re-based onto the joined seqlens)."""
    if len(parts) == 1:
        return parts[0]
    offsets = np.cumsum([0] + [len(p.seqlens) for p in parts[:-1]], dtype=np.int64)
    seqptr = np.concatenate([[0]] + [p.seqptr[1:] + off for p, off in zip(parts, offsets, strict=True)])
    masks = [p.loss_mask for p in parts]
    return ShardSamples(
        tokens=np.concatenate([p.tokens for p in parts]),
        seqlens=np.concatenate([p.seqlens for p in parts]),
        seqptr=seqptr.astype(np.int64),
        loss_mask=None if masks[0] is None else np.concatenate(masks),
    )


# -- the index --------------------------------------------------------------------------------------
def index_bytes(index: dict) -> bytes:
    """The one serialisation of an index (byte-identical rebuilds)."""
    return json.dumps(index, indent=1, sort_keys=True).encode()


def _fs_and_path(format_dir: str, fs: pafs.FileSystem | None) -> tuple[pafs.FileSystem, str]:
    if fs is not None:
        return fs, str(format_dir).rstrip("/")
    return resolve_filesystem(str(format_dir))


def load_index(format_dir: str, fs: pafs.FileSystem | None = None) -> dict:
    """A format directory's `index.json`, checked for the keys a reader relies on."""
    fs, base = _fs_and_path(format_dir, fs)
    path = f"{base}/{INDEX_NAME}"
    try:
        with fs.open_input_stream(path, compression=None) as f:
            index = json.loads(f.read())
    except FileNotFoundError as e:
        raise ShardSetError(f"{path}: no index (not a packed shard format directory)") from e
    except json.JSONDecodeError as e:
        raise ShardSetError(f"{path}: not valid JSON ({e})") from e
    missing = [k for k in ("format", "format_version", "seq_len", "token_dtype", "has_loss_mask", "sets")
               if k not in index]
    if missing:
        raise ShardSetError(f"{path}: missing keys {missing}")
    if index["format"] not in FORMATS:
        raise ShardSetError(f"{path}: unknown format {index['format']!r}, expected one of {FORMATS}")
    if index["format_version"] != FORMAT_VERSION:
        raise ShardSetError(f"{path}: format_version {index['format_version']}, this reader knows {FORMAT_VERSION}")
    return index


def iter_shard_entries(index: dict) -> Iterator[tuple[dict, dict]]:
    """(set, shard) entries in index order: sets by (split, source), shards by name."""
    for entry in index["sets"]:
        for shard in entry["shards"]:
            yield entry, shard


def _sha256_and_size(fs: pafs.FileSystem, path: str) -> tuple[str, int]:
    h, size = hashlib.sha256(), 0
    with fs.open_input_stream(path, compression=None) as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def verify_shards(format_dir: str, fs: pafs.FileSystem | None = None) -> list[str]:
    """Every problem found in a format directory (empty list: the set is intact).

    Recomputes each listed file's size and sha256, flags files the index does not list, checks the
    index's own counts add up and the flat files' sizes match their shapes, and -- when the parent
    output's `_manifest.json` is there -- checks `index.json` itself against it, so a flipped byte
    anywhere in the directory is reported.
    """
    fs, base = _fs_and_path(format_dir, fs)
    try:
        index = load_index(base, fs)
    except ShardSetError as e:
        return [str(e)]
    problems: list[str] = []
    listed = {INDEX_NAME}
    itemsize = np.dtype(index["token_dtype"]).itemsize
    seq_len = int(index["seq_len"])
    for _, shard in iter_shard_entries(index):
        listed_bytes = sum(info["bytes"] for info in shard["files"].values())
        if listed_bytes != shard["bytes"]:
            problems.append(f"{shard['name']}: its files are listed with {listed_bytes} bytes, "
                            f"the shard says {shard['bytes']}")
        for role, info in sorted(shard["files"].items()):
            rel = info["path"]
            listed.add(rel)
            path = f"{base}/{rel}"
            if fs.get_file_info(path).type != pafs.FileType.File:
                problems.append(f"{rel}: missing")
                continue
            sha, size = _sha256_and_size(fs, path)
            if size != info["bytes"]:
                problems.append(f"{rel}: {size} bytes, index says {info['bytes']}")
            if sha != info["sha256"]:
                problems.append(f"{rel}: sha256 {sha[:12]}..., index says {info['sha256'][:12]}... (corrupt)")
            if index["format"] == "flat":
                expected = {"tokens": shard["samples"] * seq_len * itemsize, "mask": shard["samples"] * seq_len,
                            "seqptr": (shard["samples"] + 1) * 8}.get(role)
                if expected is not None and size != expected:
                    problems.append(f"{rel}: {size} bytes, its shape needs {expected}")
    for entry in index["sets"]:
        for key in ("samples", "tokens"):  # not documents: one split across shards counts in each
            total = sum(s[key] for s in entry["shards"])
            if total != entry[key]:
                problems.append(f"set {entry['split']}/{entry['source']}: shards hold {total} {key}, "
                                f"the set says {entry[key]}")
    totals = index.get("totals", {})
    for key in ("samples", "tokens"):
        total = sum(e[key] for e in index["sets"])
        if key in totals and total != totals[key]:
            problems.append(f"totals: sets hold {total} {key}, totals say {totals[key]}")
    for e in list_files(fs, base):
        rel = e.path[len(base) + 1 :]
        if rel not in listed:
            problems.append(f"{rel}: not listed in the index")
    problems.extend(_check_against_manifest(fs, base))
    return problems


def _check_against_manifest(fs: pafs.FileSystem, base: str) -> list[str]:
    """index.json against the enclosing output's manifest (written when the directory was committed)."""
    parent, name = str(PurePosixPath(base).parent), PurePosixPath(base).name
    manifest_path = f"{parent}/{MANIFEST_NAME}"
    if fs.get_file_info(manifest_path).type != pafs.FileType.File:
        return []
    with fs.open_input_stream(manifest_path, compression=None) as f:
        files = json.loads(f.read()).get("files", {})
    info = files.get(f"{name}/{INDEX_NAME}")
    if info is None:
        return [f"{INDEX_NAME}: not in {manifest_path}"]
    sha, size = _sha256_and_size(fs, f"{base}/{INDEX_NAME}")
    if (sha, size) != (info["sha256"], info["bytes"]):
        return [f"{INDEX_NAME}: differs from {MANIFEST_NAME} (sha256 {sha[:12]}..., expected {info['sha256'][:12]}...)"]
    return []


# -- readers ----------------------------------------------------------------------------------------
def _read_flat(fs: pafs.FileSystem, base: str, index: dict, shard: dict) -> ShardSamples:
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


def _read_parquet(fs: pafs.FileSystem, base: str, index: dict, shard: dict) -> ShardSamples:
    with fs.open_input_file(f"{base}/{shard['files']['data']['path']}") as f:
        table = pq.read_table(f)
    n, seq_len = table.num_rows, index["seq_len"]
    ids = table["input_ids"].combine_chunks()
    seqlens = table["seqlens"].combine_chunks()
    seqptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(seqlens.value_lengths().to_numpy(zero_copy_only=False), out=seqptr[1:])
    tokens = ids.flatten().to_numpy().astype(index["token_dtype"]).reshape(n, seq_len)
    mask = None
    if index["has_loss_mask"]:
        mask = table["loss_mask"].combine_chunks().flatten().to_numpy().reshape(n, seq_len)
    return ShardSamples(tokens, seqlens.flatten().to_numpy().astype(np.int32), seqptr, mask)


def _read_webdataset(fs: pafs.FileSystem, base: str, index: dict, shard: dict) -> ShardSamples:
    with fs.open_input_stream(f"{base}/{shard['files']['data']['path']}", compression=None) as f:
        data = f.read()
    members: dict[str, dict[str, np.ndarray]] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for m in tar.getmembers():
            key, _, field = m.name.partition(".")
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


_READERS = {"flat": _read_flat, "parquet": _read_parquet, "webdataset": _read_webdataset}


def read_shard(format_dir: str, index: dict, shard: dict, fs: pafs.FileSystem | None = None) -> ShardSamples:
    """One shard's samples (the shard entry comes from `index`)."""
    fs, base = _fs_and_path(format_dir, fs)
    return _READERS[index["format"]](fs, base, index, shard)


def read_shard_set(format_dir: str, fs: pafs.FileSystem | None = None) -> Iterator[tuple[dict, dict, ShardSamples]]:
    """(set, shard, samples) for every shard of a format directory, in index order."""
    fs, base = _fs_and_path(format_dir, fs)
    index = load_index(base, fs)
    for entry, shard in iter_shard_entries(index):
        yield entry, shard, _READERS[index["format"]](fs, base, index, shard)
