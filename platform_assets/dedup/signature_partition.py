"""One cleaned partition's document keys, computed once and stored: `dedup_signatures[source]`.

Shingling and MinHash (or SimHash), the exact keys and the keep-policy values are dedup's CPU-heavy
part (~20 us per 2 KB document) and depend on one document each (document_keys.py), so they run per
source partition, in the per-source chain, where a backfill spreads them over runs and machines.
The global pass (stage.py) then reads these keys instead of shingling every source's text again.

Stored as an ordinary output (Storage, TableSink: atomic commit, _manifest.json):

    dedup_signatures/<partition>/part-*.parquet     the keys, in the cleaned partition's row order
    dedup_signatures/<partition>/_keys_of.json      which cleaned output they were computed from
    dedup_signatures/<partition>/_bands/b<k>-*.parquet   band records by bucket partition (disk LSH only;
                                                         dedup_band_buckets[b<k>] reads them)

`_keys_of.json` holds the cleaned partition's version (the sha256 of its _manifest.json), its rows
and the settings fingerprint: keys of an older cleaned output, or computed under other dedup
settings, are stale and refused by name (`signature_problem`), never mixed into a decision.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import xxhash

from platform_assets.contracts import DEFAULT_IO, MANIFEST_FILE, IOSettings, StageResult
from platform_assets.dedup.band_partitions import (
    BandRecordSplitter,
    band_fingerprint,
    keys_settings_problem,
    uses_band_buckets,
)
from platform_assets.dedup.document_keys import KEYS_OF_FILE, DocumentKeyer, keys_fingerprint, signature_matrix
from platform_assets.dedup.keys import MEDIA_KEY_COLUMNS
from platform_assets.dedup.settings import DedupSettings
from platform_assets.parquet_parts import TableSink, TableSource
from platform_assets.progress import tracked_batches
from platform_assets.storage import Storage

__all__ = ["KEYS_OF_FILE", "SignaturePartitionResult", "StaleSignaturesError", "check_signature_partitions",
           "dedup_input_columns", "ids_digest", "signature_problem", "write_signature_partition"]


class StaleSignaturesError(ValueError):
    """Stored keys that do not describe the cleaned output they stand for (missing, older, or computed
    under other settings): the message names the partitions and says what to materialize."""


def dedup_input_columns(schema: pa.Schema, settings: DedupSettings) -> list[str]:
    """The cleaned columns the keys are computed from: never the media bytes (only their hashes; a
    batch of 8k images would be 800 MB)."""
    wanted = ["id", "source", "text", "modality", "media", "ingested_at"]
    if settings.quality_column:
        wanted.append(settings.quality_column.split(".")[0])
    columns = [c for c in wanted if c in schema.names]
    return [k for c in columns for k in (MEDIA_KEY_COLUMNS if c == "media" else (c,))]


@dataclass(frozen=True, kw_only=True)
class SignaturePartitionResult(StageResult):
    input_rel: str
    input_version: str | None
    with_shingles: int  # documents with at least one shingle (the others can only be exact duplicates)
    with_phash: int

    @property
    def metadata(self) -> dict[str, Any]:
        return {"documents": self.rows, "input": self.input_rel, "input_version": self.input_version or "none",
                "with_shingles": self.with_shingles, "with_phash": self.with_phash}


def write_signature_partition(
    storage: Storage, input_rel: str, out_rel: str, settings: DedupSettings, io: IOSettings = DEFAULT_IO,
) -> SignaturePartitionResult:
    """Read one committed cleaned output in batches of at most `dedup.slice_bytes` of text and commit
    its documents' keys at `out_rel`. The same input and settings give the same bytes."""
    version = storage.output_version(input_rel)  # read first: a commit meanwhile makes these keys stale
    if version is None:
        raise StaleSignaturesError(f"{input_rel} has no committed output ({MANIFEST_FILE} missing)")
    key_io = io.model_copy(update={"batch_bytes": min(io.batch_bytes, settings.slice_bytes)})
    source = TableSource(storage, input_rel, key_io)
    keyer = DocumentKeyer(settings)
    rows = with_shingles = with_phash = 0
    with TableSink(storage, out_rel, keyer.schema, io) as sink:
        # band records pre-split by bucket partition, for dedup_band_buckets (band_partitions.py)
        splitter = BandRecordSplitter(sink, settings) if uses_band_buckets(settings) else None
        if source.schema is not None:
            columns = dedup_input_columns(source.schema, settings)
            for batch in tracked_batches(source.batches(columns), "signatures", source.num_rows):
                keys = keyer.keys(batch, rows)
                if splitter is not None:
                    splitter.add(rows, signature_matrix(keys, keyer.width), keys.column("n_shingles").to_numpy() > 0)
                rows += keys.num_rows
                with_shingles += int(keys.column("n_shingles").to_numpy().astype(bool).sum())
                with_phash += len(keys) - keys.column("phash").null_count
                sink.write(keys)
        record = {"input": input_rel, "input_version": version, "rows": rows,
                  "fingerprint": keys_fingerprint(settings), "bands": band_fingerprint(settings)}
        sink.staged.write_bytes(KEYS_OF_FILE, json.dumps(record, indent=1, sort_keys=True).encode())
    return SignaturePartitionResult(rel=out_rel, files=sink.files, rows=rows, schema=keyer.schema,
                                    input_rel=input_rel, input_version=version, with_shingles=with_shingles,
                                    with_phash=with_phash)


def signature_problem(storage: Storage, input_rel: str, keys_rel: str, settings: DedupSettings) -> str | None:
    """Why the keys at `keys_rel` cannot stand for the cleaned output at `input_rel` now (None: they can)."""
    if not storage.exists(f"{keys_rel}/{MANIFEST_FILE}") or not storage.exists(f"{keys_rel}/{KEYS_OF_FILE}"):
        return "missing"
    record = storage.read_json(f"{keys_rel}/{KEYS_OF_FILE}")
    if not isinstance(record, dict):
        return f"{KEYS_OF_FILE} is not an object"
    if record.get("input_version") != storage.output_version(input_rel):
        return f"stale (computed from another version of {input_rel})"
    return keys_settings_problem(record, settings)


def check_signature_partitions(storage: Storage, pairs: Sequence[tuple[str, str]], settings: DedupSettings) -> None:
    """Raise StaleSignaturesError naming every (input, keys) pair whose keys cannot be used."""
    problems = [(keys_rel, p) for input_rel, keys_rel in pairs
                if (p := signature_problem(storage, input_rel, keys_rel, settings)) is not None]
    if problems:
        raise StaleSignaturesError(
            "dedup signatures not usable for: " + "; ".join(f"{rel.split('/')[-1]} ({why})" for rel, why in problems)
            + " (materialize those dedup_signatures partitions first)")


def ids_digest(batches: Iterator[pa.RecordBatch]) -> tuple[int, str]:
    """(rows, xxh3-128 of the ids in order): two outputs with the same digest hold the same ids in
    the same order, compared without holding either's ids (20-40 B each) in memory."""
    h = xxhash.xxh3_128()
    rows = 0
    for batch in batches:
        if batch.num_rows:  # each id then a NUL, hashed as one buffer per batch (one update per id: ~1 s a million)
            h.update("\x00".join(batch.column("id").to_pylist()).encode() + b"\x00")
        rows += batch.num_rows
    return rows, h.hexdigest()
