"""dedup's LSH band grouping as independent partitions: `dedup_band_buckets[b000 .. b007]`.

With `near.storage.type: disk` and MinHash, the global pass needs, for every band value two or more
documents hold, the documents holding it (band_buckets.py: BandBuckets.shared_keys). That grouping
splits by a hash of the band values, so it runs as BAND_BUCKET_PARTITIONS partitions, each on its own
(a backfill spreads them over runs and machines):

1. `dedup_signatures[source]` writes each document's band records pre-split by bucket partition
   (`_bands/b<k>-*.parquet`: row, band, values, and the sub-bucket of `near.storage.partitions`);
2. `dedup_band_buckets[b<k>]` reads bucket k's records of every signature partition (plus, in
   incremental mode, those of the documents earlier runs accepted, from `_signatures.parquet`),
   groups them one sub-bucket at a time (BandBuckets: memory ~1/partitions of the records) and
   writes the (document, key) pairs of the shared values, documents numbered as "earlier runs' accepted
   documents 0..P-1, then every row of every signature partition in config order";
3. the global pass maps that numbering to the documents it feeds (incremental mode skips documents
   seen before) and keeps the keys two fed documents share: exactly the keys it would have grouped
   itself, so the same decisions (tested).

8 partitions, fixed in code: Dagster fixes a partitions definition when it loads the definitions,
before any pipeline config is read (the config comes from the resource at run time, and a bad one must
not stop the code location from loading). The asset's backfill policy runs the requested buckets
together in one run on a small corpus (one run start, not 8); one run per bucket gives 8 machines each
1/8 of the records on a large one (defs/dedup_band_buckets/assets.py); `near.storage.partitions`
(default 64) still bounds the memory of each. Other storages (memory, redis), SimHash and near dedup
off need no grouping: the bucket partitions then commit an empty output whose metadata says so, and
the global pass reads none.

Every output records what it was computed from (`_bucket_of.json`: each signature partition's version
and rows, the earlier runs' artifact version, the settings); the global pass refuses, by name, a bucket
computed from anything else.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from platform_assets.contracts import DEFAULT_IO, MANIFEST_FILE, SIGNATURES_FILE, IOSettings, StageResult
from platform_assets.dedup.band_buckets import BandBuckets, SpillDir, band_records, record_dtype
from platform_assets.dedup.document_keys import KEYS_OF_FILE, keys_fingerprint
from platform_assets.dedup.lsh_shape import lsh_shape
from platform_assets.dedup.settings import DedupSettings
from platform_assets.dedup.signature_store import AcceptedSignatures
from platform_assets.parquet_parts import PartWriter, TableSink, TableSource
from platform_assets.storage import Storage

__all__ = ["BAND_BUCKET_PARTITIONS", "BUCKET_OF_FILE", "BandBucketResult", "BandRecordSplitter",
           "StaleBandBucketsError", "band_fingerprint", "bucket_keys", "bucket_problem", "check_band_buckets",
           "group_band_bucket", "keys_settings_problem", "live_band_keys", "signature_rows", "uses_band_buckets"]

BAND_BUCKET_PARTITIONS = 8
BUCKET_OF_FILE = "_bucket_of.json"
BANDS_DIR = "_bands"
SHARED_KEYS_SCHEMA = pa.schema([pa.field("doc", pa.int64(), nullable=False),
                                pa.field("key", pa.int64(), nullable=False)])


def bucket_keys(n: int = BAND_BUCKET_PARTITIONS) -> list[str]:
    return [f"b{k:03d}" for k in range(n)]


def uses_band_buckets(settings: DedupSettings) -> bool:
    """Whether the global pass takes its shared band keys from the bucket partitions."""
    near = settings.near
    return near.enabled and near.storage.type == "disk" and near.method == "minhash"


def band_fingerprint(settings: DedupSettings, n: int = BAND_BUCKET_PARTITIONS) -> dict[str, int] | None:
    """What band records depend on beyond the signatures; None when no bucket partition is used."""
    if not uses_band_buckets(settings):
        return None
    bands, rows = lsh_shape(settings.near)
    return {"bands": bands, "rows": rows, "sub_buckets": settings.near.storage.partitions, "bucket_partitions": n}


def keys_settings_problem(record: dict[str, Any], settings: DedupSettings) -> str | None:
    """Why keys whose `_keys_of.json` is `record` were not computed under `settings` (None: they were)."""
    found, expected = record.get("fingerprint") or {}, keys_fingerprint(settings)
    if found != expected:
        differ = sorted(k for k in set(found) | set(expected) if found.get(k) != expected.get(k))
        return f"computed with other dedup settings ({', '.join(differ)} differ)"
    if record.get("bands") != band_fingerprint(settings):  # the LSH shape, sub-buckets, or the storage
        return "computed with other dedup settings (band records differ)"
    return None


def signature_rows(storage: Storage, keys_rel: str) -> int:
    """Rows of a committed dedup_signatures output (its _keys_of.json)."""
    return int(storage.read_json(f"{keys_rel}/{KEYS_OF_FILE}")["rows"])


def _records_schema(rows: int) -> pa.Schema:
    return pa.schema([pa.field("row", pa.int64(), nullable=False), pa.field("band", pa.uint16(), nullable=False),
                      pa.field("values", pa.list_(pa.uint32(), rows), nullable=False),
                      pa.field("sub", pa.uint32(), nullable=False)])


class BandRecordSplitter:
    """Band records of a signature partition's documents, one stream of parts per bucket partition
    (`_bands/b<k>-NNNNN.parquet` inside the output `sink` stages)."""

    def __init__(self, sink: TableSink, settings: DedupSettings, n: int = BAND_BUCKET_PARTITIONS):
        shape = band_fingerprint(settings, n)
        assert shape is not None, "band records are written only when bucket partitions are used"
        self.bands, self.rows, self.sub_buckets, self.n = shape["bands"], shape["rows"], shape["sub_buckets"], n
        self._schema = _records_schema(self.rows)
        self._sink = sink
        self._writers: dict[int, PartWriter] = {}

    def add(self, first_row: int, signatures: np.ndarray, with_shingles: np.ndarray) -> None:
        records, sub = band_records(first_row, signatures, with_shingles, self.bands, self.rows, self.sub_buckets)
        part = sub % self.n
        for k in np.unique(part).tolist():
            mine = part == k
            picked = records[mine]
            table = pa.table([pa.array(picked["doc"]), pa.array(picked["band"]),
                              pa.FixedSizeListArray.from_arrays(pa.array(picked["values"].reshape(-1)), self.rows),
                              pa.array(sub[mine].astype(np.uint32))], schema=self._schema)
            if k not in self._writers:
                self._writers[k] = self._sink.part_writer(self._schema, prefix=f"{BANDS_DIR}/{bucket_keys(self.n)[k]}")
            self._writers[k].write(table)


@dataclass(frozen=True, kw_only=True)
class BandBucketResult(StageResult):
    bucket: str
    used: bool
    reason: str  # why the bucket is not used, or what it grouped
    records: int
    documents_with_shared_keys: int
    shared_keys: int

    @property
    def metadata(self) -> dict[str, Any]:
        return {"bucket": self.bucket, "used": self.used, "note": self.reason, "band_records": self.records,
                "documents_with_shared_keys": self.documents_with_shared_keys, "shared_keys": self.shared_keys}


def _commit(storage: Storage, out_rel: str, record: dict[str, Any], docs: np.ndarray, keys: np.ndarray,
            io: IOSettings) -> TableSink:
    with TableSink(storage, out_rel, SHARED_KEYS_SCHEMA, io) as sink:
        step = max(io.batch_rows, 1)
        for a in range(0, len(docs), step):
            sink.write(pa.table([pa.array(docs[a:a + step]), pa.array(keys[a:a + step])], schema=SHARED_KEYS_SCHEMA))
        sink.staged.write_bytes(BUCKET_OF_FILE, json.dumps(record, indent=1, sort_keys=True).encode())
    return sink


def _prior(storage: Storage, prior_rel: str | None, settings: DedupSettings) -> tuple[AcceptedSignatures | None, Any]:
    """Earlier runs' accepted documents (incremental mode, once an output exists) and what to record of them."""
    if not settings.incremental or prior_rel is None:
        return None, None
    table = TableSource(storage, prior_rel).side_table(SIGNATURES_FILE)
    if table is None:
        return None, None
    accepted = AcceptedSignatures.from_table(table, settings)
    return accepted, {"version": storage.output_version(prior_rel), "rows": len(accepted)}


def group_band_bucket(
    storage: Storage, bucket: str, keys_dirs: Sequence[str], out_rel: str, settings: DedupSettings,
    prior_rel: str | None = None, io: IOSettings = DEFAULT_IO, n: int = BAND_BUCKET_PARTITIONS,
) -> BandBucketResult:
    """Group bucket partition `bucket` of the band records of `keys_dirs` (dedup_signatures outputs, in
    config order; the caller checked them against their cleaned outputs) and, in incremental mode, of
    the accepted documents at `prior_rel`, into the shared (document, key) pairs, committed at `out_rel`."""
    k = bucket_keys(n).index(bucket)
    shape = band_fingerprint(settings, n)
    base = {"bucket": bucket, "fingerprint": keys_fingerprint(settings), "bands": shape}
    if shape is None:
        reason = (f"not used: near dedup {'off' if not settings.near.enabled else 'by ' + settings.near.method}"
                  f" with storage {settings.near.storage.type} groups no band buckets")
        sink = _commit(storage, out_rel, {**base, "used": False}, np.empty(0, np.int64), np.empty(0, np.int64), io)
        return BandBucketResult(rel=out_rel, files=sink.files, rows=0, schema=SHARED_KEYS_SCHEMA, bucket=bucket,
                                used=False, reason=reason, records=0, documents_with_shared_keys=0, shared_keys=0)
    bands, rows = shape["bands"], shape["rows"]
    for keys_rel in keys_dirs:  # records of another LSH shape would be grouped as garbage
        if why := keys_settings_problem(storage.read_json(f"{keys_rel}/{KEYS_OF_FILE}"), settings):
            raise StaleBandBucketsError(f"{keys_rel} ({why}): materialize that dedup_signatures partition again")
    prior, prior_record = _prior(storage, prior_rel, settings)
    spill = SpillDir(settings.near.storage.spill_dir)
    try:
        grouped = BandBuckets(spill.path, bands, rows, shape["sub_buckets"])
        records_in = 0
        offset = len(prior) if prior is not None else 0
        if prior is not None:
            records, sub = band_records(0, prior.signatures, prior.n_shingles > 0, bands, rows, shape["sub_buckets"])
            mine = sub % n == k
            grouped.add_records(records[mine], sub[mine])
            records_in += int(mine.sum())
        inputs = []
        for keys_rel in keys_dirs:
            part_rows = signature_rows(storage, keys_rel)
            for entry in storage.list_files(f"{keys_rel}/{BANDS_DIR}", f"{bucket}-*.parquet"):
                with storage.fs.open_input_file(entry.path) as f:
                    for batch in pq.ParquetFile(f).iter_batches(batch_size=io.batch_rows):
                        records = np.empty(batch.num_rows, record_dtype(rows))
                        records["doc"] = batch.column("row").to_numpy() + offset
                        records["band"] = batch.column("band").to_numpy()
                        records["values"] = batch.column("values").flatten().to_numpy().reshape(-1, rows)
                        grouped.add_records(records, batch.column("sub").to_numpy().astype(np.int64))
                        records_in += batch.num_rows
            inputs.append([keys_rel, storage.output_version(keys_rel), part_rows])
            offset += part_rows
        docs, keys = grouped.shared_keys()
    finally:
        spill.close()
    record = {**base, "used": True, "inputs": inputs, "prior": prior_record}
    sink = _commit(storage, out_rel, record, docs, keys, io)
    distinct = int(keys.max()) + 1 if len(keys) else 0
    return BandBucketResult(rel=out_rel, files=sink.files, rows=len(docs), schema=SHARED_KEYS_SCHEMA, bucket=bucket,
                            used=True, reason=f"{records_in} band records of {len(keys_dirs)} signature partitions",
                            records=records_in, documents_with_shared_keys=len(np.unique(docs)), shared_keys=distinct)


def bucket_problem(storage: Storage, bucket_rel: str, keys_dirs: Sequence[str], settings: DedupSettings,
                   prior: dict[str, Any] | None) -> str | None:
    """Why the bucket output at `bucket_rel` cannot serve a global pass over `keys_dirs` now (None: it can).
    prior: {"version", "rows"} of the earlier runs' artifact the pass starts from, None without one."""
    if not storage.exists(f"{bucket_rel}/{MANIFEST_FILE}") or not storage.exists(f"{bucket_rel}/{BUCKET_OF_FILE}"):
        return "missing"
    record = storage.read_json(f"{bucket_rel}/{BUCKET_OF_FILE}")
    if record.get("fingerprint") != keys_fingerprint(settings) or record.get("bands") != band_fingerprint(settings):
        return "computed with other dedup settings"
    expected = [[rel, storage.output_version(rel), signature_rows(storage, rel)]
                for rel in keys_dirs]
    if not record.get("used") or record.get("inputs") != expected:
        return "stale (computed from other dedup_signatures outputs)"
    if record.get("prior") != prior:
        return "stale (computed against another version of the earlier runs' accepted documents)"
    return None


class StaleBandBucketsError(ValueError):
    """Bucket outputs that do not describe the signature partitions (or earlier runs' artifact) the
    global pass reads now: the message names them and says what to materialize."""


def check_band_buckets(storage: Storage, bucket_dirs: Sequence[str], keys_dirs: Sequence[str],
                       settings: DedupSettings, prior: dict[str, Any] | None) -> None:
    """Raise StaleBandBucketsError naming every bucket output `bucket_problem` finds a problem with."""
    problems = [(rel, p) for rel in bucket_dirs if (p := bucket_problem(storage, rel, keys_dirs, settings, prior))]
    if problems:
        raise StaleBandBucketsError(
            "dedup band buckets not usable: " + "; ".join(f"{rel.split('/')[-1]} ({why})" for rel, why in problems)
            + " (materialize those dedup_band_buckets partitions first)")


def live_band_keys(storage: Storage, bucket_dirs: Sequence[str], live: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(document, key) pairs of every bucket output, documents mapped through `live` (the bucket
    numbering -> the global pass's document, -1 for one it does not feed), keeping the keys two fed
    documents share: the keys BandBuckets.shared_keys gives over the fed documents alone."""
    docs, keys = [], []
    next_key = 0
    for rel in bucket_dirs:  # each output's keys are dense from 0: offset past the previous outputs'
        top = -1
        for batch in TableSource(storage, rel).batches(["doc", "key"]):
            key = batch.column("key").to_numpy()
            docs.append(live[batch.column("doc").to_numpy()])
            keys.append(key + next_key)
            top = max(top, int(key.max()) if len(key) else -1)
        next_key += top + 1
    if not docs:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    doc, key = np.concatenate(docs), np.concatenate(keys)
    fed = doc >= 0
    doc, key = doc[fed], key[fed]
    _, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
    shared = counts[inverse] >= 2
    return doc[shared], key[shared]
