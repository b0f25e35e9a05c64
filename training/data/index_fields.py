"""Typed field checks shared by the index readers (shard_index.py for `flat` token shards,
media_index.py for media shards): each error names the index file's key path and what was wrong, and
is raised as the reader's own error class."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class IndexFields:
    error: type[ValueError]

    def need(self, obj: dict[str, Any], key: str, kind: type, where: str) -> Any:
        if key not in obj:
            raise self.error(f"{where}: missing key {key!r}")
        value = obj[key]
        # bool is an int subclass: a count written as true/false is still wrong
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise self.error(f"{where}.{key}: expected {kind.__name__}, got {type(value).__name__} {value!r}")
        return value

    def count(self, obj: dict[str, Any], key: str, where: str) -> int:
        value = self.need(obj, key, int, where)
        if value < 0:
            raise self.error(f"{where}.{key}: must be >= 0, got {value}")
        return value

    def relative_path(self, path: str, where: str) -> str:
        """A shard path must stay inside the format directory: an index cannot point the reader elsewhere."""
        p = PurePosixPath(path)
        if p.is_absolute() or ".." in p.parts or not p.parts or "\\" in path:
            raise self.error(f"{where}.path: must be relative to the index directory, got {path!r}")
        return path

    def sha256(self, obj: dict[str, Any], where: str) -> str:
        sha = self.need(obj, "sha256", str, where)
        if len(sha) != 64 or not set(sha) <= _HEX:
            raise self.error(f"{where}.sha256: expected 64 lowercase hex digits, got {sha!r}")
        return sha
