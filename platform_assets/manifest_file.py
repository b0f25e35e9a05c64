"""Reading an output's `_manifest.json` (written by `storage.StagedDir.write_manifest`): one parser
for every reader, so a damaged or hand-edited manifest is refused with the file named instead of
surfacing as a KeyError, a UnicodeDecodeError or an AttributeError (all three found by fuzzing the
shard-set verifiers, which read it to check index.json against it).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pyarrow.fs as pafs

from platform_assets.safe_paths import UnsafePathError, inside_path

_SHA256 = re.compile(r"[0-9a-f]{64}")


class ManifestError(ValueError):
    """A `_manifest.json` that is not what StagedDir.write_manifest writes (the message names it)."""


@dataclass(frozen=True)
class ManifestEntry:
    bytes: int
    sha256: str


def parse_manifest(raw: bytes, path: str) -> dict[str, ManifestEntry]:
    """{relative file name: size and sha256} of a manifest's bytes; ManifestError naming `path`."""
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ManifestError(f"{path}: not valid JSON ({type(err).__name__}: {err})") from None
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict):
        raise ManifestError(f"{path}: expected an object with a 'files' object")
    out = {}
    for name, info in files.items():
        try:
            inside_path(name, f"{path}: files")  # a reader joins the name to the output's directory
        except UnsafePathError as err:
            raise ManifestError(str(err)) from None
        size = info.get("bytes") if isinstance(info, dict) else None
        digest = info.get("sha256") if isinstance(info, dict) else None
        if (not isinstance(size, int) or isinstance(size, bool) or size < 0
                or not isinstance(digest, str) or not _SHA256.fullmatch(digest)):
            shown = repr(info) if len(repr(info)) <= 80 else f"{repr(info)[:77]}..."
            raise ManifestError(f"{path}: files[{name!r}]: expected {{bytes: int >= 0, sha256: 64 hex digits}}, "
                                f"got {shown}")
        out[name] = ManifestEntry(size, digest)
    return out


def read_manifest(fs: pafs.FileSystem, path: str) -> dict[str, ManifestEntry]:
    with fs.open_input_stream(path, compression=None) as f:
        return parse_manifest(f.read(), path)
