"""What dedup's global pass needs of each document, without its text: the per-document keys.

Every value here depends on the document alone (its text, media hashes, timestamp or quality), never
on the documents around it, so keys computed batch by batch, partition by partition, on any machine,
are the values the in-process path computes: `DocumentKeyer.keys(batch)` is pure. The global pass
(deduplicator.py) takes them through `Deduplicator.add_keys`; `Deduplicator.add_batch` computes them
from text in the same process (the library path, `deduplicate()`), `dedup_signatures[source]`
computes them once per cleaned partition and stores them (signature_partition.py).

One row per document:
- `id`, `source`, `row` (its position in the input it was read from);
- `text_hash`: the exact-dedup key (keys.py, per modality; null when exact dedup is off);
- `priority`: the keep policy's value (keep_policy.priority_values; float64, so timestamps and
  quality scores keep every bit);
- `n_shingles`, `signature` (MinHash slots, or SimHash's 2 words; placeholders when near dedup is
  off): ~530 B at 128 slots;
- `phash`: the image's perceptual hash (image_near.image_phashes), null for every other document;
- `shingles`: the distinct top-32-bit shingle hashes, sorted (what ShingleStore/ShingleSpill keep
  for `verify: exact`; their `get` returns exactly these), null unless near dedup verifies exactly.
  4 B per distinct shingle: ~1.5 KB for a 2 KB document, the largest column.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from platform_assets.dedup.exact import TEXT_HASH_TYPE
from platform_assets.dedup.image_near import image_phashes
from platform_assets.dedup.keep_policy import priority_values
from platform_assets.dedup.keys import exact_keys, near_dedup_texts
from platform_assets.dedup.minhash import EMPTY, MinHasher
from platform_assets.dedup.settings import DedupSettings
from platform_assets.dedup.shingles import ShingleBatch, compute_in_slices, shingle_hashes
from platform_assets.dedup.signature_store import fingerprint
from platform_assets.dedup.simhash import SimHasher, signature_words

__all__ = ["KEYS_FINGERPRINT_KEY", "KEYS_OF_FILE", "DocumentKeyer", "keys_fingerprint", "keys_schema", "keeps_shingles",
           "shingle_lists", "signature_matrix"]

KEYS_SCHEMA_NAME = "platform.dedup_document_keys"
KEYS_SCHEMA_VERSION = 1
KEYS_FINGERPRINT_KEY = b"platform.dedup.keys_fingerprint"
KEYS_OF_FILE = "_keys_of.json"  # beside stored keys: the input version, rows and settings they are of


def keeps_shingles(settings: DedupSettings) -> bool:
    """Whether the global pass verifies candidates on shingles (it then needs them per document)."""
    return settings.near.enabled and settings.near.verify == "exact"


def keys_fingerprint(settings: DedupSettings) -> dict[str, object]:
    """Every setting a stored key depends on: the signature artifact's fingerprint (hash scheme,
    shingling, MinHash/SimHash parameters, exact normalisation) plus what decides the other
    columns. Keys written under another fingerprint are stale, never silently mixed in."""
    return {
        **fingerprint(settings),
        "exact_enabled": settings.exact.enabled,
        "keep": settings.keep,
        "quality_column": settings.quality_column if settings.keep == "highest_quality" else None,
        "shingles_kept": keeps_shingles(settings),
    }


def keys_schema(settings: DedupSettings) -> pa.Schema:
    meta = {b"platform.schema": f"{KEYS_SCHEMA_NAME}/{KEYS_SCHEMA_VERSION}".encode(),
            KEYS_FINGERPRINT_KEY: json.dumps(keys_fingerprint(settings), sort_keys=True).encode()}
    return pa.schema([
        pa.field("id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("row", pa.int64(), nullable=False),
        pa.field("text_hash", TEXT_HASH_TYPE),
        pa.field("priority", pa.float64()),
        pa.field("n_shingles", pa.int32(), nullable=False),
        pa.field("signature", pa.list_(pa.uint32(), settings.near.signature_width()), nullable=False),
        pa.field("phash", pa.uint64()),
        pa.field("shingles", pa.list_(pa.uint32())),
    ], metadata=meta)


def _plain(col: pa.Array | pa.ChunkedArray, typ: pa.DataType) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    return col.cast(typ) if col.type != typ else col


def _distinct_top32(shingles: ShingleBatch) -> tuple[np.ndarray, np.ndarray]:
    """(values, offsets): each document's distinct top-32-bit shingle hashes, sorted. One sort of
    (document << 32 | value) for the whole batch instead of one np.unique per document."""
    n = shingles.n_docs
    doc = np.repeat(np.arange(n, dtype=np.uint64), shingles.counts.astype(np.int64))
    packed = np.unique((doc << np.uint64(32)) | (shingles.hashes >> np.uint64(32)))
    offsets = np.searchsorted(packed >> np.uint64(32), np.arange(n + 1, dtype=np.uint64)).astype(np.int64)
    return (packed & np.uint64(0xFFFFFFFF)).astype(np.uint32), offsets


class DocumentKeyer:
    """Computes the keys of a batch of documents (the cleaned documents schema) under `settings`."""

    def __init__(self, settings: DedupSettings):
        self.settings = settings
        near = settings.near
        self.minhasher = MinHasher(near.num_perm, near.seed, near.algorithm)
        self.simhasher = SimHasher(near.seed) if near.method == "simhash" else None
        self.width = near.signature_width()
        self.schema = keys_schema(settings)

    def keys(self, batch: pa.RecordBatch | pa.Table, first_row: int = 0) -> pa.RecordBatch:
        """Keys of every row of `batch`, in order; `row` counts from `first_row`."""
        s = self.settings
        n = batch.num_rows
        hashes = exact_keys(batch, s.exact) if s.exact.enabled else pa.nulls(n, TEXT_HASH_TYPE)
        image_rows, phashes = image_phashes(batch)
        with_phash = np.zeros(n, dtype=bool)
        with_phash[image_rows] = True
        phash = np.zeros(n, np.uint64)
        phash[image_rows] = phashes
        sigs, n_sh, shingle_values, shingle_offsets = self._near_keys(batch)
        shingles = (pa.ListArray.from_arrays(pa.array(shingle_offsets, pa.int32()), pa.array(shingle_values))
                    if shingle_values is not None else pa.nulls(n, pa.list_(pa.uint32())))
        columns = [
            _plain(batch.column("id"), pa.string()),
            _plain(batch.column("source"), pa.string()),
            pa.array(np.arange(first_row, first_row + n, dtype=np.int64)),
            _plain(hashes, TEXT_HASH_TYPE),
            _plain(priority_values(batch, s.keep, s.quality_column), pa.float64()),
            pa.array(n_sh, pa.int32()),
            pa.FixedSizeListArray.from_arrays(pa.array(sigs.reshape(-1), pa.uint32()), self.width),
            pa.array(phash, pa.uint64(), mask=~with_phash),
            shingles,
        ]
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def _near_keys(self, batch: pa.RecordBatch | pa.Table
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
        """(signatures, n_shingles, distinct top-32 shingle values or None, their offsets or None)."""
        s = self.settings
        n = batch.num_rows
        if not s.near.enabled:
            return np.full((n, self.width), EMPTY, np.uint32), np.zeros(n, np.int32), None, None
        text = near_dedup_texts(batch)
        sigs, counts, values, offsets = [], [], [], [np.zeros(1, np.int64)]
        end = 0
        for a, b in compute_in_slices(text):  # ~1 MiB of text at a time: the shingle hashes stay small
            shingles = shingle_hashes(text[a:b], s.near.shingles)
            if self.simhasher is not None:
                sigs.append(signature_words(self.simhasher.fingerprints(shingles)))
            else:
                sigs.append(self.minhasher.signatures(shingles))
            counts.append(shingles.counts.astype(np.int32))
            if keeps_shingles(s):
                v, o = _distinct_top32(shingles)
                values.append(v)
                offsets.append(o[1:] + end)
                end += int(o[-1])
        signatures = np.concatenate(sigs) if sigs else np.empty((0, self.width), np.uint32)
        n_sh = np.concatenate(counts) if counts else np.empty(0, np.int32)
        if not keeps_shingles(s):
            return signatures, n_sh, None, None
        flat = np.concatenate(values) if values else np.empty(0, np.uint32)
        if end >= 2**31:  # a list array's int32 offsets: 2 G shingles is ~40 GB of text in one batch
            raise ValueError(f"{end} shingles in one batch of {n} documents: lower dedup.slice_bytes")
        return signatures, n_sh, flat, np.concatenate(offsets)


def signature_matrix(keys: pa.RecordBatch | pa.Table, width: int) -> np.ndarray:
    """The `signature` column as an (n, width) uint32 array."""
    col = _plain(keys.column("signature"), pa.list_(pa.uint32(), width))
    return col.flatten().to_numpy(zero_copy_only=False).astype(np.uint32, copy=False).reshape(-1, width)


def shingle_lists(keys: pa.RecordBatch | pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """The `shingles` column as (flat uint32 values, int64 offsets per row); null rows are empty."""
    col = _plain(keys.column("shingles"), pa.list_(pa.uint32()))
    lengths = pc.fill_null(pc.list_value_length(col), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    offsets = np.concatenate([np.zeros(1, np.int64), np.cumsum(lengths)])
    values = pc.list_flatten(col).to_numpy(zero_copy_only=False).astype(np.uint32, copy=False)
    return values, offsets
