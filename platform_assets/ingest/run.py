"""Ingest one configured source into a committed output directory of document Parquet parts."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from platform_assets.config import PipelineConfig
from platform_assets.ingest.readers import InputUnit, source_root, source_units
from platform_assets.ingest.records import QuarantineSink
from platform_assets.ingest.writer import DocumentWriter, WriteStats
from platform_assets.parquet_parts import write_table
from platform_assets.storage import S3Settings, StagedDir, Storage

QUARANTINE_FILE = "_quarantine.parquet"


@dataclass(frozen=True)
class IngestResult:
    source: str
    rows: int
    text_bytes: int
    input_files: int
    parts: list[str]
    quarantine_counts: dict[str, int]
    files: dict[str, dict[str, object]]  # the committed manifest: name -> bytes, sha256

    @property
    def quarantined(self) -> int:
        return sum(self.quarantine_counts.values())

    @property
    def output_bytes(self) -> int:
        return sum(int(f["bytes"]) for f in self.files.values())


def _usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _ingest_unit(
    staged: StagedDir, cfg: PipelineConfig, name: str, unit: InputUnit, parse_threads: bool
) -> tuple[WriteStats, QuarantineSink]:
    sink = QuarantineSink(name)
    with DocumentWriter(staged, name, cfg.source(name).license, cfg.ingest, f"part-{unit.index:05d}",
                        id_root=source_root(cfg, name)) as writer:
        for rec in unit.read(sink, parse_threads):
            writer.add(rec)
    return writer.stats, sink


def ingest_source(
    cfg: PipelineConfig, name: str, storage: Storage, out_rel: str, s3: S3Settings | None = None
) -> IngestResult:
    """Read every file of source `name` and replace `out_rel` with its documents + quarantine.

    Files are read `ingest.parallel_files` at a time; each writes its own parts, so the committed
    output is byte-identical whatever that number. Nothing is replaced unless the whole source was
    read: a crash leaves the previous output.
    """
    cfg.check_source_paths([name])
    units = source_units(cfg, name, s3)
    with storage.staged_dir(out_rel) as staged:
        workers = min(cfg.ingest.parallel_files, len(units))
        # Each file in flight keeps ~2 threads busy (parse, then compression in its writer thread);
        # a reader may add parse threads only while that leaves cores idle.
        parse_threads = 2 * workers < _usable_cores()
        if workers <= 1:
            results = [_ingest_unit(staged, cfg, name, u, parse_threads) for u in units]
        else:
            with ThreadPoolExecutor(workers, thread_name_prefix="ingest") as pool:
                results = list(pool.map(lambda u: _ingest_unit(staged, cfg, name, u, parse_threads), units))
        sink = QuarantineSink.merged(name, [s for _, s in results])
        write_table(staged, QUARANTINE_FILE, sink.table())
    return IngestResult(
        source=name,
        rows=sum(st.rows for st, _ in results),
        text_bytes=sum(st.text_bytes for st, _ in results),
        input_files=len(units),
        parts=[p for st, _ in results for p in st.parts],
        quarantine_counts=dict(sorted(sink.counts.items())),
        files=staged.manifest,
    )
