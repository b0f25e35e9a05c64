"""What a committed dedup_band_buckets output must hold for the global pass to use it, read back from
storage: the guarantee behind the `shared_keys_are_shared` check.

The global pass (band_partitions.live_band_keys) maps each output's document numbers through its
numbering ("earlier runs' accepted documents 0..P-1, then every row of every signature partition in
config order", sized by `_bucket_of.json`) and offsets each output's keys past the previous outputs'
largest; so an output is usable only when every document number falls inside that numbering (one
outside it indexes another document, or past the end), its keys are numbered 0..K-1 (a gap or a
negative key shifts every later bucket's keys), and every key is held by two or more distinct documents
(a key held by one pairs nothing: a grouping bug). The figures the materialization reports (rows,
shared keys) must be those of the bytes written.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from platform_assets.contracts import DEFAULT_IO, IOSettings
from platform_assets.dedup.band_partitions import BUCKET_OF_FILE
from platform_assets.parquet_parts import TableSource
from platform_assets.storage import Storage

__all__ = ["SharedKeysAudit", "audit_shared_keys", "bucket_numbering"]


@dataclass(frozen=True)
class SharedKeysAudit:
    """One bucket output's (document, key) pairs against its `_bucket_of.json` and reported figures."""

    bucket: str
    pairs: int
    keys: int  # distinct keys in the output
    documents: int  # size of the numbering the output's record describes
    keys_held_by_one_document: int
    documents_out_of_range: int  # pairs whose document number is outside 0..documents-1
    duplicate_pairs: int
    problems: tuple[str, ...]  # empty: the global pass can use the output

    @property
    def passed(self) -> bool:
        return not self.problems


def bucket_numbering(record: dict) -> int:
    """How many documents the bucket's numbering spans: the earlier runs' accepted documents, then the
    rows of every signature partition it was grouped from (0 for a bucket that grouped nothing)."""
    prior = record.get("prior") or {}
    return int(prior.get("rows", 0)) + sum(int(rows) for _rel, _version, rows in record.get("inputs") or [])


def audit_shared_keys(storage: Storage, rel: str, reported_rows: int, reported_shared_keys: int,
                      io: IOSettings = DEFAULT_IO) -> SharedKeysAudit:
    """Read the output at `rel` back and list what makes it unusable (see the module docstring)."""
    bucket = rel.rstrip("/").split("/")[-1]
    if not storage.exists(f"{rel}/{BUCKET_OF_FILE}"):
        return SharedKeysAudit(bucket=bucket, pairs=0, keys=0, documents=0, keys_held_by_one_document=0,
                               documents_out_of_range=0, duplicate_pairs=0, problems=(f"no {BUCKET_OF_FILE}",))
    record = storage.read_json(f"{rel}/{BUCKET_OF_FILE}")
    assert isinstance(record, dict)
    documents = bucket_numbering(record)
    # read into arrays sized up front, each sorted copy freed once used: ~40 bytes a pair at the peak
    # (2 M pairs: +76 MiB and 0.56 s; +167 MiB and 0.71 s with concatenated batches and np.unique's sort)
    source = TableSource(storage, rel, io)
    pairs = source.num_rows
    doc, key = np.empty(pairs, np.int64), np.empty(pairs, np.int64)
    at = 0
    for batch in source.batches(["doc", "key"]):
        doc[at:at + batch.num_rows] = batch.column("doc").to_numpy()
        key[at:at + batch.num_rows] = batch.column("key").to_numpy()
        at += batch.num_rows
    problems = []
    if not record.get("used") and pairs:
        problems.append(f"{pairs} pairs in a bucket that records it grouped nothing")
    out_of_range = int(((doc < 0) | (doc >= documents)).sum())
    if out_of_range:
        problems.append(f"{out_of_range} document numbers outside 0..{documents - 1} "
                        f"(the numbering of {BUCKET_OF_FILE})")
    # distinct (key, document) pairs, sorted by key: a key's documents are then one run of the sort
    order = np.lexsort((doc, key))
    key, doc = key[order], doc[order]
    del order
    new_pair = np.ones(pairs, bool)
    new_pair[1:] = (key[1:] != key[:-1]) | (doc[1:] != doc[:-1])
    del doc
    duplicates = int(pairs - new_pair.sum())
    if duplicates:
        problems.append(f"{duplicates} (document, key) pairs written twice")
    pair_keys = key[new_pair]
    del key, new_pair
    first_of_key = np.flatnonzero(np.concatenate([[True], pair_keys[1:] != pair_keys[:-1]])) if pairs else \
        np.empty(0, np.int64)
    holders = np.diff(np.append(first_of_key, len(pair_keys)))  # distinct documents of each key
    distinct = len(first_of_key)
    held_once = int((holders < 2).sum())
    if held_once:
        problems.append(f"{held_once} keys held by fewer than 2 documents")
    if distinct and (pair_keys[0] != 0 or pair_keys[-1] != distinct - 1):
        problems.append(f"keys not numbered 0..{distinct - 1} ({pair_keys[0]}..{pair_keys[-1]})")
    if distinct != reported_shared_keys:
        problems.append(f"{distinct} keys written, {reported_shared_keys} reported")
    if pairs != reported_rows:
        problems.append(f"{pairs} rows written, {reported_rows} reported")
    return SharedKeysAudit(bucket=bucket, pairs=pairs, keys=distinct, documents=documents,
                           keys_held_by_one_document=held_once, documents_out_of_range=out_of_range,
                           duplicate_pairs=duplicates, problems=tuple(problems))
