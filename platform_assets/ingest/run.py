"""Ingest one configured source into a committed output directory of document Parquet parts."""

from __future__ import annotations

from dataclasses import dataclass

from platform_assets.config import PipelineConfig
from platform_assets.ingest.readers import iter_source_records
from platform_assets.ingest.writer import DocumentWriter
from platform_assets.parquet_parts import write_table
from platform_assets.storage import S3Settings, Storage

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


def ingest_source(
    cfg: PipelineConfig, name: str, storage: Storage, out_rel: str, s3: S3Settings | None = None
) -> IngestResult:
    """Read every file of source `name` and replace `out_rel` with its documents + quarantine.

    Nothing is replaced unless the whole source was read: a crash leaves the previous output.
    """
    cfg.check_source_paths([name])
    src = cfg.source(name)
    with storage.staged_dir(out_rel) as staged:
        sink, n_files, records = iter_source_records(cfg, name, s3)
        writer = DocumentWriter(staged, name, src.license, cfg.ingest)
        try:
            for rec in records:
                writer.add(rec)
            stats = writer.close()
        except BaseException:
            writer.abort()
            raise
        write_table(staged, QUARANTINE_FILE, sink.table())
    return IngestResult(
        source=name,
        rows=stats.rows,
        text_bytes=stats.text_bytes,
        input_files=n_files,
        parts=stats.parts,
        quarantine_counts=dict(sorted(sink.counts.items())),
        files=staged.manifest,
    )
