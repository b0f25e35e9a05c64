"""Paths named inside the platform's own files (`_manifest.json`, a shard set's `index.json`) stay inside
the directory that holds them.

Readers join such a name to that directory and open it; a damaged or hand-edited file naming
`../../etc/passwd` or `/etc/passwd` would make them read (and hash, and report on) a file elsewhere.
The platform writes only plain relative names, so anything else is refused with the file and the entry.
"""

from __future__ import annotations

from pathlib import PurePosixPath


class UnsafePathError(ValueError):
    """A path inside a manifest or index that would leave its directory (the message names both)."""


def inside_path(name: object, where: str) -> str:
    """`name` when it is a non-empty relative POSIX path without `..` parts, else UnsafePathError."""
    if not isinstance(name, str) or not name:
        raise UnsafePathError(f"{where}: expected a relative path, got {name!r}")
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts or "\\" in name or "\0" in name:
        raise UnsafePathError(f"{where}: path {name!r} leaves its directory (absolute, '..' or a backslash): "
                              f"refused, not opened")
    return name


def check_index_paths(index: dict, index_path: str) -> None:
    """Every `sets[i].shards[j].files.<role>.path` of a shard set index is inside its directory. Entries of
    another shape are left to the index's own checks (they fail there, naming the key)."""
    for i, entry in enumerate(index.get("sets") or []):
        shards = entry.get("shards") if isinstance(entry, dict) else None
        for j, shard in enumerate(shards if isinstance(shards, list) else []):
            files = shard.get("files") if isinstance(shard, dict) else None
            for role, info in files.items() if isinstance(files, dict) else ():
                inside_path(info.get("path") if isinstance(info, dict) else None,
                            f"{index_path}: sets[{i}].shards[{j}].files.{role}.path")

