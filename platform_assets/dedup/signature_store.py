"""The accepted-signature artifact: what incremental dedup needs from earlier runs.

One row per accepted (kept) document: id, source, exact text hash, number of shingles and the MinHash
signature as a fixed-size list of uint32 (512 B at 128 slots; Parquet+zstd leaves ~530 B/doc since
hash values do not compress), or with `near.method: simhash` the 64-bit fingerprint as two uint32
(low word first). The LSH index is rebuilt from it by inserting the rows (~25 us per
document), never by re-reading or re-shingling text.

The schema metadata carries a fingerprint of every setting that changes signatures or text hashes
(hash scheme version, algorithm, num_perm, seed, shingling, exact normalisation): loading an
artifact written with other settings fails loudly instead of silently finding nothing.

Accepted image documents add an optional `phash` column (uint64, null for every other document), so
an incremental run finds near-duplicate images of earlier runs' images too. It is written only when
some accepted document has a phash: a text corpus's artifact stays byte for byte what it was, and an
artifact without the column (text, or written before image dedup) reads as "no phashes". The hash
comes from ingest, not from dedup settings, so it is not part of the fingerprint.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa

from platform_assets.dedup.exact import TEXT_HASH_TYPE
from platform_assets.dedup.hash64 import HASH_SCHEME_VERSION
from platform_assets.dedup.settings import DedupSettings

SIGNATURES_SCHEMA_NAME = "platform.dedup_signatures"
# rows per row group of the artifact: ~4 MB of signatures, the most its writer holds encoded
ARTIFACT_ROW_GROUP_ROWS = 8192
SIGNATURES_SCHEMA_VERSION = 1
FINGERPRINT_KEY = b"platform.dedup.fingerprint"


class SignatureMismatchError(ValueError):
    """The artifact was written with settings that produce incompatible signatures."""


def fingerprint(settings: DedupSettings) -> dict[str, object]:
    near, exact = settings.near, settings.exact
    out: dict[str, object] = {
        "hash_scheme": HASH_SCHEME_VERSION,
        "near_enabled": near.enabled,  # signatures of a run without near dedup are placeholders
        "algorithm": near.algorithm,
        "num_perm": near.num_perm,
        "seed": near.seed,
        "shingles": near.shingles.model_dump(),
        "exact": {k: v for k, v in exact.model_dump().items() if k != "enabled"},
    }
    if near.method != "minhash":
        # a SimHash fingerprint depends on the seed and shingles only (max_distance and blocks are
        # decisions, not signatures); a MinHash artifact keeps exactly the fingerprint it always had
        del out["algorithm"], out["num_perm"]
        out["method"] = near.method
    return out


def signatures_schema(num_perm: int, settings: DedupSettings | None = None, phash: bool = False) -> pa.Schema:
    meta = {b"platform.schema": f"{SIGNATURES_SCHEMA_NAME}/{SIGNATURES_SCHEMA_VERSION}".encode()}
    if settings is not None:
        meta[FINGERPRINT_KEY] = json.dumps(fingerprint(settings), sort_keys=True).encode()
    return pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("source", pa.string(), nullable=False),
            pa.field("text_hash", TEXT_HASH_TYPE, nullable=True),  # null when exact dedup is off
            pa.field("n_shingles", pa.int32(), nullable=False),  # 0: never inserted into the LSH
            pa.field("signature", pa.list_(pa.uint32(), num_perm), nullable=False),
            *([pa.field("phash", pa.uint64(), nullable=True)] if phash else []),
        ],
        metadata=meta,
    )


@dataclass
class AcceptedSignatures:
    """Accepted documents with their signatures, in acceptance order."""

    ids: pa.StringArray
    sources: pa.StringArray
    text_hashes: pa.FixedSizeBinaryArray
    n_shingles: np.ndarray  # int32
    signatures: np.ndarray  # (n, width) uint32
    phashes: pa.UInt64Array | None = None  # image documents' perceptual hashes; None: no document has one

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def width(self) -> int:
        return self.signatures.shape[1]

    @classmethod
    def empty(cls, num_perm: int) -> AcceptedSignatures:
        return cls(
            pa.array([], pa.string()),
            pa.array([], pa.string()),
            pa.array([], TEXT_HASH_TYPE),
            np.empty(0, np.int32),
            np.empty((0, num_perm), np.uint32),
        )

    def schema(self, settings: DedupSettings) -> pa.Schema:
        """The artifact's schema: with a `phash` column when some accepted document has one."""
        with_phash = self.phashes is not None and self.phashes.null_count < len(self.phashes)
        return signatures_schema(self.signatures.shape[1], settings, phash=with_phash)

    def _table(self, a: int, b: int, signatures: np.ndarray, schema: pa.Schema) -> pa.Table:
        flat = pa.array(np.ascontiguousarray(signatures, np.uint32).reshape(-1), pa.uint32())
        return pa.table(
            [
                self.ids.slice(a, b - a),
                self.sources.slice(a, b - a),
                self.text_hashes.slice(a, b - a),
                pa.array(self.n_shingles[a:b], pa.int32()),
                pa.FixedSizeListArray.from_arrays(flat, self.signatures.shape[1]),
                *([self.phashes.slice(a, b - a)] if "phash" in schema.names else []),
            ],
            schema=schema,
        )

    def to_table(self, settings: DedupSettings) -> pa.Table:
        return self._table(0, len(self), np.asarray(self.signatures), self.schema(settings))

    @classmethod
    def from_table(cls, table: pa.Table, settings: DedupSettings) -> AcceptedSignatures:
        """Load an artifact, refusing one whose fingerprint differs from `settings`'."""
        raw = (table.schema.metadata or {}).get(FINGERPRINT_KEY)
        expected = fingerprint(settings)
        if raw is None:
            raise SignatureMismatchError("signature table has no fingerprint: not written by this stage")
        found = json.loads(raw)
        if found != expected:
            diff = sorted(k for k in set(found) | set(expected) if found.get(k) != expected.get(k))
            raise SignatureMismatchError(
                f"accepted signatures were computed with other settings ({', '.join(diff)} differ): "
                "run a full (non-incremental) dedup to rebuild them"
            )
        width = settings.near.signature_width()
        sig_col = table.column("signature").combine_chunks()
        sigs = sig_col.flatten().to_numpy(zero_copy_only=False).astype(np.uint32).reshape(-1, width)
        return cls(
            table.column("id").combine_chunks(),
            table.column("source").combine_chunks(),
            table.column("text_hash").combine_chunks(),
            table.column("n_shingles").to_numpy().astype(np.int32),
            sigs,
            table.column("phash").combine_chunks().cast(pa.uint64()) if "phash" in table.column_names else None,
        )

    def extended(self, other: AcceptedSignatures) -> AcceptedSignatures:
        if len(self) == 0 and self.phashes is None:  # a first run: `other` itself, not a copy of its 512 B rows
            return other
        return AcceptedSignatures(
            pa.concat_arrays([self.ids, other.ids]),
            pa.concat_arrays([self.sources, other.sources]),
            pa.concat_arrays([self.text_hashes, other.text_hashes]),
            np.concatenate([self.n_shingles, other.n_shingles]),
            np.concatenate([np.asarray(self.signatures), np.asarray(other.signatures)]),
            None if self.phashes is None and other.phashes is None
            else pa.concat_arrays([self.phash_array(), other.phash_array()]),
        )

    def phash_array(self) -> pa.UInt64Array:
        """The phash of every accepted document (null where none)."""
        return self.phashes if self.phashes is not None else pa.nulls(len(self), pa.uint64())

    def has_phash(self) -> bool:
        return self.phashes is not None and self.phashes.null_count < len(self.phashes)

    def rows_slice(self, a: int, b: int) -> AcceptedSignatures:
        """Rows a..b: the columns' zero-copy slices and those rows' signatures."""
        return AcceptedSignatures(self.ids.slice(a, b - a), self.sources.slice(a, b - a),
                                  self.text_hashes.slice(a, b - a), self.n_shingles[a:b],
                                  self.signatures[a:b],
                                  None if self.phashes is None else self.phashes.slice(a, b - a))


class SignatureSource(Protocol):
    """A run's signatures on disk (signature_spill.SignatureSpill): `spill[indices]` reads those rows."""

    width: int

    def __getitem__(self, indices: np.ndarray) -> np.ndarray: ...


@dataclass
class TakenSignatures:
    """Rows `rows` (in that order) of a run's per-document columns as accepted signatures, taken a
    slice at a time by `artifact_row_groups`. Taking every accepted id, source and text hash at once
    for the artifact was the dedup decisions' peak: on pipeline_scaling's 16x input (336k accepted
    documents) the stage in-process peaked at 391 MB while it wrote the artifact, 372 MB (elsewhere in
    the decisions) like this; at 1x 286 MB either way. A row group's 8,192 rows take ~0.5 MB."""

    ids: pa.StringArray
    sources: pa.StringArray
    text_hashes: pa.FixedSizeBinaryArray
    n_shingles: np.ndarray  # int32, per row of the run
    signatures: np.ndarray | SignatureSource  # (n, width) per row of the run, in memory or spilled
    rows: np.ndarray  # int64: the run's rows to take
    phashes: Callable[[np.ndarray], pa.UInt64Array | None]  # the phash of given rows; None: no image has one

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def width(self) -> int:
        return self.signatures.shape[1] if isinstance(self.signatures, np.ndarray) else self.signatures.width

    def has_phash(self) -> bool:
        found = self.phashes(self.rows)
        return found is not None and found.null_count < len(found)

    def rows_slice(self, a: int, b: int) -> AcceptedSignatures:
        rows = self.rows[a:b]
        take = pa.array(rows, pa.int64())
        return AcceptedSignatures(self.ids.take(take), self.sources.take(take), self.text_hashes.take(take),
                                  self.n_shingles[rows], self.signatures[rows], self.phashes(rows))


def artifact_row_groups(parts: list[AcceptedSignatures | TakenSignatures], settings: DedupSettings,
                        rows: int) -> tuple[pa.Schema, Iterator[pa.Table]]:
    """The artifact of `parts` one after the other (an earlier run's accepted signatures, then this
    run's), `rows` rows a row group (the last one shorter): the tables of the parts joined
    (`extended`) and cut every `rows` rows, with only a row group's rows materialised at a time."""
    width = parts[-1].width  # this run's (an empty earlier artifact's may be num_perm's)
    parts = [p for p in parts if len(p)]
    schema = signatures_schema(width, settings, phash=any(p.has_phash() for p in parts))
    return schema, _row_groups(parts, schema, rows)


def _row_groups(parts: list[AcceptedSignatures | TakenSignatures], schema: pa.Schema, rows: int) -> Iterator[pa.Table]:
    starts = np.cumsum([0, *(len(p) for p in parts)])
    for a in range(0, int(starts[-1]), rows):
        b = min(a + rows, int(starts[-1]))
        pieces = [p.rows_slice(max(a, s) - s, min(b, s + len(p)) - s)
                  for p, s in zip(parts, starts[:-1].tolist(), strict=True) if s < b and s + len(p) > a]
        group = pieces[0]
        for piece in pieces[1:]:  # a row group across an earlier run's rows and this run's
            group = group.extended(piece)
        if "phash" in schema.names and group.phashes is None:
            group.phashes = group.phash_array()
        yield group._table(0, len(group), np.asarray(group.signatures), schema)
