"""A media shard set's index.json (platform_assets/media_shards/MEDIA_SHARD_FORMAT.md), parsed and checked.

The training package reads the index itself instead of importing `platform_assets` (it runs standalone
under torchrun, where the platform's dependencies are not installed). Everything the media reader needs
comes from here: the format (`webdataset` tars or `parquet` files), whether audio carries Whisper input
features, and every (split, source) with its shards, their sample and modality counts and their one file.
A malformed index is refused with an error naming the index file and the key that is wrong, before any
shard is opened; keys this reader does not know are ignored (the compatibility policy: a minor adds keys).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.data.index_fields import IndexFields

KIND = "media"
FORMATS = ("webdataset", "parquet")
# The major version read. Any `format_minor` of it is read: a minor only adds index keys and leaves the
# files byte for byte the same. A format_version other than this one is refused.
FORMAT_VERSION = 1
INDEX_NAME = "index.json"
AUDIO_FEATURES = ("none", "whisper")
SUFFIXES = {"webdataset": ".tar", "parquet": ".parquet"}


class MediaIndexError(ValueError):
    """index.json does not follow MEDIA_SHARD_FORMAT.md (the message names the file and the key)."""


@dataclass(frozen=True)
class MediaFileEntry:
    path: str
    """Relative to the index's directory (POSIX separators), never outside it."""
    bytes: int
    sha256: str


@dataclass(frozen=True)
class MediaShard:
    name: str
    """`<split>/<source>/shard-NNNNN`: the same in every format of the set."""
    samples: int
    file: MediaFileEntry
    """The shard's one file (`files.data`): a .tar or a .parquet."""
    modalities: dict[str, int]
    """Samples per modality (image, pdf, audio); the counts sum to `samples`."""


@dataclass(frozen=True)
class MediaSetEntry:
    split: str
    source: str
    samples: int
    shards: tuple[MediaShard, ...]
    """In shard-number order: the concatenation is the source's input order."""


@dataclass(frozen=True)
class MediaIndex:
    root: Path
    """The format directory holding index.json; shard paths are relative to it."""
    format: str
    """`webdataset` or `parquet`."""
    audio_features: str
    """`whisper` (audio samples carry (80, 3000) float32 input features) or `none`."""
    sets: tuple[MediaSetEntry, ...]
    sha256: str
    """Of index.json's bytes: identifies the data a loader state belongs to (rebuilds are byte-identical)."""

    @property
    def index_path(self) -> Path:
        return self.root / INDEX_NAME

    def splits(self) -> list[str]:
        return sorted({s.split for s in self.sets})

    def sets_of(self, split: str) -> list[MediaSetEntry]:
        """The split's sets in index order (sorted by source); an unknown split is an error naming the index."""
        found = [s for s in self.sets if s.split == split]
        if not found:
            raise MediaIndexError(f"{self.index_path}: no media set for split {split!r} "
                                  f"(splits: {', '.join(self.splits()) or 'none'})")
        return found


_fields = IndexFields(MediaIndexError)
_need, _count, _relative_path = _fields.need, _fields.count, _fields.relative_path


def _file(shard: dict[str, Any], fmt: str, where: str) -> MediaFileEntry:
    files = _need(shard, "files", dict, where)
    w = f"{where}.files"
    if set(files) != {"data"}:
        raise MediaIndexError(f"{w}: expected files ['data'] (one file a shard), got {sorted(files)}")
    entry = _need(files, "data", dict, w)
    w = f"{w}.data"
    path = _relative_path(_need(entry, "path", str, w), w)
    if not path.endswith(SUFFIXES[fmt]):
        raise MediaIndexError(f"{w}.path: a {fmt} shard ends in {SUFFIXES[fmt]}, got {path!r}")
    nbytes = _count(entry, "bytes", w)
    sha = _fields.sha256(entry, w)
    return MediaFileEntry(path, nbytes, sha)


def _modalities(doc: dict[str, Any], samples: int, where: str) -> dict[str, int]:
    counts = _need(doc, "modalities", dict, where)
    w = f"{where}.modalities"
    out = {}
    for modality in sorted(counts):
        out[modality] = _count(counts, modality, w)
    if sum(out.values()) != samples:
        raise MediaIndexError(f"{w}: counts {out} do not sum to the shard's {samples} samples")
    return out


def _shard(doc: dict[str, Any], fmt: str, where: str) -> MediaShard:
    name = _need(doc, "name", str, where)
    where = f"{where} ({name})"
    samples = _count(doc, "samples", where)
    return MediaShard(name, samples, _file(doc, fmt, where), _modalities(doc, samples, where))


def read_media_index(format_dir: str | Path) -> MediaIndex:
    """Parse `<format_dir>/index.json` of a media format directory (`.../media_shards/_all/webdataset` or
    `.../parquet`) and check it against the spec."""
    root = Path(format_dir)
    path = root / INDEX_NAME
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise MediaIndexError(f"{path}: not found (format_dir must be a media format directory holding "
                              f"{INDEX_NAME}: media_shards/_all/webdataset or .../parquet)") from None
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as err:  # JSONDecodeError, UnicodeDecodeError (bytes not UTF-8/16/32)
        raise MediaIndexError(f"{path}: not valid JSON ({type(err).__name__}: {err})") from None
    where = str(path)
    if not isinstance(doc, dict):
        raise MediaIndexError(f"{where}: expected a JSON object")
    # kind first: a token index (kind absent or "tokens") in a media reader is the likeliest mistake
    if doc.get("kind") != KIND:
        raise MediaIndexError(f"{where}.kind: expected {KIND!r}, got {doc.get('kind')!r} (a token shard index? "
                              f"the media reader reads media_shards/_all/<format>)")
    fmt = doc.get("format")
    if fmt not in FORMATS:
        raise MediaIndexError(f"{where}.format: expected one of {list(FORMATS)}, got {fmt!r}")
    version = doc.get("format_version")
    if isinstance(version, bool) or version != FORMAT_VERSION:  # true == 1 in Python, not in an index
        raise MediaIndexError(f"{where}.format_version: this reader reads version {FORMAT_VERSION}, got {version!r}")
    minor = doc.get("format_minor", 0)
    if isinstance(minor, bool) or not isinstance(minor, int) or minor < 0:
        raise MediaIndexError(f"{where}.format_minor: expected an int >= 0, got {minor!r}")
    audio_features = doc.get("audio_features", "none")
    if audio_features not in AUDIO_FEATURES:
        raise MediaIndexError(f"{where}.audio_features: expected one of {list(AUDIO_FEATURES)}, "
                              f"got {audio_features!r}")
    sets = []
    for i, s in enumerate(_need(doc, "sets", list, where)):
        w = f"{where}.sets[{i}]"
        if not isinstance(s, dict):
            raise MediaIndexError(f"{w}: expected an object")
        split, source = _need(s, "split", str, w), _need(s, "source", str, w)
        w = f"{w} ({split}/{source})"
        shards = []
        for j, sh in enumerate(_need(s, "shards", list, w)):
            if not isinstance(sh, dict):
                raise MediaIndexError(f"{w}.shards[{j}]: expected an object")
            shards.append(_shard(sh, fmt, f"{w}.shards[{j}]"))
        samples = _count(s, "samples", w)
        if samples != sum(sh.samples for sh in shards):
            raise MediaIndexError(f"{w}.samples: {samples} is not the sum of its shards' samples "
                                  f"({sum(sh.samples for sh in shards)})")
        sets.append(MediaSetEntry(split, source, samples, tuple(shards)))
    keys = [(s.split, s.source) for s in sets]
    if keys != sorted(keys) or len(set(keys)) != len(keys):
        raise MediaIndexError(f"{where}.sets: must be sorted by (split, source) without repeats, got {keys}")
    paths = [sh.file.path for s in sets for sh in s.shards]
    if len(set(paths)) != len(paths):
        raise MediaIndexError(f"{where}.sets: a shard file is listed twice")
    return MediaIndex(root=root, format=fmt, audio_features=audio_features, sets=tuple(sets),
                      sha256=hashlib.sha256(raw).hexdigest())
