"""What a shard format is: one object with its name, version, set writer, reader, checks and the
columns and encodings its index.json declares (SHARD_FORMAT.md, "Formats").

Writers work per set, (split, source): `open_set` gets the set's directory, `add` gets runs of
consecutive samples with the number of the shard they belong to (runs never span shards, shard
numbers only grow), and `close_set` returns the files of every shard, in shard order. A format that
writes one file (or a few) per shard derives from :class:`FilePerShardSetWriter`; a directory format
(one dataset per set, fragments instead of files) implements the three calls its own way.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow.fs as pafs

from platform_assets.packing.samples import ShardSamples, ShardSetError
from platform_assets.storage import StagedDir


@dataclass(frozen=True)
class SetHeader:
    """What a format needs to know of the set it writes (from the shard set's header)."""

    seq_len: int
    token_dtype: np.dtype
    has_loss_mask: bool


FileEntries = dict[str, dict[str, Any]]
"""role -> {"path": relative to the format directory, "bytes", "sha256"[, "inline"]}: one shard's files
(`inline`: the file's bytes in base64 as well, for small files a remote reader need not fetch: flat.py)."""


def inline_bytes(info: dict[str, Any]) -> bytes | None:
    """A file entry's inline copy (None when it has none); one that is not base64 raises ShardSetError."""
    text = info.get("inline")
    if text is None:
        return None
    try:
        return base64.b64decode(text, validate=True)
    except (TypeError, ValueError) as err:
        raise ShardSetError(f"{info.get('path')}: `inline` is not base64 ({err})") from None


class SetWriter(Protocol):
    def add(self, run: ShardSamples, shard: int) -> None:
        """Append consecutive samples of shard `shard` (0, 1, ...; a run never spans two shards)."""

    def close_set(self) -> list[FileEntries]:
        """Finish the set: the files of each shard, in shard order."""


class HashedOutput:
    """A write-only staged file that counts and sha256-hashes what passes through (tarfile and Parquet
    write through it), so no shard is read back to fill in its index entry."""

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

    def entry(self, rel: str) -> dict[str, Any]:
        """The index's file entry (closes the file)."""
        self.close()
        return {"path": rel, "bytes": self.size, "sha256": self._hash.hexdigest()}


class ShardFileWriter(Protocol):
    """The files of one shard of a file-per-shard format."""

    def add(self, run: ShardSamples) -> None: ...

    def close(self) -> FileEntries: ...


ShardFileWriterFactory = Callable[[StagedDir, str, str, int, SetHeader], ShardFileWriter]
"""(staged, format dir, shard name `<split>/<source>/shard-NNNNN`, shard number, header) -> writer."""


class FilePerShardSetWriter:
    """The set protocol for formats that write each shard as its own file(s): a new shard writer when
    the shard number changes, its file entries collected in order."""

    def __init__(self, staged: StagedDir, fmt_dir: str, set_prefix: str, header: SetHeader,
                 shard_writer: ShardFileWriterFactory):
        self._staged, self._fmt_dir, self._prefix, self._header = staged, fmt_dir, set_prefix, header
        self._factory = shard_writer
        self._current: tuple[int, ShardFileWriter] | None = None
        self._closed: list[FileEntries] = []

    def add(self, run: ShardSamples, shard: int) -> None:
        if self._current is None or self._current[0] != shard:
            self._finish_shard()
            name = f"{self._prefix}/shard-{shard:05d}"
            self._current = (shard, self._factory(self._staged, self._fmt_dir, name, shard, self._header))
        self._current[1].add(run)

    def _finish_shard(self) -> None:
        if self._current is not None:
            self._closed.append(self._current[1].close())
            self._current = None

    def close_set(self) -> list[FileEntries]:
        self._finish_shard()
        return self._closed


Reader = Callable[[pafs.FileSystem, str, dict, dict], ShardSamples]
"""(filesystem, format directory, index, shard entry) -> the shard's samples."""


def no_file_checks(index: dict, shard: dict, role: str, size: int) -> str | None:
    return None


@dataclass(frozen=True)
class ShardFormat:
    """One shard format. `layout(header)` is what index.json declares about its columns and
    encodings; `check_file` adds format-specific checks to verification (e.g. sizes implied by shapes).

    The readers are deliberately independent of the writers (numpy.memmap, pyarrow.parquet, the
    standard library's tarfile + numpy.load): reading a shard back through them and comparing is a
    real check of the written bytes, not the writer agreeing with itself.
    """

    name: str
    version: int
    """index.json's `format_version`, the major version: it changes only when a reader of the old one
    would misread the new files, and readers refuse one they do not know (SHARD_FORMAT.md,
    "Compatibility policy")."""
    open_set: Callable[[StagedDir, str, str, SetHeader], SetWriter]
    """(staged, format dir, set prefix `<split>/<source>`, header) -> the set's writer."""
    read: Reader
    layout: Callable[[SetHeader], dict[str, Any]]
    check_file: Callable[[dict, dict, str, int], str | None] = no_file_checks
    minor: int = 0
    """index.json's `format_minor`: counts additions within `version` (keys a new reader may rely on,
    files unchanged); every reader of the major version accepts any minor, ignoring what it does not
    know. An index without `format_minor` is minor 0."""
    default: bool = True
    """Written when the config names no formats. False for a format whose rebuilds are not
    byte-identical (`lance`): a default output must keep its pinned DVC hash (SHARD_FORMAT.md)."""


def column(name: str, dtype: str, shape: str, meaning: str, encoding: str) -> dict[str, str]:
    """One declared column of a format's samples, as index.json lists it. `dtype` is a numpy/Arrow
    primitive name (uint16, int32, ...); `shape` is in terms of `samples` (of the shard), `seq_len` and
    `segments` (of the sample, or of the shard for a per-shard array)."""
    return {"name": name, "dtype": dtype, "shape": shape, "meaning": meaning, "encoding": encoding}


def declared_layout(container: str, file_name: str, files: list[str], columns: list[dict[str, str]]) -> dict:
    """index.json's `layout`, the same four keys for every format: how a shard's file is built
    (`container`), where it lies (`file_name`, relative to the index), the roles of each shard entry's
    `files` and the columns with their encodings."""
    return {"container": container, "file_name": file_name, "files": files, "columns": columns}


def sample_columns(header: SetHeader, encodings: dict[str, str],
                   input_ids_dtype: str | None = None) -> list[dict[str, str]]:
    """The columns every format stores (SHARD_FORMAT.md, "A sample"), with the format's encodings
    (and the dtype it stores token ids as, when that is not the set's token dtype)."""
    cols = [
        column("input_ids", input_ids_dtype or header.token_dtype.name, "[seq_len]",
               "token ids, segments end to end from position 0, pad_id after the last", encodings["input_ids"]),
        column("seqlens", "int32", "[segments]", "segment lengths of the sample, in order", encodings["seqlens"]),
    ]
    if header.has_loss_mask:
        cols.append(column("loss_mask", "uint8", "[seq_len]", "1 where the token counts in the loss",
                           encodings["loss_mask"]))
    return cols
