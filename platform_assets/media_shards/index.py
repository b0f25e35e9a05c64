"""A media shard set's `index.json`: loading and checking it, verifying every shard against it, and
reading samples back through each format's reader (MEDIA_SHARD_FORMAT.md)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import PurePosixPath

import pyarrow.fs as pafs

from platform_assets.contracts import MANIFEST_FILE, SHARD_INDEX_FILE
from platform_assets.manifest_file import ManifestError, read_manifest
from platform_assets.media_shards.formats import REGISTRY, MediaRecord
from platform_assets.packing.shard_index import fs_and_path, index_bytes, read_index_json
from platform_assets.storage import Storage, file_sha256, list_files

__all__ = ["INDEX_KIND", "MediaIndexError", "format_dirs", "index_bytes", "iter_media_samples", "load_index",
           "sample_ids", "verify_format_dir", "verify_media_shards"]
INDEX_KIND = "media"  # index.json's `kind`: a token shard index has none
REQUIRED_KEYS = ("format", "format_version", "kind", "sets", "totals")
COUNTED = ("samples", "bytes", "payload_bytes")


class MediaIndexError(ValueError):
    """An index that is missing, unreadable, or of a version this code does not read."""


def load_index(format_dir: str, fs: pafs.FileSystem | None = None) -> dict:
    """A format directory's index.json, checked for the keys readers rely on and a known major version."""
    index, path = read_index_json(format_dir, fs, REQUIRED_KEYS, MediaIndexError, "media shard format")
    if index["kind"] != INDEX_KIND:
        raise MediaIndexError(f"{path}: kind {index['kind']!r}, not a media shard index")
    fmt = REGISTRY.get(index["format"])
    if fmt is None:
        raise MediaIndexError(f"{path}: unknown format {index['format']!r}, expected one of {list(REGISTRY)}")
    version = index["format_version"]
    if isinstance(version, bool) or version != fmt.version:  # any format_minor of a known major is read
        raise MediaIndexError(f"{path}: {index['format']} format_version {version!r}, this reader reads "
                              f"{fmt.version} (any format_minor)")
    return index


def format_dirs(storage: Storage, out_rel: str) -> list[str]:
    """The format directories (relative to the storage root) of a media_shards output, by name: the
    folders directly under it that hold an index.json."""
    root = storage.path(out_rel)
    rels = [PurePosixPath(e.path[len(root) + 1 :]) for e in storage.list_files(out_rel, f"*/{SHARD_INDEX_FILE}")]
    return sorted(f"{out_rel}/{r.parent}" for r in rels if len(r.parts) == 2)


def _shards(index: dict) -> Iterator[tuple[dict, dict]]:
    for entry in index["sets"]:
        for shard in entry["shards"]:
            yield entry, shard


def verify_format_dir(format_dir: str, fs: pafs.FileSystem | None = None) -> list[str]:
    """Every problem of one format directory (empty: intact): each listed file's size and sha256, the
    samples in each file against its entry, the index's own sums, unlisted files, and index.json
    against the enclosing output's `_manifest.json` when there is one."""
    fs, base = fs_and_path(format_dir, fs)
    try:
        index = load_index(base, fs)
    except MediaIndexError as e:
        return [str(e)]
    fmt = REGISTRY[index["format"]]
    problems: list[str] = []
    listed = {SHARD_INDEX_FILE}
    for _, shard in _shards(index):
        if (listed_bytes := sum(info["bytes"] for info in shard["files"].values())) != shard["bytes"]:
            problems.append(f"{shard['name']}: files listed with {listed_bytes} bytes, the shard says {shard['bytes']}")
        for info in shard["files"].values():
            rel, path = info["path"], f"{base}/{info['path']}"
            listed.add(rel)
            found = fs.get_file_info(path)
            if found.type != pafs.FileType.File:
                problems.append(f"{rel}: missing")
                continue
            if found.size != info["bytes"]:
                problems.append(f"{rel}: {found.size} bytes, index says {info['bytes']}")
            if (sha := file_sha256(fs, path)) != info["sha256"]:
                problems.append(f"{rel}: sha256 {sha[:12]}..., index says {info['sha256'][:12]}... (corrupt)")
                continue  # its samples cannot be trusted to parse
            try:
                ids = fmt.read_ids(fs, path)
            except Exception as e:  # noqa: BLE001 - any parse failure is a finding, not a crash of the check
                problems.append(f"{rel}: unreadable as {fmt.name} ({type(e).__name__}: {e})")
                continue
            if len(ids) != shard["samples"]:
                problems.append(f"{rel}: holds {len(ids)} samples, index says {shard['samples']}")
    for entry in index["sets"]:
        problems += _sums(f"set {entry['split']}/{entry['source']}", entry, entry["shards"])
    problems += _sums("totals", index["totals"], index["sets"])
    for e in list_files(fs, base):
        if (rel := e.path[len(base) + 1 :]) not in listed:
            problems.append(f"{rel}: not listed in the index")
    return problems + _index_against_manifest(fs, base)


def _sums(what: str, whole: dict, parts: list[dict]) -> list[str]:
    problems = [f"{what}: parts hold {total} {key}, it says {whole[key]}" for key in COUNTED
                if (total := sum(p[key] for p in parts)) != whole[key]]
    modalities = sum((Counter(p["modalities"]) for p in parts), Counter())
    if dict(modalities) != {k: v for k, v in whole["modalities"].items() if v}:
        problems.append(f"{what}: parts hold modalities {dict(sorted(modalities.items()))}, it says "
                        f"{whole['modalities']}")
    return problems


def _index_against_manifest(fs: pafs.FileSystem, base: str) -> list[str]:
    parent, name = str(PurePosixPath(base).parent), PurePosixPath(base).name
    manifest = f"{parent}/{MANIFEST_FILE}"
    if fs.get_file_info(manifest).type != pafs.FileType.File:
        return []
    try:
        info = read_manifest(fs, manifest).get(f"{name}/{SHARD_INDEX_FILE}")
    except ManifestError as e:
        return [str(e)]
    if info is None:
        return [f"{SHARD_INDEX_FILE}: not in {manifest}"]
    if file_sha256(fs, f"{base}/{SHARD_INDEX_FILE}") != info.sha256:
        return [f"{SHARD_INDEX_FILE}: differs from {MANIFEST_FILE}"]
    return []


def verify_media_shards(storage: Storage, out_rel: str) -> list[str]:
    """Problems of every format directory of a media_shards output, each prefixed with its format."""
    dirs = format_dirs(storage, out_rel)
    if not dirs:
        return [f"{out_rel}: no format directory with an {SHARD_INDEX_FILE}"]
    return [f"{PurePosixPath(d).name}: {p}" for d in dirs for p in verify_format_dir(storage.path(d), storage.fs)]


def iter_media_samples(format_dir: str, fs: pafs.FileSystem | None = None, split: str | None = None,
                       source: str | None = None) -> Iterator[MediaRecord]:
    """The samples of a format directory in index order (sets by (split, source), shards by number),
    optionally of one split and/or source; one shard file open at a time."""
    fs, base = fs_and_path(format_dir, fs)
    index = load_index(base, fs)
    fmt = REGISTRY[index["format"]]
    for entry, shard in _shards(index):
        if (split is None or entry["split"] == split) and (source is None or entry["source"] == source):
            yield from fmt.read(fs, f"{base}/{shard['files']['data']['path']}", shard["name"])


def sample_ids(format_dir: str, fs: pafs.FileSystem | None = None) -> list[tuple[str, str]]:
    """(shard name, document id) of every sample in order, read without the media bytes."""
    fs, base = fs_and_path(format_dir, fs)
    index = load_index(base, fs)
    fmt = REGISTRY[index["format"]]
    return [(shard["name"], i) for _, shard in _shards(index)
            for i in fmt.read_ids(fs, f"{base}/{shard['files']['data']['path']}")]


def locate_sample(storage: Storage, out_rel: str, document_id: str) -> list[tuple[str, str]]:
    """(format, shard name) of every shard holding `document_id` (ids read without the media bytes);
    empty when the output does not exist or the document is not a media sample."""
    if not storage.exists(out_rel):
        return []
    found = []
    for format_dir in format_dirs(storage, out_rel):
        fmt = PurePosixPath(format_dir).name
        found += [(fmt, shard) for shard, i in sample_ids(storage.path(format_dir), storage.fs) if i == document_id]
    return found
