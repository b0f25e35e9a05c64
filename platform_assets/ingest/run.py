"""Ingest one configured source into a committed output directory of document Parquet parts.

Parts are sized by rows and bytes, not by input files: consecutive files are grouped until they add up
to `ingest.group_input_bytes` (or `group_max_files`), each group is read by one pipeline into parts
`part-<group>-<k>.parquet`, and a part closes at `io.part_max_bytes` / `io.part_max_rows`. Groups are
decided from the sorted file listing alone (positions, never timing), so the output is byte-identical
for any `parallel_files`. Before, a folder of 754 pages became 754 one-row parts and dedup read 754
one-row batches (2x slower than one batch).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from platform_assets.contracts import PART_PREFIX, QUARANTINE_FILE, StageResult, usable_cores
from platform_assets.heap import mmap_threshold_fixed
from platform_assets.ingest.file_partitions import SourcePartition
from platform_assets.ingest.readers import InputUnit, source_root, source_units
from platform_assets.ingest.records import QuarantineSink, RecordBlock
from platform_assets.ingest.settings import IngestSettings, SourcePlan
from platform_assets.ingest.subset import ingest_subset, supports_subset
from platform_assets.ingest.writer import DocumentWriter, WriteStats
from platform_assets.parquet_parts import TableSink
from platform_assets.progress import Tracker, track
from platform_assets.schema import DOCUMENTS_SCHEMA
from platform_assets.schema import QuarantineReason as Q
from platform_assets.storage import S3Settings, Storage

__all__ = ["QUARANTINE_FILE", "IngestResult", "ingest_source", "input_groups"]

# Quarantine reasons that mean "a media room could not decode the file" (not a user's choice such as
# a path outside the roots or a page limit): their rate is what a broken decoder would move.
# Progress advances every 1,024 documents inside a file as well as at its end: cheap (a lock per
# 1,024 documents) and a step reading one 1 GB JSONL file still moves.
PROGRESS_RECORDS = 1024

DECODE_FAILURES = (Q.CORRUPT_IMAGE, Q.CORRUPT_PDF, Q.ENCRYPTED_PDF, Q.CORRUPT_AUDIO, Q.EMPTY_AUDIO,
                   Q.UNSUPPORTED_MEDIA)


@dataclass(frozen=True, kw_only=True)
class IngestResult(StageResult):
    """The stage result; `exclusions` is the quarantine table (rejected input records)."""

    source: str
    text_bytes: int
    input_files: int
    input_groups: int
    quarantine_counts: dict[str, int]
    modalities: dict[str, int] = field(default_factory=dict)  # documents per modality
    media_bytes: int = 0  # prepared media bytes stored inline
    ocr_pages: int = 0  # PDF pages whose text came from Tesseract
    pdf_text_pages: int = 0  # PDF pages with text (text layer or OCR)
    subset: dict[str, Any] | None = None  # a `subset:` run's figures (rows seen, rejected by the predicate, stop)

    @property
    def media_decode_failures(self) -> int:
        return sum(self.quarantine_counts.get(r, 0) for r in DECODE_FAILURES)

    @property
    def media_documents(self) -> int:
        return sum(self.modalities.get(m, 0) for m in ("image", "pdf", "audio"))

    @property
    def quarantined(self) -> int:
        return sum(self.quarantine_counts.values())

    @property
    def metadata(self) -> dict[str, Any]:
        out = {"source": self.source, "input_files": self.input_files, "input_groups": self.input_groups,
               "text_bytes": self.text_bytes, "quarantined": self.quarantined}
        media = {k: v for k, v in self.modalities.items() if k in ("image", "pdf", "audio")}
        if media:  # text sources report what they always did
            out.update({f"documents_{k}": v for k, v in sorted(self.modalities.items())})
            out.update(media_bytes=self.media_bytes, pdf_pages_ocr=self.ocr_pages,
                       pdf_pages_with_text=self.pdf_text_pages, media_decode_failures=self.media_decode_failures)
        if self.subset is not None:
            out.update(self.subset)
        return out

    @property
    def output_bytes(self) -> int:
        return sum(int(f["bytes"]) for f in self.files.values())


def input_groups(units: list[InputUnit], settings: IngestSettings) -> list[list[InputUnit]]:
    """Consecutive units, cut where a group reaches `group_input_bytes` or `group_max_files` (for
    media units also `media_group_files`: files, or a manifest chunk's rows)."""
    groups: list[list[InputUnit]] = []
    size = files = 0
    for unit in units:
        max_files = min(settings.group_max_files, settings.media_group_files) if unit.media else \
            settings.group_max_files
        if not groups or size >= settings.group_input_bytes or files >= max_files:
            groups.append([])
            size = files = 0
        groups[-1].append(unit)
        size += unit.size
        files += unit.files
    return groups


def _ingest_group(
    out: TableSink, cfg: SourcePlan, name: str, index: int, group: list[InputUnit], parse_threads: bool,
    tracker: Tracker, encode_lock: threading.Lock | None,
) -> tuple[WriteStats, QuarantineSink]:
    """`encode_lock`: None for a group read alone (its writer thread encodes a batch while the next
    block is parsed); else the lock the groups read at once share, each encoding its batches itself."""
    quarantine = QuarantineSink(name)
    parts = out.part_writer(DOCUMENTS_SCHEMA, f"{PART_PREFIX}-{index:05d}", write_behind=encode_lock is None)
    with DocumentWriter(parts, name, cfg.source(name).license, cfg.io, id_root=source_root(cfg, name),
                        write_lock=encode_lock) as writer:
        for unit in group:
            pending = 0  # documents not yet reported
            for rec in unit.read(quarantine, parse_threads):
                writer.add(rec)
                pending += len(rec) if isinstance(rec, RecordBlock) else 1
                if pending >= PROGRESS_RECORDS:  # a 1 GB file is one unit: count as it is read
                    tracker.advance(pending)
                    pending = 0
            tracker.advance(pending, unit.size)
    return writer.stats, quarantine


def ingest_source(
    cfg: SourcePlan, name: str, storage: Storage, out_rel: str, s3: S3Settings | None = None,
    part: SourcePartition | None = None,
) -> IngestResult:
    """Read every file of source `name` (of its file partition `part`, if given) and replace `out_rel`
    with its documents + quarantine.

    Groups of files are read `ingest.parallel_files` at a time; each writes its own parts, so the
    committed output is byte-identical whatever that number. Nothing is replaced unless the whole
    source was read: a crash leaves the previous output.
    """
    cfg.check_source_paths([name])
    if supports_subset(cfg.source(name)):
        return _ingest_subset(cfg, name, storage, out_rel, s3)
    units = source_units(cfg, name, s3, part)
    groups = input_groups(units, cfg.ingest)
    with mmap_threshold_fixed(cfg.ingest.malloc_mmap_threshold), \
            TableSink(storage, out_rel, DOCUMENTS_SCHEMA, cfg.io) as out:
        workers = min(cfg.ingest.parallel_files, len(groups))
        # A group alone keeps ~2 threads busy (parse, then compression in its writer thread); a
        # reader may add parse threads only while that leaves cores idle.
        parse_threads = 2 * workers < usable_cores()
        # Groups read at once encode their batches in their own threads, one group at a time, so
        # together they hold one encode and one parse (or parsed batch) per other group, as a group
        # alone holds one encode and one parse. Each with its own writer thread they held an encode
        # and a parse each: a source's peak stepped up where it first spanned two groups
        # (pipeline_scaling base 32 MB, 8 MiB batches, text source: 327 / 332 MB at 1x / 4x, one group;
        # 367 at 16x, two at once; 345-349 with the lock, 338-339 with file_io's early page release
        # too). The same CPU (1.50 vs 1.55 s in process on that 16x source).
        encode_lock = threading.Lock() if workers > 1 else None

        # documents read; input bytes of the files done, out of all (the ETA)
        with track("read", unit="documents", total_bytes=sum(u.size for u in units)) as tracker:
            def run(indexed: tuple[int, list[InputUnit]]) -> tuple[WriteStats, QuarantineSink]:
                return _ingest_group(out, cfg, name, indexed[0], indexed[1], parse_threads, tracker, encode_lock)

            if workers <= 1:
                results = [run(g) for g in enumerate(groups)]
            else:
                with ThreadPoolExecutor(workers, thread_name_prefix="ingest") as pool:
                    results = list(pool.map(run, enumerate(groups)))
        quarantine = QuarantineSink.merged(name, [q for _, q in results])
        out.write_side(QUARANTINE_FILE, quarantine.table())
    stats = WriteStats()
    for st, _ in results:
        stats.merge(st)
    return IngestResult(
        rel=out_rel,
        files=out.files,
        rows=stats.rows,
        schema=DOCUMENTS_SCHEMA,
        exclusions=QUARANTINE_FILE,
        source=name,
        text_bytes=stats.text_bytes,
        input_files=len(units),
        input_groups=len(groups),
        quarantine_counts=dict(sorted(quarantine.counts.items())),
        modalities=dict(sorted(stats.modalities.items())),
        media_bytes=stats.media_bytes,
        ocr_pages=stats.ocr_pages,
        pdf_text_pages=stats.pdf_text_pages,
    )


def _ingest_subset(cfg: SourcePlan, name: str, storage: Storage, out_rel: str, s3: S3Settings | None) -> IngestResult:
    """A source with `subset:`: one resumable stream (ingest/subset.py) instead of parallel groups."""
    run = ingest_subset(cfg, name, storage, out_rel, s3)
    files = storage.read_json(f"{out_rel}/_manifest.json")["files"]
    return IngestResult(
        rel=out_rel,
        files=files,
        rows=run.counts.rows_kept,
        schema=DOCUMENTS_SCHEMA,
        exclusions=QUARANTINE_FILE,
        source=name,
        text_bytes=run.counts.bytes_kept,
        input_files=run.input_files,
        input_groups=1,
        quarantine_counts=dict(sorted(run.quarantine.counts.items())),
        modalities={"text": run.counts.rows_kept} if run.counts.rows_kept else {},
        subset=run.metadata(),
    )
