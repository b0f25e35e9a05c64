"""The media shard stage over stored outputs: `dataset_splits` in, one media shard set out
(MEDIA_SHARD_FORMAT.md): per (split, source), the image, PDF-page and audio documents as shards in
every configured format, an index.json per format, and `_exclusions.parquet` (media documents that
could not be sharded, with the reason). Text documents are left to the token path.

Streaming: the input is read in record batches bounded by `io.batch_bytes` of payload (the row count
comes from the parts' own metadata), samples go to their set's open shard in input order, and every
open Parquet shard's row-group buffer counts against one budget of `io.batch_bytes`, so memory is one
input row group and batch plus that budget, whatever the number of sets or the size of a split. A tar
shard writes each sample as it comes. Shards are cut on sample count and payload bytes, decided once for
all formats, so every format holds the same samples in the same shards; same input and settings, same bytes.

Measured (2 cores, 512 x 512 JPEGs of ~240 kB and 10 s FLAC clips, both formats, audio_features none):
661 MB of media in 5.7 CPU-s (~115 MB/s in, ~230 MB/s of shards written; ~60 / 120 MB/s wall on this
disk), peak RSS ~700 MB at the default 64 MiB batch_bytes for a 237 MB and a 661 MB input alike (~400 MB
at 16 MiB). Whisper features cost ~65 CPU-ms per clip on top (torch).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from platform_assets.contracts import (
    DEFAULT_IO,
    EXCLUSIONS_FILE,
    SHARD_INDEX_FILE,
    SOURCE_NAME_PATTERN,
    SOURCE_NAME_RE,
    IOSettings,
    StageResult,
    exclusions_schema,
)
from platform_assets.media_shards.formats import MediaFormat, MediaSetHeader, get_format
from platform_assets.media_shards.formats.base import FileEntries, MediaShardWriter
from platform_assets.media_shards.index import INDEX_KIND, index_bytes
from platform_assets.media_shards.samples import REQUIRED_COLUMNS, MediaSample, check_columns, media_samples
from platform_assets.media_shards.settings import MediaShardSettings
from platform_assets.media_shards.stats import MediaCounts
from platform_assets.parquet_parts import TableSource, write_table
from platform_assets.storage import StagedDir, Storage

EXCLUSIONS_SCHEMA = exclusions_schema("media_shards")


@dataclass(frozen=True)
class SetSummary:
    split: str
    source: str
    samples: int
    shards: int
    payload_bytes: int
    modalities: dict[str, int]


@dataclass(frozen=True, kw_only=True)
class MediaShardsResult(StageResult):
    formats: tuple[str, ...]
    sets: tuple[SetSummary, ...]  # sorted by (split, source)
    counts: MediaCounts
    format_bytes: dict[str, int]  # shard file bytes per format (index.json not counted)
    audio_features: str

    @property
    def metadata(self) -> dict[str, Any]:
        c = self.counts
        out: dict[str, Any] = {
            "formats": ", ".join(self.formats), "samples": c.samples, "dagster/row_count": c.samples,
            "sets": len(self.sets), "shards": sum(s.shards for s in self.sets),
            "text_documents_skipped": c.text_documents, "media_excluded": sum(c.excluded.values()),
            "extra_media_items": c.extra_items, "media_bytes": c.media_bytes, "payload_bytes": c.payload_bytes,
            "audio_seconds": round(c.audio_seconds, 3), "audio_features": self.audio_features,
        }
        out.update({f"samples_{m}": n for m, n in sorted(c.modalities.items())})
        out.update({f"samples_split_{s}": n for s, n in sorted(c.splits.items())})
        out.update({f"bytes_{fmt}": n for fmt, n in self.format_bytes.items()})
        return out


@dataclass
class _Shard:
    number: int
    writers: dict[str, MediaShardWriter]
    samples: int = 0
    payload_bytes: int = 0
    modalities: Counter = field(default_factory=Counter)


class _Set:
    def __init__(self, split: str, source: str):
        self.split, self.source = split, source
        self.open: _Shard | None = None
        self.shards: list[dict[str, Any]] = []  # closed: name, samples, payload_bytes, modalities
        self.files: dict[str, list[FileEntries]] = {}

    @property
    def prefix(self) -> str:
        return f"{self.split}/{self.source}"


class MediaSetWriter:
    """Shards of every (split, source) in every format, cut once for all of them, and the indexes."""

    def __init__(self, staged: StagedDir, formats: list[MediaFormat], header: MediaSetHeader,
                 settings: MediaShardSettings, memory_budget: int):
        self.staged, self.formats, self.header, self.settings = staged, formats, header, settings
        self._budget = memory_budget
        self._sets: dict[tuple[str, str], _Set] = {}

    def _set(self, split: str, source: str) -> _Set:
        key = (split, source)
        if key not in self._sets:
            for what, value in (("split", split), ("source", source)):
                if not SOURCE_NAME_RE.match(value or ""):
                    raise ValueError(f"{what} {value!r} cannot name a shard directory (pattern {SOURCE_NAME_PATTERN})")
            self._sets[key] = _Set(split, source)
        return self._sets[key]

    def add(self, sample: MediaSample) -> tuple[str, int]:
        """Write the sample into every format; (shard name, its position in the shard)."""
        st = self._set(sample.split, sample.source)
        shard = st.open
        if shard is not None and (shard.samples >= self.settings.shard_max_samples
                                  or shard.payload_bytes + sample.payload_bytes > self.settings.shard_max_bytes):
            self._close_shard(st)  # a sample larger than shard_max_bytes still gets a shard of its own
            shard = None
        if shard is None:
            shard = st.open = self._open_shard(st)
        for writer in shard.writers.values():
            writer.add(sample)
        shard.samples += 1
        shard.payload_bytes += sample.payload_bytes
        shard.modalities[sample.modality] += 1
        self._bound_memory()
        return f"{st.prefix}/shard-{shard.number:05d}", shard.samples - 1

    def _open_shard(self, st: _Set) -> _Shard:
        number = len(st.shards)
        writers = {}
        for fmt in self.formats:
            rel = f"{st.prefix}/shard-{number:05d}{fmt.suffix}"
            writers[fmt.name] = fmt.open_shard(self.staged, f"{fmt.name}/{rel}", rel, self.header)
        return _Shard(number, writers)

    def _close_shard(self, st: _Set) -> None:
        shard, st.open = st.open, None
        st.shards.append({"name": f"{st.prefix}/shard-{shard.number:05d}", "samples": shard.samples,
                          "payload_bytes": shard.payload_bytes, "modalities": dict(sorted(shard.modalities.items()))})
        for name, writer in shard.writers.items():
            st.files.setdefault(name, []).append(writer.close())

    def _bound_memory(self) -> None:
        """Flush the largest row-group buffers until all open shards together hold <= the budget."""
        writers = [w for st in self._sets.values() if st.open for w in st.open.writers.values()]
        held = sum(w.buffered_bytes for w in writers)
        while held > self._budget:
            largest = max(writers, key=lambda w: w.buffered_bytes)  # ties: the first, in set order
            held -= largest.buffered_bytes
            largest.flush()

    def close(self) -> dict[str, dict]:
        """Close every shard, write each format's index.json; the indexes by format."""
        sets = [self._sets[k] for k in sorted(self._sets)]
        for st in sets:
            if st.open is not None:
                self._close_shard(st)
        indexes = {}
        for fmt in self.formats:
            entries = [_set_entry(st, st.files[fmt.name]) for st in sets]
            index = {
                "format": fmt.name, "format_version": fmt.version, "format_minor": fmt.minor, "kind": INDEX_KIND,
                "layout": fmt.layout(self.header), "audio_features": self.settings.audio_features,
                "shard_max_bytes": self.settings.shard_max_bytes, "shard_max_samples": self.settings.shard_max_samples,
                "sets": entries, "totals": _totals(entries),
            }
            self.staged.write_bytes(f"{fmt.name}/{SHARD_INDEX_FILE}", index_bytes(index))
            indexes[fmt.name] = index
        return indexes


def _set_entry(st: _Set, files: list[FileEntries]) -> dict[str, Any]:
    shards = [{**s, "files": f, "bytes": sum(e["bytes"] for e in f.values())}
              for s, f in zip(st.shards, files, strict=True)]
    return {"split": st.split, "source": st.source, **_totals(shards), "shards": shards}


def _totals(parts: list[dict[str, Any]]) -> dict[str, Any]:
    modalities = sum((Counter(p["modalities"]) for p in parts), Counter())
    return {"samples": sum(p["samples"] for p in parts), "bytes": sum(p["bytes"] for p in parts),
            "payload_bytes": sum(p["payload_bytes"] for p in parts), "modalities": dict(sorted(modalities.items()))}


PROVENANCE_FILE = "provenance.parquet"  # the same name as the token shards' (packing/provenance.py)
PROVENANCE_SCHEMA = pa.schema([
    pa.field("document_id", pa.string(), nullable=False),
    pa.field("split", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("modality", pa.string(), nullable=False),
    pa.field("shard", pa.string(), nullable=False),  # `<split>/<source>/shard-NNNNN`, in every format
    pa.field("sample", pa.int32(), nullable=False),  # position in the shard, from 0
    pa.field("uri", pa.string()),  # the document's location, relative to its source's directory
    pa.field("media_uri", pa.string()),  # the file (and page) the media came from
    pa.field("sha256", pa.string(), nullable=False),  # of the media bytes in the shard
])


class ProvenanceWriter:
    """`provenance.parquet`: which document is in which shard, at which position (every format holds
    the same samples in the same shards). Written in row groups of 65,536 rows as samples arrive, so
    memory does not grow with the set (~100 bytes a row in flight)."""

    ROWS_PER_GROUP = 65_536

    def __init__(self, staged: StagedDir, compression: str):
        self._staged, self._compression = staged, compression
        self._rows: list[tuple] = []

    def __enter__(self) -> ProvenanceWriter:
        self._file = self._staged.open_output(PROVENANCE_FILE)
        self._writer = pq.ParquetWriter(self._file, PROVENANCE_SCHEMA, compression=self._compression)
        return self

    def add(self, sample: MediaSample, shard: str, position: int) -> None:
        r = sample.record
        self._rows.append((sample.id, sample.split, sample.source, sample.modality, shard, position, r["uri"],
                           r["media_uri"], r["sha256"]))
        if len(self._rows) >= self.ROWS_PER_GROUP:
            self._flush()

    def _flush(self) -> None:
        columns = list(zip(*self._rows, strict=True)) if self._rows else [[] for _ in PROVENANCE_SCHEMA]
        self._writer.write_table(pa.Table.from_arrays(
            [pa.array(c, f.type) for c, f in zip(columns, PROVENANCE_SCHEMA, strict=True)], schema=PROVENANCE_SCHEMA))
        self._rows = []

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None and self._rows:
            self._flush()
        self._writer.close()
        self._file.close()


def write_media_shards(storage: Storage, in_rel: str, out_rel: str, settings: MediaShardSettings,
                       io: IOSettings = DEFAULT_IO, uri_bases: Mapping[str, str] | None = None) -> MediaShardsResult:
    """Write the media shard set of `in_rel` (dataset_splits parts) to `out_rel`, staged and committed
    atomically. `uri_bases`: {source: its directory}; samples record uris relative to it, so the shard
    set is the same bytes wherever the corpus lives. Raises ValueError for input that is not a
    dataset_splits output or a split/source name that cannot name a directory; nothing is committed then."""
    source = TableSource(storage, in_rel, io)
    if source.schema is None:
        raise ValueError(f"no dataset_splits parts under {in_rel}")
    check_columns(source.schema, in_rel)
    formats = [get_format(name) for name in dict.fromkeys(settings.formats)]
    if not formats:
        raise ValueError("media_shards.formats is empty")
    header = MediaSetHeader(audio_features=settings.audio_features == "whisper")
    counts = MediaCounts()
    exclusions: list[dict[str, Any]] = []
    with storage.staged_dir(out_rel) as staged, ProvenanceWriter(staged, io.compression) as provenance:
        writer = MediaSetWriter(staged, formats, header, settings, io.batch_bytes)
        for batch in source.tracked_batches("shard", REQUIRED_COLUMNS):
            got = media_samples(batch, header.audio_features, uri_bases)
            counts.text_documents += got.text_rows
            counts.extra_items += got.extra_items
            for sample in got.samples:
                provenance.add(sample, *writer.add(sample))
                counts.add(sample)
            for row in got.exclusions:
                counts.excluded[row["rule"]] += 1
            exclusions += got.exclusions
        indexes = writer.close()
        write_table(staged, EXCLUSIONS_FILE, pa.Table.from_pylist(exclusions, EXCLUSIONS_SCHEMA), io.compression)
    first = indexes[formats[0].name]
    sets = tuple(SetSummary(e["split"], e["source"], e["samples"], len(e["shards"]), e["payload_bytes"],
                            e["modalities"]) for e in first["sets"])
    return MediaShardsResult(
        rel=out_rel, files=staged.manifest, rows=counts.samples, exclusions=EXCLUSIONS_FILE,
        formats=tuple(f.name for f in formats), sets=sets, counts=counts,
        format_bytes={name: ix["totals"]["bytes"] for name, ix in indexes.items()},
        audio_features=settings.audio_features)
