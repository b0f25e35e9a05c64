"""The traversal guard: a path named inside the data (a manifest's `file`, a Hugging Face row's `path`)
is read only if it resolves inside the source's roots.

`../../etc/passwd`, an absolute path elsewhere and a symlink pointing out are refused before anything
is opened: local paths are resolved with `os.path.realpath` (which follows symlinks without opening
the target) and compared with the real roots; S3 keys are normalised (`a/../b` -> `b`) and must start
with a root prefix. A refused path is quarantined as `path_outside_root` naming where it led.

The same holds for the files a source directory lists: Arrow's local listing follows symlinks (a link
to a file, or into a linked directory, is listed as if it were there), so `listed_outside_root` checks
each listed file's real path against the source's real root before it is opened.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass

import pyarrow.fs as pafs

from platform_assets.ingest.records import Rejected
from platform_assets.schema import QuarantineReason as Q


@dataclass(frozen=True)
class RootGuard:
    base: str
    """Where relative names start: the manifest's directory (a local path or s3://bucket/prefix)."""
    roots: tuple[str, ...]
    """Where files may be read from (local paths or s3:// prefixes); the base itself by default."""

    @classmethod
    def for_base(cls, base: str, roots: list[str] | tuple[str, ...] = ()) -> RootGuard:
        return cls(base, tuple(roots) or (base,))

    def resolve(self, name: str) -> str:
        """The location (local path or s3:// URI) a name refers to, or Rejected(path_outside_root)."""
        if not isinstance(name, str) or not name.strip():
            raise Rejected(Q.MISSING_FILE, f"no file named (got {name!r})")
        if "://" in name:
            scheme, _, rest = name.partition("://")
            if scheme != "s3":
                raise Rejected(Q.PATH_OUTSIDE_ROOT, f"{name!r}: only local paths and s3:// URIs are read")
            return self._check_s3("s3://" + posixpath.normpath("/" + rest).lstrip("/"), name)
        if self.base.startswith("s3://"):
            bucket_and_key = posixpath.normpath(posixpath.join(self.base[5:], name))
            return self._check_s3("s3://" + bucket_and_key.lstrip("/"), name)
        path = os.path.realpath(os.path.join(self.base, name))
        for root in self.roots:
            if root.startswith("s3://"):
                continue
            real_root = os.path.realpath(root)
            if path == real_root or path.startswith(real_root.rstrip("/") + "/"):
                return path
        raise Rejected(Q.PATH_OUTSIDE_ROOT, f"{name!r} resolves to {path}, outside the source's roots "
                                            f"{list(self.roots)}: not opened")

    def _check_s3(self, uri: str, name: str) -> str:
        for root in self.roots:
            if root.startswith("s3://") and (uri == root.rstrip("/") or uri.startswith(root.rstrip("/") + "/")):
                return uri
        raise Rejected(Q.PATH_OUTSIDE_ROOT, f"{name!r} resolves to {uri}, outside the source's roots "
                                            f"{list(self.roots)}: not opened")


def listed_outside_root(fs: pafs.FileSystem, root: str, path: str) -> str | None:
    """Why a file listed under a local source root is really outside it (a symlink leading out, or a file
    inside a symlinked directory leading out), or None when it is inside (S3 has no links)."""
    if not isinstance(fs, pafs.LocalFileSystem):
        return None
    real, real_root = os.path.realpath(path), os.path.realpath(root)
    if real == real_root or real.startswith(real_root.rstrip("/") + "/"):
        return None
    return f"{path} leads to {real} (a symlink), outside the source root {real_root}: not opened"
