"""A packed shard set's `index.json`: loading and checking it, verifying every shard against it, and
reading shards back through each format's reader (SHARD_FORMAT.md, the contract with `training/`).
The samples model lives in `samples.py`, the formats in the registry (`formats/`)."""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Iterator, Sequence
from pathlib import PurePosixPath

import pyarrow as pa
import pyarrow.fs as pafs

from platform_assets.contracts import MANIFEST_FILE, SHARD_INDEX_FILE
from platform_assets.manifest_file import ManifestError, read_manifest
from platform_assets.packing.formats import FORMATS, REGISTRY, format_names
from platform_assets.packing.formats.base import inline_bytes
from platform_assets.packing.index_shape import check_index_shape
from platform_assets.packing.samples import (
    ROWS_PER_ROW_GROUP,
    ShardSamples,
    ShardSetError,
    concat_samples,
    token_dtype,
)
from platform_assets.safe_paths import UnsafePathError, check_index_paths
from platform_assets.storage import list_files, resolve_filesystem

__all__ = [  # the samples model is re-exported: readers of a shard set import it from here
    "FORMATS", "ROWS_PER_ROW_GROUP", "ShardSamples", "ShardSetError", "concat_samples", "token_dtype",
    "index_bytes", "iter_shard_entries", "load_index", "read_shard_set", "verify_shards",
]
INDEX_NAME = SHARD_INDEX_FILE
REQUIRED_KEYS = ("format", "format_version", "seq_len", "token_dtype", "has_loss_mask", "sets")
_HASH_CHUNK = 8 * 2**20


# -- the index --------------------------------------------------------------------------------------
def index_bytes(index: dict) -> bytes:
    """The one serialisation of an index (byte-identical rebuilds)."""
    return json.dumps(index, indent=1, sort_keys=True).encode()


def fs_and_path(format_dir: str, fs: pafs.FileSystem | None) -> tuple[pafs.FileSystem, str]:
    if fs is not None:
        return fs, str(format_dir).rstrip("/")
    return resolve_filesystem(str(format_dir))


def read_index_json(format_dir: str, fs: pafs.FileSystem | None, required: Sequence[str],
                    error: type[Exception], what: str) -> tuple[dict, str]:
    """(the parsed `index.json` of a format directory, its path), checked for the `required` keys;
    problems raise `error` naming the path (`what`: the kind of directory expected). Token and media
    shard sets both read their indexes through this."""
    fs, base = fs_and_path(format_dir, fs)
    path = f"{base}/{INDEX_NAME}"
    try:
        with fs.open_input_stream(path, compression=None) as f:
            index = json.loads(f.read())
    except FileNotFoundError as e:
        raise error(f"{path}: no index (not a {what} directory)") from e
    except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError; nesting too deep
        raise error(f"{path}: not valid JSON ({type(e).__name__}: {e})") from None
    if not isinstance(index, dict):
        raise error(f"{path}: expected a JSON object, got {type(index).__name__}")
    if missing := [k for k in required if k not in index]:
        raise error(f"{path}: missing keys {missing}")
    try:
        check_index_paths(index, path)
    except UnsafePathError as e:
        raise error(str(e)) from None
    return index, path


def load_index(format_dir: str, fs: pafs.FileSystem | None = None) -> dict:
    """A format directory's `index.json`, checked for the keys a reader relies on."""
    index, path = read_index_json(format_dir, fs, REQUIRED_KEYS, ShardSetError, "packed shard format")
    check_index_shape(index, path)
    fmt = REGISTRY.get(index["format"])
    if fmt is None:
        raise ShardSetError(f"{path}: unknown format {index['format']!r}, expected one of {format_names()}")
    # A major version is refused unless known; any minor of it is read (minors only add keys, and
    # unknown keys are ignored: SHARD_FORMAT.md, "Compatibility policy").
    version, minor = index["format_version"], index.get("format_minor", 0)
    if isinstance(version, bool) or version != fmt.version:  # true == 1 in Python, not in an index
        raise ShardSetError(f"{path}: {index['format']} format_version {version!r}, this reader reads "
                            f"{fmt.version} (any format_minor)")
    if isinstance(minor, bool) or not isinstance(minor, int) or minor < 0:
        raise ShardSetError(f"{path}: format_minor must be an integer >= 0, got {minor!r}")
    return index


def iter_shard_entries(index: dict) -> Iterator[tuple[dict, dict]]:
    """(set, shard) entries in index order: sets by (split, source), shards by name."""
    for entry in index["sets"]:
        for shard in entry["shards"]:
            yield entry, shard


def _sha256_and_size(fs: pafs.FileSystem, path: str) -> tuple[str, int]:
    h, size = hashlib.sha256(), 0
    with fs.open_input_stream(path, compression=None) as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def verify_shards(format_dir: str, fs: pafs.FileSystem | None = None) -> list[str]:
    """Every problem found in a format directory (empty list: the set is intact).

    Recomputes each listed file's size and sha256, flags files the index does not list, checks the
    index's own counts add up and the flat files' sizes match their shapes, and -- when the parent
    output's `_manifest.json` is there -- checks `index.json` itself against it, so a flipped byte
    anywhere in the directory is reported.
    """
    fs, base = fs_and_path(format_dir, fs)
    try:
        index = load_index(base, fs)
    except ShardSetError as e:
        return [str(e)]
    problems: list[str] = []
    listed = {INDEX_NAME}
    check_file = REGISTRY[index["format"]].check_file
    for _, shard in iter_shard_entries(index):
        listed_bytes = sum(info["bytes"] for info in shard["files"].values())
        if listed_bytes != shard["bytes"]:
            problems.append(f"{shard['name']}: its files are listed with {listed_bytes} bytes, "
                            f"the shard says {shard['bytes']}")
        for role, info in sorted(shard["files"].items()):
            rel = info["path"]
            listed.add(rel)
            path = f"{base}/{rel}"
            if fs.get_file_info(path).type != pafs.FileType.File:
                problems.append(f"{rel}: missing")
                continue
            sha, size = _sha256_and_size(fs, path)
            if size != info["bytes"]:
                problems.append(f"{rel}: {size} bytes, index says {info['bytes']}")
            if sha != info["sha256"]:
                problems.append(f"{rel}: sha256 {sha[:12]}..., index says {info['sha256'][:12]}... (corrupt)")
            try:
                inline = inline_bytes(info)
            except ShardSetError as err:
                problems.append(str(err))
                inline = None
            listed_as = (info["bytes"], info["sha256"])
            if inline is not None and (len(inline), hashlib.sha256(inline).hexdigest()) != listed_as:
                problems.append(f"{rel}: its inline copy in {INDEX_NAME} differs from the size and sha256 listed")
            if (problem := check_file(index, shard, role, size)) is not None:
                problems.append(problem)
    for entry in index["sets"]:
        for key in ("samples", "tokens"):  # not documents: one split across shards counts in each
            total = sum(s[key] for s in entry["shards"])
            if total != entry[key]:
                problems.append(f"set {entry['split']}/{entry['source']}: shards hold {total} {key}, "
                                f"the set says {entry[key]}")
    totals = index.get("totals", {})
    for key in ("samples", "tokens"):
        total = sum(e[key] for e in index["sets"])
        if key in totals and total != totals[key]:
            problems.append(f"totals: sets hold {total} {key}, totals say {totals[key]}")
    for e in list_files(fs, base):
        rel = e.path[len(base) + 1 :]
        if rel not in listed:
            problems.append(f"{rel}: not listed in the index")
    problems.extend(_check_against_manifest(fs, base))
    return problems


def _check_against_manifest(fs: pafs.FileSystem, base: str) -> list[str]:
    """index.json against the enclosing output's manifest (written when the directory was committed)."""
    parent, name = str(PurePosixPath(base).parent), PurePosixPath(base).name
    manifest_path = f"{parent}/{MANIFEST_FILE}"
    if fs.get_file_info(manifest_path).type != pafs.FileType.File:
        return []
    try:
        files = read_manifest(fs, manifest_path)
    except ManifestError as e:
        return [str(e)]
    info = files.get(f"{name}/{INDEX_NAME}")
    if info is None:
        return [f"{INDEX_NAME}: not in {manifest_path}"]
    sha, size = _sha256_and_size(fs, f"{base}/{INDEX_NAME}")
    if (sha, size) != (info.sha256, info.bytes):
        return [f"{INDEX_NAME}: differs from {MANIFEST_FILE} (sha256 {sha[:12]}..., expected {info.sha256[:12]}...)"]
    return []


# -- reading ----------------------------------------------------------------------------------------
def read_shard_set(format_dir: str, fs: pafs.FileSystem | None = None) -> Iterator[tuple[dict, dict, ShardSamples]]:
    """(set, shard, samples) for every shard of a format directory, in index order."""
    fs, base = fs_and_path(format_dir, fs)
    index = load_index(base, fs)
    read = REGISTRY[index["format"]].read
    for entry, shard in iter_shard_entries(index):
        try:
            samples = read(fs, base, index, shard)
        except ShardSetError:
            raise
        except (OSError, ValueError, KeyError, IndexError, TypeError, EOFError, tarfile.TarError,
                pa.ArrowException) as e:
            # a damaged shard file (found by fuzzing: tar, npy, Parquet and memmap errors of every kind)
            files = ", ".join(f"{base}/{f['path']}" for f in shard["files"].values())
            raise ShardSetError(f"{files}: unreadable {index['format']} shard {shard['name']} "
                                f"({type(e).__name__}: {e})") from e
        yield entry, shard, samples
