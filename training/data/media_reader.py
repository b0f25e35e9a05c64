"""Random access to one split of a media shard set (MEDIA_SHARD_FORMAT.md), either format, by (stream, index).

A stream is one (source, modality) pair of the split: a mixture weights photos/image and speech/audio
separately even when one source holds several modalities. Sample i of a stream is the i-th sample of that
modality in the source's input order (shard order, then position in the shard), so a stream's numbering
is the same in both formats and on every process.

What the reader learns when it is built, once (the tables are pickled along to DataLoader workers):
- `webdataset`: each tar's member headers (stdlib `tarfile`, which seeks over the data: one 512-byte header
  read per member), grouped by key into a compact int64 table of (offset, size) per sample and member
  (media, txt, json, input_features; 64 bytes a sample). A shard holding one modality needs nothing more;
  one holding several reads each sample's `.json` member (one pread, ~0.5 KiB) to learn its modality.
- `parquet`: the footer (row count, row group boundaries) and, for a shard holding several modalities, the
  `modality` column alone (dictionary-encoded: a few bytes a row).

Cost of one `read`:
- tar: one `os.pread` per member of that sample (3 or 4: media, text, JSON, features), exactly the members'
  bytes and nothing else; no tarfile at read time. Measured on the test fixture from the page cache (2 cores):
  ~9 us an image sample, ~1.1-1.5 ms an audio sample (np.load of its 960 KB of input features).
- parquet: the row group holding the sample is decoded whole (every column the reader uses, for all its
  rows: up to 1024 rows / 64 MiB in the platform's files), so the first read of a row group costs a decode of
  up to ~64 MiB; the last 2 decoded row groups are kept per process (an LRU), so reads in shard order pay it
  once per row group, reads at random pay it nearly every time. Measured on the fixture (5-row row groups):
  ~25 us an image from a cached row group, ~0.4 ms with its decode; an audio sample 1.6 ms cached, 5 ms with
  the decode of 5 samples' features. Prefer the tar format for random access.

Files are opened lazily, per process (a forked worker drops what it inherited, a pickled reader carries no
open file) and at most `OPEN_FILES` at a time per process, so a split of thousands of shards never meets
the open-file limit. Every used shard's size is checked against the index when the reader is built (a stat).

Checksums (`verify`), as training/data/shard_reader.py: "none" hashes nothing; "first_open" hashes a shard
file (sha256 against the index) the first time a process opens it for reading; "always" on every open
(`drop_files()` closes this process's files, so the next read opens and hashes again). `on_corrupt="skip"`
hashes every used shard when the reader is built (with verify != "none"; a stat only with "none") and
leaves out those that differ, or whose tar headers / Parquet footer cannot be read, identically on every
process; a corruption found later, lazily, stops with an error (skipping it then would shift every later
sample of its stream on one process only).
"""

from __future__ import annotations

import io
import json
import logging
import os
import tarfile
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from training.data.media_index import MediaIndex, MediaSetEntry, MediaShard
from training.data.shard_reader import ON_CORRUPT, VERIFY_MODES, SkippedShard, file_problem

log = logging.getLogger("training.data")

MEDIA_EXTS = ("png", "jpg", "webp", "flac", "wav")  # the media member's suffixes (from the stored MIME type)
FEATURES_FIELD = "input_features.npy"
WHISPER_SHAPE = (80, 3000)  # 80 mel bins x 3000 frames of 10 ms, float32: 960,000 bytes + 128 of .npy header
# Member columns of the tar table: (offset of the data, size) of each; offset -1 = the member is absent.
_MEDIA, _TXT, _JSON, _FEATURES = range(4)
_FIELDS = {"txt": _TXT, "json": _JSON, FEATURES_FIELD: _FEATURES}
OPEN_FILES = 64  # open shard files per process (an LRU): far below the common soft limit of 1,024
ROW_GROUP_CACHE = 2  # decoded Parquet row groups kept per process (an LRU)
PARQUET_COLUMNS = ("id", "modality", "kind", "mime", "text", "image", "audio", "json")


class MediaDataError(ValueError):
    """A media shard's content disagrees with the index or the format (the message names the shard, and the
    sample's key where one sample is wrong)."""


class CorruptMediaShardError(MediaDataError):
    """A shard file differs from the index (missing, size or sha256): the message names the shard, the file
    and what differed."""


@dataclass(frozen=True)
class MediaSample:
    id: str
    """The document id: the tar member key, the Parquet `id` column."""
    source: str
    modality: str
    """image | pdf | audio."""
    kind: str
    """The media item's kind: image | page | audio."""
    mime: str
    ext: str
    """png | jpg | webp | flac | wav: how `media` is encoded."""
    media: bytes
    """The image / page / audio bytes exactly as ingest stored them (not decoded)."""
    text: str
    """Caption, page text or transcript (may be empty)."""
    record: dict
    """The sample's JSON record (MEDIA_SHARD_FORMAT.md, "The JSON record")."""
    input_features: np.ndarray | None
    """float32 (80, 3000) Whisper log-Mel features for audio when the set has them; None otherwise."""


@dataclass(frozen=True)
class MediaStream:
    source: str
    modality: str

    @property
    def name(self) -> str:
        return f"{self.source}/{self.modality}"


@dataclass(frozen=True)
class _TarTable:
    keys: np.ndarray
    """S<n> [samples]: each sample's key, UTF-8."""
    members: np.ndarray
    """int64 [samples, 4, 2]: (data offset, size) of the media, txt, json and features members; -1 absent."""
    exts: np.ndarray
    """uint8 [samples]: the media member's suffix, a position in MEDIA_EXTS."""


@dataclass(frozen=True)
class _ParquetTable:
    row_group_starts: list[int]
    """First row of every row group (Python ints: bisect on a list is ~0.2 us, np.searchsorted ~3 us)."""
    columns: tuple[str, ...]
    """The columns a read decodes (PARQUET_COLUMNS, + input_features when the file has it)."""


class _ScanError(MediaDataError):
    """A shard's tar headers or Parquet footer cannot be read or disagree with the index."""


class MediaSplitReader:
    """One split of a media set as streams of samples: `read(stream, idx)`; `sizes[stream]` samples each.

    Streams are the (source, modality) pairs of the split that the index counts samples for, restricted to
    `modalities` (None: all), sorted by (source, modality). They come from the index, not from what is left
    after skipping, so a skipped shard never renumbers the streams (a stream can be left with 0 samples)."""

    def __init__(self, index: MediaIndex, split: str, modalities: Sequence[str] | None = None,
                 verify: str = "none", on_corrupt: str = "stop") -> None:
        if verify not in VERIFY_MODES:
            raise ValueError(f"verify: expected one of {list(VERIFY_MODES)}, got {verify!r}")
        if on_corrupt not in ON_CORRUPT:
            raise ValueError(f"on_corrupt: expected one of {list(ON_CORRUPT)}, got {on_corrupt!r}")
        if isinstance(modalities, str):  # "image" would select modalities "i", "m", ...
            raise TypeError(f"modalities: expected a sequence of modality names, got the string {modalities!r}")
        self.index = index
        self.split = split
        self.verify = verify
        self.on_corrupt = on_corrupt
        self.modalities = None if modalities is None else tuple(sorted(set(modalities)))
        self.sets: tuple[MediaSetEntry, ...] = tuple(index.sets_of(split))
        # every shard of the split in index order; a shard's number here is its place in this list
        self._shards: list[tuple[MediaSetEntry, MediaShard]] = [(s, sh) for s in self.sets for sh in s.shards]
        pairs = {(s.source, m) for s, sh in self._shards for m, n in sh.modalities.items()
                 if n and self._wanted(m)}
        self.streams: tuple[MediaStream, ...] = tuple(MediaStream(src, m) for src, m in sorted(pairs))
        stream_no = {(st.source, st.modality): i for i, st in enumerate(self.streams)}
        self._tables: dict[int, _TarTable | _ParquetTable] = {}
        self._verified: set[int] = set()
        """Shards hashed by this process (or, for on_corrupt='skip', when the reader was built: pickled along)."""
        # per stream: (shard number, positions in the shard or None = every row) of each used shard, in order
        segments: list[list[tuple[int, np.ndarray | None]]] = [[] for _ in self.streams]
        skipped = []
        for k, (s, sh) in enumerate(self._shards):
            wanted = [m for m, n in sh.modalities.items() if n and self._wanted(m)]
            if not wanted:
                continue  # nothing of this shard is read: not even stat'ed
            try:
                modality_of = self._prepare(k, sh)
            except MediaDataError as err:
                if on_corrupt == "stop":
                    raise
                skipped.append(SkippedShard(s.source, sh.name, sh.samples, str(err)))
                log.warning("skipping corrupt media shard %s of %s (%d samples): %s", sh.name,
                            index.index_path, sh.samples, err)
                continue
            for m in sorted(wanted):
                positions = None if modality_of is None else np.flatnonzero(modality_of == m).astype(np.int32)
                segments[stream_no[(s.source, m)]].append((k, positions))
        self.skipped: tuple[SkippedShard, ...] = tuple(skipped)
        """Shards left out by on_corrupt='skip', with why (the words a stop would raise)."""
        self._segments = segments
        counts = [[self._segment_len(k, p, st) for k, p in segs] for st, segs in zip(self.streams, segments,
                                                                                         strict=True)]
        self.sizes: np.ndarray = np.array([sum(c) for c in counts], dtype=np.int64)
        """int64 [streams]: samples per stream."""
        # first sample of every segment within its stream; bisect_right(starts, i) - 1 is sample i's segment
        self._starts = [np.cumsum([0] + c[:-1]).tolist() for c in counts]
        self._size_list = self.sizes.tolist()
        self._pid: int | None = None
        self._files: OrderedDict[int, Any] = OrderedDict()
        self._row_groups: OrderedDict[tuple[int, int], pa.Table] = OrderedDict()

    def _wanted(self, modality: str) -> bool:
        return self.modalities is None or modality in self.modalities

    def _segment_len(self, k: int, positions: np.ndarray | None, stream: MediaStream) -> int:
        return self._shards[k][1].modalities[stream.modality] if positions is None else len(positions)

    # -- construction: check, (skip mode: hash), scan ------------------------------------------------------

    def _path(self, sh: MediaShard) -> Path:
        return self.index.root / sh.file.path

    def _corrupt(self, sh: MediaShard, problem: str) -> CorruptMediaShardError:
        return CorruptMediaShardError(f"{self.index.root}/{problem} (shard {sh.name} of {self.index.index_path}; "
                                      f"on_corrupt='skip' leaves such shards out)")

    def _prepare(self, k: int, sh: MediaShard) -> np.ndarray | None:
        """Check shard k against the index and scan it; the modality of each of its samples when it holds
        several (None: all are the one modality the index counts)."""
        hash_it = self.on_corrupt == "skip" and self.verify != "none"
        problem = file_problem(self.index.root, sh.file, hash_it)  # type: ignore[arg-type]  # same fields
        if problem is not None:
            raise self._corrupt(sh, problem)
        if hash_it:
            self._verified.add(k)
        several = sum(1 for n in sh.modalities.values() if n) > 1
        try:
            if self.index.format == "webdataset":
                table, modality_of = self._scan_tar(sh, several)
            else:
                table, modality_of = self._scan_parquet(sh, several)
        except _ScanError:
            # a file whose headers do not parse may simply be corrupt: say so when a checksum is asked for
            if self.verify != "none" and not hash_it:
                problem = file_problem(self.index.root, sh.file, True)  # type: ignore[arg-type]
                if problem is not None:
                    raise self._corrupt(sh, problem) from None
            raise
        if modality_of is not None:
            found = {m: int(n) for m, n in zip(*np.unique(modality_of, return_counts=True), strict=True)}
            expected = {m: n for m, n in sh.modalities.items() if n}
            if found != expected:
                raise _ScanError(f"{self._path(sh)}: samples per modality {found}, the index says {expected} "
                                 f"(shard {sh.name})")
        self._tables[k] = table
        return modality_of

    def _scan_tar(self, sh: MediaShard, several: bool) -> tuple[_TarTable, np.ndarray | None]:
        path = self._path(sh)
        where = f"{path} (shard {sh.name})"
        keys: list[str] = []
        rows: list[np.ndarray] = []
        exts: list[int] = []
        seen: set[str] = set()
        try:
            with tarfile.open(path, "r:") as tar:  # seekable: reads the 512-byte headers, seeks over the data
                members = tar.getmembers()
        except (tarfile.TarError, OSError, UnicodeDecodeError) as err:
            raise _ScanError(f"{where}: tar headers do not parse ({type(err).__name__}: {err})") from None
        for m in members:
            name = m.name
            key, dot, field = name.partition(".")
            if not m.isreg() or "/" in name or "\\" in name or not key or not dot or not field:
                raise _ScanError(f"{where}: tar member {name!r} is not a regular file named <key>.<field>")
            if m.offset_data + m.size > sh.file.bytes:
                raise _ScanError(f"{where}: tar member {name!r} ends at byte {m.offset_data + m.size}, past the "
                                 f"file's {sh.file.bytes}")
            if not keys or keys[-1] != key:
                if key in seen:
                    raise _ScanError(f"{where}: sample {key}'s members are not contiguous (member {name!r})")
                seen.add(key)
                keys.append(key)
                rows.append(np.full((4, 2), -1, dtype=np.int64))
                exts.append(-1)
            row = rows[-1]
            if field in MEDIA_EXTS:
                col = _MEDIA
                if exts[-1] >= 0:
                    raise _ScanError(f"{where}: sample {key} has two media members "
                                     f"({MEDIA_EXTS[exts[-1]]}, {field})")
                exts[-1] = MEDIA_EXTS.index(field)
            elif field in _FIELDS:
                col = _FIELDS[field]
            else:
                continue  # a member this reader does not use (readers ignore what they do not know)
            if row[col, 0] >= 0:
                raise _ScanError(f"{where}: sample {key} has member {field!r} twice")
            row[col] = (m.offset_data, m.size)
        if len(keys) != sh.samples:
            raise _ScanError(f"{where}: holds {len(keys)} samples, the index says {sh.samples}")
        for key, row in zip(keys, rows, strict=True):
            for col, what in ((_MEDIA, f"media member (<key>.{{{','.join(MEDIA_EXTS)}}})"), (_TXT, "<key>.txt"),
                              (_JSON, "<key>.json")):
                if row[col, 0] < 0:
                    raise _ScanError(f"{where}: sample {key} has no {what}")
        table = _TarTable(keys=np.array([k.encode() for k in keys], dtype=bytes),
                          members=np.stack(rows) if rows else np.zeros((0, 4, 2), np.int64),
                          exts=np.array(exts, dtype=np.uint8))
        if not several:
            return table, None
        modality_of = []
        fd = os.open(path, os.O_RDONLY)
        try:
            for i, key in enumerate(keys):
                record = self._parse_record(os.pread(fd, *(int(v) for v in table.members[i, _JSON][::-1])), sh, key)
                modality = record.get("modality")
                if not isinstance(modality, str):
                    raise _ScanError(f"{where}: sample {key}'s JSON record has no modality")
                modality_of.append(modality)
        finally:
            os.close(fd)
        return table, np.array(modality_of, dtype=object)

    def _scan_parquet(self, sh: MediaShard, several: bool) -> tuple[_ParquetTable, np.ndarray | None]:
        path = self._path(sh)
        where = f"{path} (shard {sh.name})"
        try:
            with pq.ParquetFile(path) as pf:
                md = pf.metadata
                names = set(pf.schema_arrow.names)
                modality = pf.read(columns=["modality"]).column(0).to_pylist() if several else None
        except (pa.ArrowException, OSError) as err:
            raise _ScanError(f"{where}: Parquet footer does not parse ({type(err).__name__}: {err})") from None
        missing = [c for c in PARQUET_COLUMNS if c not in names]
        if missing:
            raise _ScanError(f"{where}: columns {missing} missing")
        if md.num_rows != sh.samples:
            raise _ScanError(f"{where}: holds {md.num_rows} rows, the index says {sh.samples} samples")
        starts = np.cumsum([0] + [md.row_group(g).num_rows for g in range(md.num_row_groups)])[:-1].tolist()
        columns = PARQUET_COLUMNS + (("input_features",) if "input_features" in names else ())
        return _ParquetTable(starts, columns), None if modality is None else np.array(modality, dtype=object)

    # -- per process: open files, verify ---------------------------------------------------------------------

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_pid"] = None  # files are per process: the unpickled reader opens its own
        state["_files"] = OrderedDict()
        state["_row_groups"] = OrderedDict()
        return state

    def _own_process(self) -> None:
        """A forked worker inherits the parent's open files: drop them (a Parquet file's position is shared
        across a fork, and the parent's LRU is not this process's)."""
        pid = os.getpid()
        if self._pid != pid:
            if self._pid is not None:
                for f in self._files.values():
                    if isinstance(f, int):
                        os.close(f)  # this process's copy of the descriptor; the parent's stays open
            self._files = OrderedDict()
            self._row_groups = OrderedDict()
            self._pid = pid

    def drop_files(self) -> None:
        """Close this process's files (and decoded row groups): the next read opens (with verify="always",
        hashes) again."""
        self._own_process()
        for f in self._files.values():
            if isinstance(f, int):
                os.close(f)
            else:
                f.close()
        self._files.clear()
        self._row_groups.clear()

    def _open(self, k: int) -> Any:
        """Shard k's open file (an fd for a tar, a ParquetFile), opened and checked on first use."""
        f = self._files.get(k)
        if f is not None:
            self._files.move_to_end(k)
            return f
        sh = self._shards[k][1]
        hash_it = self.verify == "always" or (self.verify == "first_open" and k not in self._verified)
        # a stat before every open even unverified: a file truncated since the build would read short
        problem = file_problem(self.index.root, sh.file, hash_it)  # type: ignore[arg-type]
        if problem is not None:
            raise self._corrupt(sh, problem)
        if hash_it:
            self._verified.add(k)
        path = self._path(sh)
        f = os.open(path, os.O_RDONLY) if self.index.format == "webdataset" else pq.ParquetFile(path)
        self._files[k] = f
        if len(self._files) > OPEN_FILES:
            _, old = self._files.popitem(last=False)
            os.close(old) if isinstance(old, int) else old.close()
        return f

    # -- reads -----------------------------------------------------------------------------------------------

    def locate(self, stream: int, idx: int) -> tuple[str, int]:
        """(shard name, position in the shard) of sample idx of the stream."""
        k, pos = self._locate(stream, idx)
        return self._shards[k][1].name, pos

    def _locate(self, stream: int, idx: int) -> tuple[int, int]:
        if not 0 <= stream < len(self.streams):
            raise IndexError(f"stream {stream} is outside the split's {len(self.streams)} streams")
        if not 0 <= idx < self._size_list[stream]:
            raise IndexError(f"sample {idx} is outside stream {self.streams[stream].name!r} "
                             f"({self._size_list[stream]} samples)")
        starts = self._starts[stream]
        u = bisect_right(starts, idx) - 1
        k, positions = self._segments[stream][u]
        j = idx - starts[u]
        return k, j if positions is None else int(positions[j])

    def read(self, stream: int, idx: int) -> MediaSample:
        """Sample idx of stream `stream` (the stream's input order)."""
        self._own_process()
        k, pos = self._locate(stream, idx)
        if self.index.format == "webdataset":
            return self._read_tar(stream, k, pos)
        return self._read_parquet(stream, k, pos)

    def _read_tar(self, stream: int, k: int, pos: int) -> MediaSample:
        fd = self._open(k)
        sh = self._shards[k][1]
        table = self._tables[k]
        assert isinstance(table, _TarTable)
        key = table.keys[pos].decode()
        row = table.members[pos].tolist()

        def member(col: int) -> bytes:
            offset, size = row[col]
            data = os.pread(fd, size, offset)
            if len(data) != size:
                raise MediaDataError(f"{self._path(sh)}: sample {key}: {len(data)} of the member's {size} bytes "
                                     f"at offset {offset} (file truncated since the reader was built; shard "
                                     f"{sh.name})")
            return data

        features = None
        if row[_FEATURES][0] >= 0:
            raw = member(_FEATURES)
            try:
                features = np.load(io.BytesIO(raw), allow_pickle=False)
            except (ValueError, OSError, EOFError) as err:
                raise MediaDataError(f"{self._path(sh)}: sample {key}: {FEATURES_FIELD} is not a .npy array "
                                     f"({err}; shard {sh.name})") from None
        record = self._parse_record(member(_JSON), sh, key)
        return self._sample(stream, sh, key, MEDIA_EXTS[int(table.exts[pos])], member(_MEDIA), member(_TXT),
                            record, record.get("kind"), record.get("mime"), features)

    def _row_group(self, k: int, g: int, columns: tuple[str, ...]) -> pa.Table:
        cached = self._row_groups.get((k, g))
        if cached is not None:
            self._row_groups.move_to_end((k, g))
            return cached
        pf = self._open(k)
        try:
            table = pf.read_row_group(g, columns=list(columns))
        except (pa.ArrowException, OSError) as err:
            sh = self._shards[k][1]
            raise MediaDataError(f"{self._path(sh)}: row group {g} does not decode ({type(err).__name__}: "
                                 f"{err}; shard {sh.name})") from None
        self._row_groups[(k, g)] = table
        if len(self._row_groups) > ROW_GROUP_CACHE:
            self._row_groups.popitem(last=False)
        return table

    def _read_parquet(self, stream: int, k: int, pos: int) -> MediaSample:
        sh = self._shards[k][1]
        meta = self._tables[k]
        assert isinstance(meta, _ParquetTable)
        g = bisect_right(meta.row_group_starts, pos) - 1
        table = self._row_group(k, g, meta.columns)
        r = pos - meta.row_group_starts[g]

        def cell(name: str) -> Any:
            return table.column(name)[r]

        key = cell("id").as_py()
        media = cell("image") if cell("image").is_valid else cell("audio")
        data, media_path = (media["bytes"].as_py(), media["path"].as_py()) if media.is_valid else (None, None)
        if data is None or not media_path or "." not in media_path:
            raise MediaDataError(f"{self._path(sh)}: sample {key} (row {pos}) has no media bytes (image and "
                                 f"audio both null, or no path; shard {sh.name})")
        features = None
        if "input_features" in meta.columns and cell("input_features").is_valid:
            rows = cell("input_features").values  # a list of 80 lists of 3000 float32
            # a copy: the array must not pin the cached row group (nor be read-only)
            features = np.array(rows.flatten().to_numpy(zero_copy_only=False), dtype=np.float32)
            features = features.reshape(len(rows), -1) if len(rows) else features.reshape(0, 0)
        json_text = cell("json").as_py()
        record = self._parse_record(None if json_text is None else json_text.encode(), sh, key)
        text = cell("text").as_py()
        return self._sample(stream, sh, key, media_path.rsplit(".", 1)[1], data,
                            None if text is None else text.encode("utf-8", "surrogatepass"), record,
                            cell("kind").as_py(), cell("mime").as_py(), features)

    def _parse_record(self, raw: bytes | None, sh: MediaShard, key: str) -> dict:
        try:
            record = json.loads(raw) if raw is not None else None
        except (ValueError, RecursionError) as err:
            raise MediaDataError(f"{self._path(sh)}: sample {key}: its JSON record does not parse "
                                 f"({type(err).__name__}: {err}; shard {sh.name})") from None
        if not isinstance(record, dict):
            raise MediaDataError(f"{self._path(sh)}: sample {key}: its JSON record is not an object "
                                 f"(shard {sh.name})")
        return record

    def _sample(self, stream: int, sh: MediaShard, key: str, ext: str, media: bytes, text: bytes | None,
                record: dict, kind: Any, mime: Any, features: np.ndarray | None) -> MediaSample:
        """The sample, after the checks every format shares: the record is this sample's, of this stream."""
        st = self.streams[stream]

        def bad(what: str) -> MediaDataError:
            return MediaDataError(f"{self._path(sh)}: sample {key}: {what} (shard {sh.name})")

        if record.get("id") != key:
            raise bad(f"the JSON record's id is {record.get('id')!r}")
        if record.get("modality") != st.modality:
            raise bad(f"the JSON record's modality is {record.get('modality')!r}, the index puts the sample in "
                      f"stream {st.name}")
        if not isinstance(kind, str) or not isinstance(mime, str):
            raise bad(f"kind {kind!r} / mime {mime!r}: expected strings")
        if ext not in MEDIA_EXTS:
            raise bad(f"media suffix {ext!r} is not one of {list(MEDIA_EXTS)}")
        if text is None:
            raise bad("no text")
        try:
            decoded = text.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError as err:
            raise bad(f"its text is not UTF-8 ({err})") from None
        if features is not None and (features.dtype != np.float32 or features.shape != WHISPER_SHAPE):
            raise bad(f"input_features is {features.dtype} {features.shape}, expected float32 {WHISPER_SHAPE}")
        if features is None and st.modality == "audio" and self.index.audio_features == "whisper":
            raise bad("an audio sample without input_features in a set written with audio_features: whisper")
        return MediaSample(id=key, source=st.source, modality=st.modality, kind=kind, mime=mime, ext=ext,
                           media=media, text=decoded, record=record, input_features=features)
