"""Dispatch from a configured source to the records of all its files, in a stable order."""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import PurePosixPath

import pyarrow as pa
import pyarrow.fs as pafs

from platform_assets.ingest.file_io import compression_of, open_stream
from platform_assets.ingest.file_partitions import SourcePartition, files_of_bucket
from platform_assets.ingest.media_records import MediaReader
from platform_assets.ingest.media_types import MEDIA_EXTENSIONS
from platform_assets.ingest.readers.delimited import read_csv
from platform_assets.ingest.readers.huggingface import read_huggingface
from platform_assets.ingest.readers.jsonl import read_jsonl
from platform_assets.ingest.readers.manifest import manifest_chunks, read_manifest
from platform_assets.ingest.readers.parquet import read_parquet
from platform_assets.ingest.readers.plain_text import SIDECAR_SUFFIXES, read_lines, read_whole_file
from platform_assets.ingest.records import QuarantineSink, ReadContext, Record, RecordBlock
from platform_assets.ingest.roots import RootGuard, listed_outside_root
from platform_assets.ingest.salvaging_stream import open_record_stream, quarantine_broken_tail
from platform_assets.ingest.settings import (
    CsvSource,
    FolderSource,
    HuggingFaceSource,
    JsonlSource,
    ManifestSource,
    ParquetSource,
    SourcePlan,
    TextSource,
)
from platform_assets.media.settings import MediaSettings
from platform_assets.schema import QuarantineReason as Q
from platform_assets.storage import FileEntry, S3Settings, list_files, resolve_filesystem

_COMPRESSED = (".gz", ".bz2", ".zst", ".lz4")
DEFAULT_PATTERNS: dict[str, tuple[str, ...] | None] = {
    "jsonl": tuple(f"*.{ext}{c}" for ext in ("jsonl", "ndjson", "json") for c in ("", *_COMPRESSED)),
    "csv": tuple(f"*.{ext}{c}" for ext in ("csv", "tsv") for c in ("", *_COMPRESSED)),
    "parquet": ("*.parquet", "*.pq"),
    "text": tuple(f"*.txt{c}" for c in ("", *_COMPRESSED)),
    "folder": None,  # every file
    "manifest": tuple(f"*.{ext}{c}" for ext in ("jsonl", "ndjson") for c in ("", *_COMPRESSED)) + ("*.parquet",),
}


def _split_glob(path: str) -> tuple[str, str | None]:
    """'/data/web/*/part-*.jsonl' -> ('/data/web', '*/part-*.jsonl')."""
    parts = path.split("/")
    for i, part in enumerate(parts):
        if any(c in part for c in "*?["):
            return "/".join(parts[:i]) or "/", "/".join(parts[i:])
    return path, None


def source_root(cfg: SourcePlan, name: str) -> str:
    """The prefix that document ids leave out of a uri: the source's directory (the part of its path
    before any glob) or its file; a Hugging Face dataset's location."""
    location = cfg.source_location(name)
    if isinstance(cfg.source(name), HuggingFaceSource):
        return location
    root, _ = _split_glob(location)
    return root


def source_directory(cfg: SourcePlan, name: str) -> str:
    """The directory a source's files live under: its root, or the folder of a single-file source (a
    manifest's folder, against which its rows name their files)."""
    root = source_root(cfg, name)
    if isinstance(cfg.source(name), HuggingFaceSource) or os.path.isdir(root):
        return root
    if root.startswith("s3://") and not PurePosixPath(root).suffix:
        return root  # a prefix
    return root.rpartition("/")[0] or "/"


def source_files(
    cfg: SourcePlan, name: str, s3: S3Settings | None = None, part: SourcePartition | None = None
) -> tuple[ReadContext, str, list[FileEntry]]:
    """The read context, root and sorted file list of a file-based source (S3 settings default to
    the config's); with `part`, only that file partition's files (ingest/file_partitions.py)."""
    src = cfg.source(name)
    location = cfg.source_location(name)
    fs, path = resolve_filesystem(location, s3 or cfg.s3_settings())
    root, glob_pattern = _split_glob(path)
    patterns: str | tuple[str, ...] | None = glob_pattern or src.pattern or DEFAULT_PATTERNS[src.format]
    files = list_files(fs, root, patterns)
    if part is not None:
        files = files_of_bucket(files, root, part)
    ctx = ReadContext(
        source=name,
        fs=fs,
        quarantine=QuarantineSink(name),
        max_document_bytes=cfg.ingest.max_document_bytes,
        encoding=getattr(src, "encoding", "utf-8"),
        snapshot_s=int(src.snapshot_time.timestamp()) if src.snapshot_time else None,
        display_prefix="s3://" if location.startswith("s3://") else "",
    )
    return ctx, root, files


def _file_records(ctx: ReadContext, src, root: str, file: FileEntry, media: MediaSettings,
                  sidecar: FileEntry | None = None) -> Iterator[Record | RecordBlock]:
    if isinstance(src, ParquetSource):
        yield from read_parquet(ctx, file, src.text_field, src.meta_fields)
        return
    if isinstance(src, FolderSource) or (isinstance(src, TextSource) and src.unit == "file"):
        # one document per file: the only place where a file's bytes decide for all of it
        with open_stream(ctx.fs, file.path) as stream:
            reader = MediaReader(ctx, media, frozenset(src.media)) if getattr(src, "media", None) else None
            yield from read_whole_file(ctx, file, stream, root, reader, sidecar)
        return
    # Line and row formats decide per record, whatever the bytes around it: a NUL byte, invalid
    # UTF-8 or an overlong line costs its own line, and a damaged compressed tail costs the lines
    # from the damage on (quarantined below), never the records before them.
    if isinstance(src, JsonlSource) and isinstance(ctx.fs, pafs.LocalFileSystem) and compression_of(file.path) is None:
        with open(file.path, "rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            yield from read_jsonl(ctx, file, mapped, src.text_field, src.meta_fields, chat=src.chat)
        finally:
            try:
                mapped.close()
            except BufferError:  # a block is still referenced (the consumer stopped early): GC unmaps it
                pass
        return
    with open_record_stream(ctx.fs, file.path) as stream:
        if isinstance(src, JsonlSource):
            yield from read_jsonl(ctx, file, stream, src.text_field, src.meta_fields, chat=src.chat)
        elif isinstance(src, CsvSource):
            yield from read_csv(ctx, file, stream, src.text_field, src.meta_fields, src.delimiter)
        elif isinstance(src, TextSource):
            yield from read_lines(ctx, file, stream)
        else:  # pragma: no cover - the config's discriminated union has no other file formats
            raise TypeError(f"no file reader for {type(src).__name__}")
        quarantine_broken_tail(ctx, file.path, stream)


def _guarded(
    ctx: ReadContext, file: FileEntry, records: Callable[[], Iterator[Record | RecordBlock]], root: str
) -> Iterator[Record | RecordBlock]:
    """A file that fails mid-read keeps what was read before and is quarantined with the error; a listed
    file that is really outside the source root (a symlink) is quarantined unopened."""
    uri = ctx.uri(file.path)
    if (outside := listed_outside_root(ctx.fs, root, file.path)) is not None:
        ctx.quarantine.add(uri, Q.PATH_OUTSIDE_ROOT, outside)
        return
    if file.size == 0:
        ctx.quarantine.add(uri, Q.EMPTY_FILE, "0 bytes")
        return
    before = sum(ctx.quarantine.counts.values())
    n = 0
    try:
        for rec in records():
            n += len(rec) if isinstance(rec, RecordBlock) else 1
            yield rec
    except (OSError, pa.ArrowException, EOFError) as err:
        ctx.quarantine.add(uri, Q.UNREADABLE_FILE, f"after {n} records: {type(err).__name__}: {err}")
        return
    if n == 0 and sum(ctx.quarantine.counts.values()) == before:
        ctx.quarantine.add(uri, Q.EMPTY_FILE, "no records (only blank lines)")


@dataclass(frozen=True)
class InputUnit:
    """One independently readable piece of a source (a file, or a whole Hugging Face dataset).

    Consecutive units are grouped by size (`ingest.run.input_groups`); groups are read in parallel and
    each writes its own parts, named by the group's position, so the output is the same whatever the
    number of workers: the records of unit 0, then unit 1, ...
    """

    index: int
    label: str
    # read(sink, parse_threads): records, rejects into `sink`; see ReadContext.parse_threads
    read: Callable[[QuarantineSink, bool], Iterator[Record | RecordBlock]]
    size: int = 0  # bytes of the input file as listed (0 where unknown: a Hugging Face dataset)
    files: int = 1  # media files it names (a manifest chunk: its rows), for `ingest.media_group_files`
    media: bool = False  # decoding is its cost: groups are also cut at `ingest.media_group_files`


def sidecar_pairs(files: list[FileEntry]) -> dict[str, FileEntry]:
    """{media file path: its sidecar} for `cat.jpg` + `cat.txt` / `cat.json` in one directory (a
    `.json` sidecar wins over a `.txt` one). Only files with a known media extension get a sidecar."""
    by_stem: dict[str, list[FileEntry]] = {}
    for f in files:
        stem, dot, _ = f.path.rpartition(".")
        if dot and "/" not in f.path[len(stem):]:
            by_stem.setdefault(stem, []).append(f)
    pairs: dict[str, FileEntry] = {}
    for group in by_stem.values():
        sidecars = sorted((f for f in group if f.path.endswith(SIDECAR_SUFFIXES)),
                          key=lambda f: not f.path.endswith(".json"))
        media = [f for f in group if f.path.rpartition(".")[2].lower() in MEDIA_EXTENSIONS]
        if sidecars and media:
            for m in media:
                pairs[m.path] = sidecars[0]
    return pairs


def source_units(cfg: SourcePlan, name: str, s3: S3Settings | None = None,
                 part: SourcePartition | None = None) -> list[InputUnit]:
    src = cfg.source(name)
    if isinstance(src, HuggingFaceSource):
        location = cfg.source_location(name)
        mtime = int(src.snapshot_time.timestamp()) if src.snapshot_time else None
        return [InputUnit(0, location,
                          lambda sink, _threads=True: read_huggingface(src, location, sink, mtime, cfg.media))]
    ctx, root, files = source_files(cfg, name, s3, part)
    if isinstance(src, ManifestSource):
        return _manifest_units(cfg, src, ctx, root, files, s3)
    reads_media = bool(getattr(src, "media", None))
    pairs = sidecar_pairs(files) if reads_media and getattr(src, "sidecars", False) else {}
    consumed = {f.path for f in pairs.values()}

    def unit(index: int, file: FileEntry) -> InputUnit:
        def read(sink: QuarantineSink, parse_threads: bool = True) -> Iterator[Record | RecordBlock]:
            file_ctx = replace(ctx, quarantine=sink, parse_threads=parse_threads)
            return _guarded(file_ctx, file, lambda: _file_records(file_ctx, src, root, file, cfg.media,
                                                                  pairs.get(file.path)), root)

        return InputUnit(index, ctx.uri(file.path), read, file.size, media=reads_media)

    return [unit(i, f) for i, f in enumerate(f for f in files if f.path not in consumed)]


def _manifest_units(cfg: SourcePlan, src: ManifestSource, ctx: ReadContext, root: str, files: list[FileEntry],
                    s3: S3Settings | None) -> list[InputUnit]:
    """Each manifest is cut into chunks of `ingest.media_group_files` rows, one input unit each."""
    units: list[InputUnit] = []
    roots = [cfg.resolve(r) for r in src.roots]
    s3 = s3 or cfg.s3_settings()
    for file in files:
        if listed_outside_root(ctx.fs, root, file.path) is not None:  # chunking would open it: refuse it here
            def refuse(sink: QuarantineSink, parse_threads: bool = True, file=file) -> Iterator[Record | RecordBlock]:
                return _guarded(replace(ctx, quarantine=sink), file, lambda: iter(()), root)

            units.append(InputUnit(len(units), ctx.uri(file.path), refuse, file.size, media=True))
            continue
        base = ctx.uri(file.path).rpartition("/")[0] or "/"
        guard = RootGuard.for_base(base, roots)
        for chunk in manifest_chunks(ctx.fs, file, cfg.ingest.media_group_files):
            def read(sink: QuarantineSink, parse_threads: bool = True, file=file, chunk=chunk,
                     guard=guard) -> Iterator[Record | RecordBlock]:
                file_ctx = replace(ctx, quarantine=sink, parse_threads=parse_threads)
                return _guarded(file_ctx, file, lambda: read_manifest(
                    file_ctx, file, chunk, MediaReader(file_ctx, cfg.media), guard, s3), root)

            label = f"{ctx.uri(file.path)}#line={chunk[2]}"
            units.append(InputUnit(len(units), label, read, chunk[1] - chunk[0], files=cfg.ingest.media_group_files,
                                   media=True))
    return units
