"""The `flat` format's index.json (platform_assets/packing/SHARD_FORMAT.md), parsed and checked.

Everything the loader needs to open the raw .bin files comes from here: seq_len, the token dtype and
the sets of every (split, source) with their shards and files. A malformed index is refused with an
error naming the index file and the key that is wrong, before any .bin file is opened.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from training.data.index_fields import IndexFields

FORMAT = "flat"
READ_FORMATS = ("flat", "flat_varlen", "lance")
"""Formats the loader reads (`read_shard_index`): `flat` through np.memmap (the default and fastest),
`flat_varlen` (no padding on disk) through np.memmap and its offsets (training/data/flat_varlen_reader.py),
`lance` through Lance's `take` (training/data/lance_reader.py). The global order does not depend on it."""
# The major version read. Any `format_minor` of it is read: a minor only adds index keys (1.1 added
# `layout`, the declaration of the files' columns and encodings; 1.2 `inline` copies of small files) and
# keys this loader does not know are ignored. A format_version other than this one is refused.
FORMAT_VERSION = 1
INDEX_NAME = "index.json"
TOKEN_DTYPES: dict[str, type[np.unsignedinteger]] = {"uint16": np.uint16, "uint32": np.uint32}
SEQLEN_DTYPE = np.int32  # one int32 per segment
SEQPTR_DTYPE = np.int64  # samples + 1 offsets into the seqlens file
MASK_DTYPE = np.uint8


class ShardIndexError(ValueError):
    """index.json does not follow SHARD_FORMAT.md (the message names the file and the key)."""


@dataclass(frozen=True)
class FileEntry:
    path: str
    """Relative to the index's directory (POSIX separators)."""
    bytes: int
    sha256: str
    inline: bytes | None = field(default=None, repr=False)
    """The file's bytes when the index carries them too (format 1.2: small segment tables), so a remote
    reader need not fetch it; checked against sha256 where it is used, as a download is."""


@dataclass(frozen=True)
class Shard:
    name: str
    samples: int
    tokens: FileEntry
    seqlens: FileEntry
    seqptr: FileEntry
    mask: FileEntry | None
    """Present exactly when the index says has_loss_mask."""

    @property
    def segments(self) -> int:
        return self.seqlens.bytes // np.dtype(SEQLEN_DTYPE).itemsize

    def files(self) -> tuple[FileEntry, ...]:
        return (self.tokens, self.seqlens, self.seqptr) + ((self.mask,) if self.mask else ())


@dataclass(frozen=True)
class ShardSet:
    split: str
    source: str
    samples: int
    shards: tuple[Shard, ...]


@dataclass(frozen=True)
class FlatIndex:
    root: Path
    """The directory holding index.json; file paths are relative to it."""
    seq_len: int
    token_dtype: str
    vocab_size: int
    pad_id: int
    eos_id: int | None
    has_loss_mask: bool
    sets: tuple[ShardSet, ...]
    sha256: str
    """Of index.json's bytes: identifies the data a loader state belongs to (rebuilds are byte-identical)."""
    format: str = FORMAT
    """The index's `format`: which reader the loader uses (`flat`, or `lance` via read_shard_index)."""

    @property
    def index_path(self) -> Path:
        return self.root / INDEX_NAME

    def splits(self) -> list[str]:
        return sorted({s.split for s in self.sets})

    def split_sets(self, split: str) -> tuple[ShardSet, ...]:
        """The split's sets in index order (sorted by source): position = the source index of sample ids."""
        found = tuple(s for s in self.sets if s.split == split)
        if not found:
            raise ShardIndexError(f"{self.index_path}: no shard set for split {split!r} "
                                  f"(splits: {', '.join(self.splits()) or 'none'})")
        return found


_fields = IndexFields(ShardIndexError)
_need, _count, _relative_path = _fields.need, _fields.count, _fields.relative_path


def _file(files: dict[str, Any], kind: str, expected_bytes: int | None, where: str) -> FileEntry:
    entry = _need(files, kind, dict, where)
    w = f"{where}.{kind}"
    path = _relative_path(_need(entry, "path", str, w), w)
    nbytes = _count(entry, "bytes", w)
    sha = _fields.sha256(entry, w)
    if expected_bytes is not None and nbytes != expected_bytes:
        raise ShardIndexError(f"{w}.bytes: {nbytes} does not fit the shard ({expected_bytes} expected from "
                              f"its samples and seq_len)")
    inline = None
    if "inline" in entry:
        try:
            inline = base64.b64decode(_need(entry, "inline", str, w), validate=True)
        except binascii.Error as err:
            raise ShardIndexError(f"{w}.inline: not base64 ({err})") from None
        if len(inline) != nbytes:
            raise ShardIndexError(f"{w}.inline: {len(inline)} bytes, the entry says {nbytes}")
    return FileEntry(path, nbytes, sha, inline)


def _shard(doc: dict[str, Any], seq_len: int, itemsize: int, has_mask: bool, where: str) -> Shard:
    name = _need(doc, "name", str, where)
    where = f"{where} ({name})"
    samples = _count(doc, "samples", where)
    files = _need(doc, "files", dict, where)
    w = f"{where}.files"
    expected = {"tokens", "seqlens", "seqptr"} | ({"mask"} if has_mask else set())
    if set(files) != expected:
        raise ShardIndexError(f"{w}: expected files {sorted(expected)} (has_loss_mask={has_mask}), "
                              f"got {sorted(files)}")
    seqlens = _file(files, "seqlens", None, w)
    if seqlens.bytes % np.dtype(SEQLEN_DTYPE).itemsize:
        raise ShardIndexError(f"{w}.seqlens.bytes: {seqlens.bytes} is not a whole number of int32")
    return Shard(
        name=name,
        samples=samples,
        tokens=_file(files, "tokens", samples * seq_len * itemsize, w),
        seqlens=seqlens,
        seqptr=_file(files, "seqptr", (samples + 1) * np.dtype(SEQPTR_DTYPE).itemsize, w),
        mask=_file(files, "mask", samples * seq_len, w) if has_mask else None,
    )


def read_flat_index(data_dir: str | Path) -> FlatIndex:
    """Parse `<data_dir>/index.json` of a `flat` format directory and check it against the spec."""
    return _read_index(data_dir, (FORMAT,))


def read_shard_index(data_dir: str | Path) -> FlatIndex:
    """Parse the index.json of a format directory the loader reads (READ_FORMATS), checked as
    read_flat_index checks a flat one; a `lance` index's shards are `lance_reader.LanceShard`s."""
    return _read_index(data_dir, READ_FORMATS)


def _read_index(data_dir: str | Path, formats: tuple[str, ...]) -> FlatIndex:
    root = Path(data_dir)
    path = root / INDEX_NAME
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        kinds = "` or `".join(formats)
        raise ShardIndexError(f"{path}: not found (data_dir must be a `{kinds}` format directory holding "
                              f"{INDEX_NAME})") from None
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as err:  # JSONDecodeError, UnicodeDecodeError (bytes not UTF-8/16/32)
        raise ShardIndexError(f"{path}: not valid JSON ({type(err).__name__}: {err})") from None
    where = str(path)
    if not isinstance(doc, dict):
        raise ShardIndexError(f"{where}: expected a JSON object")
    fmt = doc.get("format")
    if fmt not in formats:
        expected = " or ".join(map(repr, formats))
        raise ShardIndexError(f"{where}.format: expected {expected}, got {fmt!r} "
                              f"(the loader reads the {'/'.join(formats)} format dir)")
    parse_shard = _shard
    if fmt == "lance":
        from training.data.lance_reader import lance_shard as parse_shard  # imports no lance until read
    elif fmt == "flat_varlen":
        from training.data.flat_varlen_reader import varlen_shard as parse_shard  # it imports this module
    version = doc.get("format_version")
    if isinstance(version, bool) or version != FORMAT_VERSION:  # true == 1 in Python, not in an index
        raise ShardIndexError(f"{where}.format_version: this loader reads version {FORMAT_VERSION}, "
                              f"got {version!r}")
    minor = doc.get("format_minor", 0)  # absent: an index written before minors were counted (1.0)
    if isinstance(minor, bool) or not isinstance(minor, int) or minor < 0:
        raise ShardIndexError(f"{where}.format_minor: expected an int >= 0, got {minor!r}")
    seq_len = _need(doc, "seq_len", int, where)
    if seq_len <= 0:
        raise ShardIndexError(f"{where}.seq_len: must be > 0, got {seq_len}")
    token_dtype = _need(doc, "token_dtype", str, where)
    if token_dtype not in TOKEN_DTYPES:
        raise ShardIndexError(f"{where}.token_dtype: expected one of {sorted(TOKEN_DTYPES)}, got {token_dtype!r}")
    vocab_size = _need(doc, "vocab_size", int, where)
    if vocab_size <= 0 or vocab_size > np.iinfo(TOKEN_DTYPES[token_dtype]).max + 1:
        raise ShardIndexError(f"{where}.vocab_size: {vocab_size} does not fit token_dtype {token_dtype}")
    pad_id = _need(doc, "pad_id", int, where)
    eos_id = doc.get("eos_id")
    for key, value in (("pad_id", pad_id), ("eos_id", eos_id)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or not 0 <= value < vocab_size):
            raise ShardIndexError(f"{where}.{key}: expected a token id in [0, {vocab_size}), got {value!r}")
    has_mask = _need(doc, "has_loss_mask", bool, where)
    itemsize = np.dtype(TOKEN_DTYPES[token_dtype]).itemsize
    sets = []
    for i, s in enumerate(_need(doc, "sets", list, where)):
        w = f"{where}.sets[{i}]"
        if not isinstance(s, dict):
            raise ShardIndexError(f"{w}: expected an object")
        split, source = _need(s, "split", str, w), _need(s, "source", str, w)
        w = f"{w} ({split}/{source})"
        shards = []
        for j, sh in enumerate(_need(s, "shards", list, w)):
            if not isinstance(sh, dict):
                raise ShardIndexError(f"{w}.shards[{j}]: expected an object")
            shards.append(parse_shard(sh, seq_len, itemsize, has_mask, f"{w}.shards[{j}]"))
        samples = _count(s, "samples", w)
        if samples != sum(sh.samples for sh in shards):
            raise ShardIndexError(f"{w}.samples: {samples} is not the sum of its shards' samples "
                                  f"({sum(sh.samples for sh in shards)})")
        sets.append(ShardSet(split, source, samples, tuple(shards)))
    keys = [(s.split, s.source) for s in sets]
    if keys != sorted(keys) or len(set(keys)) != len(keys):
        raise ShardIndexError(f"{where}.sets: must be sorted by (split, source) without repeats, got {keys}")
    return FlatIndex(root=root, seq_len=seq_len, token_dtype=token_dtype, vocab_size=vocab_size, pad_id=pad_id,
                     eos_id=eos_id, has_loss_mask=has_mask, sets=tuple(sets), sha256=hashlib.sha256(raw).hexdigest(),
                     format=fmt)
