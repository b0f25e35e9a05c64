"""Which document pieces are in which packed sample (`provenance.parquet`), and `explain_document`:
where a document ended up, or which stage removed it and why.

One provenance row per segment (see SHARD_FORMAT.md): every format holds the same samples, so one
table serves all three. ~30 bytes per row on disk (zstd; ids are the bulk), e.g. 1 GB for 34M
segments.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import PurePosixPath

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads

from platform_assets.contracts import REMOVAL_TABLES
from platform_assets.layout import asset_dir
from platform_assets.packing.shard_index import FORMATS, INDEX_NAME
from platform_assets.storage import Storage

PROVENANCE_FILE = "provenance.parquet"
PACKED_SHARDS_ASSET = "packed_shards"
# Tables the earlier stages write beside their outputs, naming documents they did not pass on.

PROVENANCE_SCHEMA = pa.schema(
    [
        pa.field("split", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("shard", pa.int32(), nullable=False),  # index within the (split, source) set
        pa.field("sample", pa.int32(), nullable=False),  # index within the shard
        pa.field("segment", pa.int32(), nullable=False),  # position within the sample
        pa.field("document_id", pa.string(), nullable=False),
        pa.field("chunk", pa.int32(), nullable=False),  # the tokenized_documents chunk of the document
        pa.field("token_start", pa.int32(), nullable=False),  # offset of the piece within that chunk's tokens
        pa.field("tokens", pa.int32(), nullable=False),  # piece length
    ]
)


def provenance_rows(
    split: str,
    source: str,
    samples_per_shard: int,
    first_sequence: int,
    seq_ptr: np.ndarray,
    document_ids: pa.Array,
    chunks: np.ndarray,
    piece_start: np.ndarray,
    piece_len: np.ndarray,
) -> pa.Table:
    """Rows for a run of consecutive sequences of one set: sequence `first_sequence + j` holds pieces
    seq_ptr[j]:seq_ptr[j+1] (`document_ids`/`chunks` per piece); shard and sample follow from the
    sequence number exactly as the shard writers cut shards."""
    counts = np.diff(seq_ptr)
    n_pieces = int(seq_ptr[-1] - seq_ptr[0])
    sequence = np.repeat(np.arange(first_sequence, first_sequence + len(counts), dtype=np.int64), counts)
    segment = np.arange(n_pieces, dtype=np.int64) - np.repeat(seq_ptr[:-1] - seq_ptr[0], counts)
    return pa.table(
        {
            "split": pa.array([split] * n_pieces, pa.string()),
            "source": pa.array([source] * n_pieces, pa.string()),
            "shard": pa.array((sequence // samples_per_shard).astype(np.int32)),
            "sample": pa.array((sequence % samples_per_shard).astype(np.int32)),
            "segment": pa.array(segment.astype(np.int32)),
            "document_id": document_ids.cast(pa.string()),
            "chunk": pa.array(np.asarray(chunks, dtype=np.int32)),
            "token_start": pa.array(np.asarray(piece_start, dtype=np.int32)),
            "tokens": pa.array(np.asarray(piece_len, dtype=np.int32)),
        },
        schema=PROVENANCE_SCHEMA,
    )


# -- explain_document -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Placement:
    """One piece of the document in the packed set."""

    split: str
    source: str
    shard: int
    sample: int
    segment: int
    chunk: int
    token_start: int
    tokens: int

    @property
    def shard_name(self) -> str:
        return f"{self.split}/{self.source}/shard-{self.shard:05d}"


@dataclass(frozen=True)
class Removal:
    """A row naming the document in a stage's exclusions, duplicates or quarantine table."""

    output: str  # the stage output directory, relative to the storage root (e.g. cleaned_documents/web)
    table: str  # e.g. _exclusions.parquet
    rule: str | None
    detail: str | None


@dataclass(frozen=True)
class DocumentExplanation:
    document_id: str
    placements: tuple[Placement, ...]
    formats: tuple[str, ...]  # format directories of the packed set: each holds every placement
    removals: tuple[Removal, ...]
    tables_searched: int  # removal tables with a document id column that were searched

    @property
    def packed(self) -> bool:
        return bool(self.placements)

    def describe(self) -> str:
        """Human-readable lines, for the CLI."""
        lines = []
        if self.placements:
            chunks = sorted({p.chunk for p in self.placements})
            lines.append(f"{self.document_id}: packed, {len(self.placements)} piece(s) of {len(chunks)} chunk(s),"
                         f" in formats {', '.join(self.formats) or '(no format index found)'}")
            for p in self.placements:
                lines.append(f"  {p.shard_name} sample {p.sample} segment {p.segment}: chunk {p.chunk} tokens "
                             f"[{p.token_start}, {p.token_start + p.tokens})")
        for r in self.removals:
            lines.append(f"{self.document_id}: removed by {r.output} ({r.table}): {r.rule or '?'}"
                         + (f" ({r.detail})" if r.detail else ""))
        if not self.placements and not self.removals:
            lines.append(f"{self.document_id}: not found: not in the packed shards and in none of the "
                         f"{self.tables_searched} exclusion/duplicate/quarantine tables (never ingested, an "
                         "id from another corpus, or outputs older than the document)")
        return "\n".join(lines)


def _storage(storage_or_dir: Storage | str | os.PathLike) -> Storage:
    return storage_or_dir if isinstance(storage_or_dir, Storage) else Storage(os.fspath(storage_or_dir))


def _dataset(storage: Storage, rel: str) -> pads.Dataset:
    return pads.dataset(storage.path(rel), filesystem=storage.fs, format="parquet")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _removal_select(view: str, output: str, table_name: str, columns: list[str]) -> str | None:
    """SELECT of one removal table's rows for the id ($1), or None if the table names no documents
    (ingest's `_quarantine.parquet` holds rejected records, which never got an id)."""
    id_col = "removed_id" if "removed_id" in columns else "id" if "id" in columns else None
    if id_col is None:
        return None
    rule = next((c for c in ("rule", "reason") if c in columns), None)
    details = [c for c in ("value", "chunk", "detail", "kept_id", "kept_source", "similarity") if c in columns]
    detail = ("concat_ws(', ', " + ", ".join(f"'{c}=' || CAST({_quote(c)} AS VARCHAR)" for c in details) + ")"
              if details else "NULL")
    lit = "'" + output.replace("'", "''") + "'"
    return (f"SELECT {lit} AS output, '{table_name}' AS tbl, "
            f"{'CAST(' + _quote(rule) + ' AS VARCHAR)' if rule else 'NULL'} AS rule, {detail} AS detail "
            f"FROM {view} WHERE {_quote(id_col)} = $1")


def explain_document(
    storage_or_dir: Storage | str | os.PathLike, document_id: str, packed_rel: str | None = None
) -> DocumentExplanation:
    """Where `document_id` is in the packed shard set (shards, samples, formats) and every removal
    table under the storage root that names it (why it is absent, or why some of its chunks are).

    `storage_or_dir`: a Storage or the storage root; `packed_rel`: the packed_shards output (default
    packed_shards/_all). The removal tables are searched with one DuckDB query over all of them.
    """
    storage = _storage(storage_or_dir)
    packed_rel = packed_rel or asset_dir(PACKED_SHARDS_ASSET)
    con = duckdb.connect()
    placements: list[Placement] = []
    formats: tuple[str, ...] = ()
    if storage.exists(f"{packed_rel}/{PROVENANCE_FILE}"):
        con.register("provenance", _dataset(storage, f"{packed_rel}/{PROVENANCE_FILE}"))
        rows = con.execute(
            "SELECT split, source, shard, sample, segment, chunk, token_start, tokens FROM provenance "
            "WHERE document_id = $1 ORDER BY split, source, shard, sample, segment",
            [document_id],
        ).fetchall()
        placements = [Placement(*r) for r in rows]
        formats = tuple(f for f in FORMATS if storage.exists(f"{packed_rel}/{f}/{INDEX_NAME}"))

    selects = []
    for i, entry in enumerate(storage.list_files("", list(REMOVAL_TABLES))):
        rel = entry.path[len(storage.path("")) + 1 :]
        view = f"removal_{i}"
        ds = _dataset(storage, rel)
        select = _removal_select(view, str(PurePosixPath(rel).parent), PurePosixPath(rel).name, ds.schema.names)
        if select is not None:
            con.register(view, ds)
            selects.append(select)
    removals: list[Removal] = []
    if selects:
        sql = " UNION ALL ".join(selects) + " ORDER BY output, tbl, rule, detail"
        removals = [Removal(*r) for r in con.execute(sql, [document_id]).fetchall()]
    return DocumentExplanation(document_id, tuple(placements), formats, tuple(removals), len(selects))
