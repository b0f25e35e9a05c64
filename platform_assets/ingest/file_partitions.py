"""File-range partitions: a large source split into `file_partitions` stable buckets of its files.

A source with `file_partitions: N` (N > 1) is N keys of the same dynamic `source` partition dimension,
`<source>.<bucket>` (`web.00` ... `web.03`), instead of the one key `<source>`; nothing else in the
asset graph changes shape, and a backfill over the keys fans ingest and cleaning out across runs.
`.` cannot occur in a source name (SOURCE_NAME_PATTERN), so a key names its source unambiguously.

A file's bucket is a hash of its path relative to the source root, never its position in the listing:
adding or changing a file changes only its own bucket's file list (and so its fingerprint), so the
sensor re-ingests that bucket alone. The hash leaves out the file's last suffix, so a media file and
its sidecar (`cat.jpg` + `cat.json`, read together: readers/__init__.py `sidecar_pairs`) share a
bucket. Document ids hash (source, location relative to the source root, text) and do not see the
bucket: a split source's documents are the unsplit source's, with the same ids.

Every place that enumerates per-source partitions (the sensor, the schedule, the CLI's `run`) or
reads all of them (dedup) takes the keys from here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from platform_assets.storage import FileEntry

KEY_SEPARATOR = "."
MIN_BUCKET_DIGITS = 2  # web.00 .. web.09 sort as strings in bucket order; 100+ buckets widen to 3 digits


class PartitionedSource(Protocol):
    """What the keys need to know of a configured source (every source model has both)."""

    name: str
    file_partitions: int | None


class PartitionKeyError(KeyError):
    """A partition key that is not one of the config's (a removed source, a changed split)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


@dataclass(frozen=True)
class SourcePartition:
    """One partition of a configured source: the whole source (bucket None) or one of its buckets."""

    source: str
    bucket: int | None = None
    buckets: int = 1

    @property
    def key(self) -> str:
        if self.bucket is None:
            return self.source
        return f"{self.source}{KEY_SEPARATOR}{self.bucket:0{bucket_digits(self.buckets)}d}"


def bucket_digits(buckets: int) -> int:
    return max(MIN_BUCKET_DIGITS, len(str(buckets - 1)))


def source_partitions_of(src: PartitionedSource) -> list[SourcePartition]:
    """The partitions of one source, in bucket order: [whole source] unless it is split."""
    n = src.file_partitions or 1
    if n == 1:
        return [SourcePartition(src.name)]
    return [SourcePartition(src.name, b, n) for b in range(n)]


def partition_keys(sources: Sequence[PartitionedSource]) -> list[str]:
    """Every partition key of the configured sources: config order, then bucket order. Global stages
    read their inputs in this order, so it is canonical for a given config."""
    return [p.key for src in sources for p in source_partitions_of(src)]


def parse_partition_key(sources: Sequence[PartitionedSource], key: str) -> SourcePartition:
    """The source partition a key names; PartitionKeyError (its message says what the config has
    instead) if the key is not one of the config's."""
    by_name = {s.name: s for s in sources}
    name = key.partition(KEY_SEPARATOR)[0]
    src = by_name.get(name)
    if src is not None:
        for part in source_partitions_of(src):
            if part.key == key:
                return part
        keys = [p.key for p in source_partitions_of(src)]
        shown = keys[0] if len(keys) == 1 else f"{keys[0]} .. {keys[-1]}"
        raise PartitionKeyError(f"partition {key!r} is not a partition of source {name!r}, which has "
                                f"{len(keys)} file partition(s) ({shown}): `file_partitions` changed since "
                                "it was added; materialize the current keys")
    raise PartitionKeyError(f"partition {key!r} is not a source of the config (configured: "
                            f"{', '.join(by_name) or 'none'}); remove the partition or add the source")


def bucket_of(relative_path: str, buckets: int) -> int:
    """The bucket of a file by its path relative to the source root, last suffix left out (sidecars
    go with their media file): the first 8 bytes of its sha256, modulo the bucket count. sha256, not
    Python's hash(): the same bucket in every process and on every machine."""
    stem, dot, suffix = relative_path.rpartition(".")
    grouped = stem if dot and stem and "/" not in suffix else relative_path
    digest = hashlib.sha256(grouped.encode("utf-8", "surrogateescape")).digest()
    return int.from_bytes(digest[:8], "big") % buckets


def relative_to_root(path: str, root: str) -> str:
    """A listed file's path below the source root ('' for a single-file source: the root itself)."""
    base = root.rstrip("/")
    if path == base:
        return ""
    return path[len(base) + 1:] if path.startswith(base + "/") else path


def files_of_bucket(files: list[FileEntry], root: str, part: SourcePartition) -> list[FileEntry]:
    """The listed files (sorted, as listed) that belong to `part`; all of them for a whole source."""
    if part.bucket is None:
        return files
    return [f for f in files if bucket_of(relative_to_root(f.path, root), part.buckets) == part.bucket]
