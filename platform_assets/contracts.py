"""What stages agree on, in one place: config base, names on disk, exclusions, counts, I/O settings,
the chat-messages contract and the result every stage returns.

This module imports nothing else from the platform, so every package may import it and none imports
another just to learn a file name or a column. A stage extends these shapes (its own exclusion
columns, its own counters); it never redefines them.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, fields
from typing import Annotated, Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field

# ---------------------------------------------------------------------------------------------------
# Config models


class StrictModel(BaseModel):
    """Base of every config section: unknown keys are errors (a typo must not be silently ignored)
    and values are frozen once loaded."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# A source's name is the partition key of every per-source asset and a directory name on disk.
SOURCE_NAME_PATTERN = r"^[a-z0-9][a-z0-9_\-]{0,63}$"
SOURCE_NAME_RE = re.compile(SOURCE_NAME_PATTERN)


class IOSettings(StrictModel):
    """How every stage reads and writes document-level Parquet outputs (the `io:` config section).

    One place for the batch size, compression and part size, so no stage borrows another's.
    """

    batch_rows: Annotated[int, Field(gt=0)] = 8192
    """Rows per record batch a stage reads and writes: memory is bounded by ~2 batches per stage."""
    batch_bytes: Annotated[int, Field(gt=0)] = 64 * 2**20
    """A batch is also cut at this much payload (text or media bytes), whatever its row count."""
    compression: Literal["zstd", "snappy", "none"] = "zstd"
    part_max_bytes: Annotated[int, Field(gt=0)] = 512 * 2**20
    """Start a new part file once this many uncompressed bytes went into the current one."""
    part_max_rows: Annotated[int, Field(gt=0)] = 1_000_000
    """... or this many rows: a folder of a million small files must not become a million parts."""
    workers: Annotated[int, Field(gt=0)] | None = None
    """Processes or threads for CPU-bound per-batch work (cleaning's processes, tokenize's encoding
    threads); None: the cores this process may use. The output is byte-identical for any number
    (batches and slices are done independently, written in order)."""
    work_bytes: Annotated[int, Field(gt=0)] = 2 * 2**20
    """CPU-bound Python work (cleaning, its checks) runs on slices of a batch of at most this much
    payload (text and media bytes), so its memory is bounded by this, not by `batch_bytes`: Python
    holds ~6-8x a slice's text in objects while cleaning it. Row groups are still cut at
    `batch_bytes` (the slices' results are put back together), so outputs do not depend on it."""

    def worker_count(self) -> int:
        return self.workers if self.workers is not None else usable_cores()


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


DEFAULT_IO = IOSettings()

# ---------------------------------------------------------------------------------------------------
# Names on disk: the side files beside the parts of an output directory `<asset>/<partition or _all>/`

MANIFEST_FILE = "_manifest.json"  # size + sha256 per file; its hash is the data version
QUARANTINE_FILE = "_quarantine.parquet"  # rejected input records (ingest), with reason
EXCLUSIONS_FILE = "_exclusions.parquet"  # removed documents (every later stage), with rule and value
DUPLICATES_FILE = "_duplicates.parquet"  # dedup's kept/removed pairs
SIGNATURES_FILE = "_signatures.parquet"  # dedup's MinHash signatures (incremental runs)
SHARD_INDEX_FILE = "index.json"  # a shard set's self-description (packing/SHARD_FORMAT.md)
PART_PREFIX = "part"
PART_GLOB = f"{PART_PREFIX}-*.parquet"
REMOVAL_TABLES = (EXCLUSIONS_FILE, DUPLICATES_FILE, QUARANTINE_FILE)

# ---------------------------------------------------------------------------------------------------
# Versioned Arrow schemas

SCHEMA_TAG_KEY = b"platform.schema"


def versioned_schema(fields_: list[pa.Field], name: str, version: int) -> pa.Schema:
    """A schema whose `name/version` travels in the Parquet metadata, so a reader can refuse a file
    written by an incompatible version instead of silently misreading it."""
    return pa.schema(fields_, metadata={SCHEMA_TAG_KEY: f"{name}/{version}".encode()})


def schema_tag(schema: pa.Schema) -> str | None:
    """The `name/version` tag stored in a schema's metadata, or None for a foreign file."""
    raw = (schema.metadata or {}).get(SCHEMA_TAG_KEY)
    return raw.decode() if raw else None


# One row per removed document, whatever the stage. `rule` is "<step>.<check>" (e.g.
# "gopher_quality.too_few_words"), so `GROUP BY rule` in DuckDB gives a funnel over every stage's
# table at once; `value` is what tripped it with the threshold ("37 < 50"); `bytes` the document's
# payload size when it was removed (null where the stage no longer has the payload, e.g. packing).
EXCLUSIONS_SCHEMA_NAME = "platform.exclusions"
EXCLUSIONS_SCHEMA_VERSION = 2
EXCLUSION_FIELDS: tuple[pa.Field, ...] = (
    pa.field("id", pa.string(), nullable=False),
    pa.field("rule", pa.string(), nullable=False),
    pa.field("value", pa.string(), nullable=True),
    pa.field("bytes", pa.int64(), nullable=True),
)


def exclusions_schema(stage: str, extra: tuple[pa.Field, ...] = ()) -> pa.Schema:
    """The exclusions schema of one stage: the shared columns, then the stage's own. The tag names the
    stage (`platform.exclusions.dedup/2`) because the columns after the shared four differ."""
    names = [f.name for f in extra]
    if clash := set(names) & {f.name for f in EXCLUSION_FIELDS}:
        raise ValueError(f"{stage}: exclusion columns {sorted(clash)} are shared ones")
    return versioned_schema([*EXCLUSION_FIELDS, *extra], f"{EXCLUSIONS_SCHEMA_NAME}.{stage}",
                            EXCLUSIONS_SCHEMA_VERSION)


# ---------------------------------------------------------------------------------------------------
# Counts


@dataclass
class Counts:
    """Base of every stage's counters: `merge` adds numbers, Counters and dicts field by field, extends
    lists, and requires every other field (a step's name, a seq_len) to be equal, so per-batch or
    per-worker counts combine without a hand-written merge per class."""

    def merge(self, other: Counts) -> Counts:
        if type(other) is not type(self):
            raise TypeError(f"cannot merge {type(other).__name__} into {type(self).__name__}")
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if isinstance(mine, bool) or not isinstance(mine, int | float | Counter | dict | list):
                if mine != theirs:
                    raise ValueError(f"cannot merge {type(self).__name__}: {f.name} {theirs!r} != {mine!r}")
            elif isinstance(mine, Counter):
                mine.update(theirs)
            elif isinstance(mine, dict):
                for k, v in theirs.items():
                    mine[k] = mine.get(k, 0) + v
            elif isinstance(mine, list):
                mine.extend(theirs)
            else:
                setattr(self, f.name, mine + theirs)
        return self

    def as_dict(self) -> dict[str, Any]:
        """Plain values for metadata and JSON: Counters become sorted dicts."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = dict(sorted(v.items())) if isinstance(v, dict) else v
        return out


# ---------------------------------------------------------------------------------------------------
# Chat documents: the conversation lives in meta["messages"] ({"role", "content"} objects). Ingest
# writes it, cleaning rewrites its contents (redaction, normalisation), tokenization renders it.

MESSAGES_KEY = "messages"
CHAT_ROLES = ("system", "user", "assistant")
Message = dict[str, str]


def chat_candidates(meta: pa.Array | pa.ChunkedArray | None) -> np.ndarray:
    """Rows whose meta may hold a conversation: those containing `"messages"` (one vectorised scan;
    only these are parsed, so plain-text batches never pay for JSON)."""
    if meta is None or pa.types.is_null(meta.type):  # an all-null column may come typed `null`
        return np.zeros(0, np.int64)
    if not (pa.types.is_string(meta.type) or pa.types.is_large_string(meta.type)):
        raise ValueError(f"meta column is {meta.type}, expected a JSON string")
    hit = pc.match_substring(meta, f'"{MESSAGES_KEY}"').fill_null(False)
    return np.flatnonzero(hit.to_numpy(zero_copy_only=False))

# ---------------------------------------------------------------------------------------------------
# The stage contract


@dataclass(frozen=True, kw_only=True)
class StageResult:
    """What every stage returns: its committed output directory and what it holds.

    `files` is the output's manifest (name -> size, sha256), whose hash is the data version;
    `schema` the schema of its data parts (None for outputs without document-level parts);
    `exclusions` the side file (relative to `rel`) holding what the stage removed or rejected, where it
    removes anything; `metadata` the stage's figures as plain values for the materialization. A
    stage's own result class derives from this one, adds its typed figures (funnel, counts, sets)
    and says which of them are its metadata.
    """

    rel: str
    files: dict[str, dict[str, object]]
    rows: int
    schema: pa.Schema | None = None
    exclusions: str | None = None

    @property
    def metadata(self) -> dict[str, Any]:
        """Plain values (numbers, strings) worth showing for this output; the asset adds charts."""
        return {}

    @property
    def parts(self) -> list[str]:
        return sorted(n for n in self.files
                      if n.rsplit("/", 1)[-1].startswith(f"{PART_PREFIX}-") and n.endswith(".parquet"))

    def exclusions_path(self) -> str | None:
        return f"{self.rel}/{self.exclusions}" if self.exclusions else None
