"""Ingest's settings: the sources (one Dagster partition each) and how they are read.

`PipelineConfig` (platform_assets/config.py) holds these; ingest itself never imports the config: it
reads through :class:`SourcePlan`, the few things it needs to know about the pipeline, so the config
may depend on ingest and not the other way round.
"""

from __future__ import annotations

import codecs
import os
from datetime import datetime
from typing import Annotated, Any, Literal, Protocol

from pydantic import Field, field_validator, model_validator

from platform_assets.contracts import SOURCE_NAME_PATTERN, IOSettings, StrictModel
from platform_assets.ingest.chat import ChatFields
from platform_assets.media.settings import MediaSettings
from platform_assets.storage import S3Settings

# Runs, partition keys and output folders grow with the count; 10,000 file partitions of a 10 TB source
# are ~1 GB each, well past where a backfill's fan-out pays
MAX_FILE_PARTITIONS = 10_000


class SubsetSettings(StrictModel):
    """`subset:` on a JSONL, Parquet or Hugging Face source: take part of a streamed source without
    reading more than the budget needs or storing what the predicate rejects (ingest/subset.py).

    Order: rows are read (projected to `columns`), filtered by `where`, turned into documents (bad
    kept rows are quarantined as usual), shuffled through the buffer, then cut at the budget."""

    where: str | None = None
    """A DuckDB SQL boolean expression over the source's raw fields, evaluated on each Arrow batch:
    `language = 'Python' AND license IN ('mit', 'apache-2.0')`. NULL counts as false. Rejected rows
    are counted (`rows_rejected_by_predicate`), never stored."""
    columns: list[str] | None = None
    """Projection: the only fields read, seen by `where` and kept in `meta`; must hold the text
    field (or the chat fields) and the meta fields."""
    shuffle_buffer: Annotated[int, Field(gt=0)] | None = None
    """A seeded buffer shuffle as `datasets.IterableDataset.shuffle(buffer_size, seed)` does it:
    memory grows by this many documents; its contents are checkpointed with the stream position."""
    seed: int = 0
    max_rows: Annotated[int, Field(gt=0)] | None = None
    max_bytes: Annotated[int, Field(gt=0)] | None = None
    """UTF-8 bytes of kept text."""
    max_tokens: Annotated[int, Field(gt=0)] | None = None
    """Tokens of kept text under `tokenizer` (no special tokens added)."""
    tokenizer: str | None = None
    """A local `tokenizer.json` (relative to the config file) for `max_tokens`."""
    checkpoint_rows: Annotated[int, Field(gt=0)] = 100_000
    """Kept documents per checkpoint: each closes its own parts and records the stream position, so
    an interrupted run redoes at most this many documents (100,000 documents of ~4 KB: ~0.4 GB)."""

    @field_validator("where")
    @classmethod
    def _parses(cls, value: str | None) -> str | None:
        if value is None:
            return None
        import duckdb

        try:  # syntax only: the columns are known from the first batch read (ingest/subset.py)
            statements = duckdb.extract_statements(f"SELECT * FROM subset_rows WHERE ({value})")
        except duckdb.Error as err:
            raise ValueError(f"not a SQL expression: {err}") from None
        if len(statements) != 1:
            raise ValueError("one SQL expression, not several statements")
        return value

    @model_validator(mode="after")
    def _tokenizer_for_tokens(self) -> SubsetSettings:
        if self.max_tokens is not None and self.tokenizer is None:
            raise ValueError("max_tokens needs `tokenizer` (a local tokenizer.json)")
        return self


def _check_subset_columns(src: Any) -> None:
    """The projection must keep what becomes the document: the text (or chat) fields and meta fields."""
    subset = src.subset
    if subset is None or subset.columns is None:
        return
    needed = []
    chat = getattr(src, "chat", None)
    if chat is None:
        needed.append(("text_field", src.text_field))
    else:
        needed += [(f"chat.{k}", v) for k, v in chat.model_dump().items() if isinstance(v, str)]
    needed += [("meta_fields", m) for m in src.meta_fields or []]
    if getattr(src, "media_field", None):
        needed.append(("media_field", src.media_field))
    missing = [f"{key} {name!r}" for key, name in needed if name not in subset.columns]
    if missing:
        raise ValueError(f"subset.columns: {subset.columns} leaves out {', '.join(missing)}")


class _SourceBase(StrictModel):
    name: Annotated[str, Field(pattern=SOURCE_NAME_PATTERN)]
    """Partition key of this source in every per-source asset: lower case, digits, `_`, `-`."""
    path: str
    """A file, a directory, or a glob; local (relative to the config file) or an s3:// URI."""
    license: str | None = None
    snapshot_time: datetime | None = None
    """Overrides the per-file modification time recorded as `ingested_at`."""
    recipe: str | None = None
    """The cleaning recipe that judges this source: a built-in one (web, code, docs, sft) or one of
    `cleaning.recipes` (platform_assets/cleaning/recipes.py); None: `cleaning.default_recipe`."""
    file_partitions: Annotated[int, Field(ge=1, le=MAX_FILE_PARTITIONS)] | None = None
    """Split a large source into this many partitions of its files (keys `<name>.00`, `<name>.01`, ...;
    ingest/file_partitions.py), so a backfill ingests and cleans them in separate runs. A file's
    partition is a hash of its path relative to the source root: adding a file re-ingests only its
    partition. None or 1: one partition keyed `<name>`. Document ids do not change with it."""

    @model_validator(mode="after")
    def _file_partitions_readable(self):
        if (self.file_partitions or 1) == 1:
            return self
        if self.format == "hf":  # type: ignore[attr-defined]
            raise ValueError("file_partitions: a Hugging Face source is read as one dataset stream, not as "
                             "listed files; leave it out (or point a jsonl/parquet source at its files)")
        if getattr(self, "subset", None) is not None:
            raise ValueError("file_partitions: a `subset:` source is one resumable stream with one budget "
                             "over all its files; it cannot be split into file partitions")
        return self

    def is_remote(self) -> bool:
        return "://" in self.path


class _FileSource(_SourceBase):
    pattern: str | None = None
    """Glob applied under `path` when it is a directory (default per format, e.g. `*.jsonl*`)."""
    encoding: str = "utf-8"
    """Legacy encodings (latin-1, cp1252, shift_jis, ...) are decoded here, at ingest."""

    @field_validator("encoding")
    @classmethod
    def _known_encoding(cls, value: str) -> str:
        try:
            codecs.lookup(value)
        except LookupError:
            raise ValueError(f"unknown encoding {value!r}") from None
        return value


class JsonlSource(_FileSource):
    format: Literal["jsonl"]
    text_field: str = "text"
    meta_fields: list[str] | None = None
    chat: ChatFields | None = None
    """Instruction / chat data: where the conversation is (`text_field` is then unused)."""
    """Fields kept in `meta`; None keeps every field except the text."""
    subset: SubsetSettings | None = None
    """Stream a subset: predicate, projection, shuffle, budget (ingest/subset.py)."""

    @model_validator(mode="after")
    def _subset_columns(self):
        _check_subset_columns(self)
        return self


class CsvSource(_FileSource):
    format: Literal["csv"]
    text_field: str = "text"
    meta_fields: list[str] | None = None
    delimiter: Annotated[str, Field(min_length=1, max_length=1)] = ","


class ParquetSource(_FileSource):
    format: Literal["parquet"]
    text_field: str = "text"
    meta_fields: list[str] | None = None
    subset: SubsetSettings | None = None
    """Stream a subset: predicate, projection, shuffle, budget (ingest/subset.py)."""

    @model_validator(mode="after")
    def _subset_columns(self):
        _check_subset_columns(self)
        return self


class TextSource(_FileSource):
    format: Literal["text"]
    unit: Literal["line", "file"] = "file"
    """`line`: every non-blank line is a document; `file`: every file is one."""


class FolderSource(_FileSource):
    format: Literal["folder"]
    """A folder of documents, one per file; HTML files are kept as modality `html` for cleaning."""
    media: list[Literal["image", "pdf", "audio"]] = []
    """Binary files of these kinds (recognised from their bytes) become media documents through the
    media rooms (`media:` section): an image or clip is one document, a PDF one per page. Other
    binary files are quarantined as `binary_file`, naming the type found."""
    sidecars: bool = True
    """With `media`: `cat.jpg` + `cat.txt` (the text) or `cat.json` (`caption` / `text` /
    `transcription` / `transcript` is the text, the rest goes to meta), the WebDataset/img2dataset
    convention. A sidecar is read with its media file, never as a document of its own."""


class ManifestSource(_FileSource):
    format: Literal["manifest"]
    """The unified multimodal manifest (JSONL or Parquet): one row per example, `modality` (image |
    pdf | audio), `file` relative to the manifest or an s3:// URI, `page`, `caption` /
    `instruction` + `response` / `transcription` / `messages`, `license` (ingest/readers/manifest.py)."""
    roots: list[str] = []
    """Where rows may point (local directories or s3:// prefixes, relative to the config file).
    Default: the manifest's own directory. A row resolving elsewhere (`../`, an absolute path, a
    symlink leading out) is quarantined as `path_outside_root` and never opened."""


class HuggingFaceSource(_SourceBase):
    format: Literal["hf"]
    config_name: str | None = None
    split: str = "train"
    text_field: str = "text"
    """For media rows (an `Image` or `Audio` column), the caption or transcript; may be absent there."""
    media_field: str | None = None
    """The `Image` / `Audio` column that makes each row a media document. Default: the dataset's only
    such column, if it has exactly one."""
    meta_fields: list[str] | None = None
    chat: ChatFields | None = None
    """Instruction / chat data: where the conversation is (`text_field` is then unused)."""
    streaming: bool = True
    """Hub ids and local data directories load through `load_dataset(..., streaming=True)`; a
    directory written by `save_to_disk` loads through `load_from_disk`."""

    data_files: str | list[str] | dict[str, str | list[str]] | None = None
    """Passed to `load_dataset` (which files of the dataset, per split)."""
    builder_kwargs: dict[str, Any] = {}
    """Other `load_dataset` keyword arguments of the builder (e.g. `{lang: python}` for a script's
    config parameters)."""
    subset: SubsetSettings | None = None
    """Stream a subset: predicate, projection, shuffle, budget (ingest/subset.py)."""

    @model_validator(mode="after")
    def _subset_columns(self):
        _check_subset_columns(self)
        return self

    def is_remote(self) -> bool:
        return not _looks_like_local_path(self.path)


SourceConfigType = (JsonlSource | CsvSource | ParquetSource | TextSource | FolderSource | ManifestSource
                    | HuggingFaceSource)
SourceConfig = Annotated[SourceConfigType, Field(discriminator="format")]


def _looks_like_local_path(path: str) -> bool:
    return path.startswith(("/", ".", "~")) or os.path.exists(os.path.expanduser(path))


class IngestSettings(StrictModel):
    """The `ingest:` section. Batch size, compression and part size are the `io:` section's."""

    max_document_bytes: Annotated[int, Field(gt=0)] = 64 * 2**20
    parallel_files: Annotated[int, Field(gt=0)] = 2
    """Input groups read and written at once, each by its own pipeline into its own parts (named by
    the group's position, so the output does not depend on this number). A pipeline keeps ~2 threads
    busy (parsing, then compression in its writer thread; both outside the GIL), so 2 fill 2 cores.
    While pipelines leave cores idle, each JSONL file is also parsed on several threads (costs ~40%
    more CPU per byte). Memory grows by about one batch per pipeline."""
    group_input_bytes: Annotated[int, Field(gt=0)] = 64 * 2**20
    """Consecutive input files are read into the same parts until they add up to this many bytes
    (decided from the file listing, so parts are the same for any `parallel_files`). 754 one-page
    files become one part instead of 754 one-row parts; a file of 64 MiB or more is a group alone,
    so large files still ingest in parallel."""
    group_max_files: Annotated[int, Field(gt=0)] = 100_000
    """... and at most this many files (bounds the per-group file list and quarantine bookkeeping)."""
    media_group_files: Annotated[int, Field(gt=0)] = 256
    """A source that reads media (a folder with `media`, a manifest) cuts its groups at this many files
    or manifest rows as well: decoding, not bytes, is the cost there (a 3 KB PNG costs as much CPU as
    ~1 MB of JSONL), so 3,786 small images still spread over parallel groups (15 parts)."""
    malloc_mmap_threshold: Annotated[int, Field(ge=0, le=32 * 2**20)] | None = 128 * 2**10
    """glibc's M_MMAP_THRESHOLD, fixed while a source is read (platform_assets/heap.py): the C heap's
    blocks from this size up (the parsers', Parquet's and Python's, not Arrow's pool) are mmapped and
    unmapped on free. glibc otherwise raises the threshold to each freed block's size, and the free holes
    of later blocks stay resident: in-process on pipeline_scaling's 16x text source (4.1 GB, two groups
    read at once) glibc's free heap grew 3 -> 28-33 MB over the run (1x: 3-4), the stage's peak 378-382
    MB against 353-356 at 1x; with 128 KiB (glibc's own starting value) 365-366 against 350-351, the
    same CPU (31-35 s). `null` leaves malloc as it is."""
    max_quarantine_fraction: Annotated[float, Field(ge=0, le=1)] = 0.05
    """Above this share of quarantined inputs the `quarantine_rate_within_bounds` check warns."""
    max_media_decode_failure_fraction: Annotated[float, Field(ge=0, le=1)] = 0.1
    """Above this share of media files that no room could decode (corrupt, encrypted, unsupported) the
    blocking `media_decode_failures_within_bounds` check fails: a broken decoder (a Pillow or libsndfile
    upgrade) would otherwise quietly turn a source into quarantine rows."""
    min_pdf_text_coverage: Annotated[float, Field(ge=0, le=1)] = 0.5
    """The `pdf_text_coverage` check warns when fewer PDF pages than this have text (from the text layer
    or OCR): what a missing Tesseract or a scanned corpus looks like."""


class SourcePlan(Protocol):
    """What ingest needs from the pipeline config (PipelineConfig provides it)."""

    ingest: IngestSettings
    io: IOSettings
    media: MediaSettings

    def source(self, name: str) -> SourceConfigType: ...

    def source_location(self, name: str) -> str: ...

    def resolve(self, path: str) -> str: ...

    def s3_settings(self) -> S3Settings: ...

    def check_source_paths(self, names: list[str] | None = None) -> None: ...
