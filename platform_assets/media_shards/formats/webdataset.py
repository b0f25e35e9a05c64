"""`webdataset`: a POSIX (ustar) tar per shard in the WebDataset convention: key = document id, members
`<key>.<png|jpg|webp|flac|wav>`, `<key>.txt`, `<key>.json` (and `<key>.input_features.npy`).

Readable by `webdataset.WebDataset(urls).decode("pil")`: images decode to PIL, `.txt` to str, `.json`
to a dict, `.npy` to an array; audio stays bytes (decode it with soundfile). Member metadata is fixed
(mtime 0, uid/gid 0, no user names, mode 0644; the token shards' `ustar_header`) and members follow
sample order, so a rebuild is byte-identical.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator

import numpy as np
import pyarrow.fs as pafs

from platform_assets.media_shards.formats.base import (
    FileEntries,
    MediaFormat,
    MediaRecord,
    MediaSetHeader,
    declared_layout,
    sample_columns,
)
from platform_assets.media_shards.samples import EXTENSIONS, MediaSample
from platform_assets.packing.formats.base import HashedOutput
from platform_assets.packing.formats.webdataset import ustar_header
from platform_assets.storage import StagedDir
from platform_assets.tar_members import member_key_and_field

NAME = "webdataset"
FEATURES_MEMBER = "input_features.npy"
_BLOCK = 512
_RECORD = 20 * _BLOCK  # tar's default blocking factor: the archive is padded to whole 10 KiB records
_MEDIA_EXTS = frozenset(EXTENSIONS.values())


def npy_bytes(array: np.ndarray) -> bytes:
    """`np.save` of the array (.npy format 1.0, no pickle): 128 header bytes + 960,000 for 80 x 3000 float32."""
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.ascontiguousarray(array), version=(1, 0), allow_pickle=False)
    return buf.getvalue()


class TarShardWriter:
    buffered_bytes = 0  # every sample goes to the file at once

    def __init__(self, staged: StagedDir, name: str, rel: str, header: MediaSetHeader):
        self._rel = rel
        self._out = HashedOutput(staged, name)

    def add(self, sample: MediaSample) -> None:
        members = [(sample.ext, sample.data), ("txt", sample.text_bytes), ("json", sample.json_bytes)]
        if sample.features is not None:
            members.append((FEATURES_MEMBER, npy_bytes(sample.features)))
        parts: list[bytes] = []
        for ext, data in members:
            parts += [ustar_header(f"{sample.id}.{ext}", len(data)), data, b"\0" * (-len(data) % _BLOCK)]
        self._out.write(b"".join(parts))

    def flush(self) -> None:
        pass

    def close(self) -> FileEntries:
        end = 2 * _BLOCK  # two zero blocks, then zeros to a whole record (as tarfile and GNU tar write)
        self._out.write(b"\0" * (end + (-(self._out.size + end) % _RECORD)))
        return {"data": self._out.entry(self._rel)}


def open_shard(staged: StagedDir, name: str, rel: str, header: MediaSetHeader) -> TarShardWriter:
    return TarShardWriter(staged, name, rel, header)


def _record(key: str, members: dict[str, bytes], shard: str) -> MediaRecord:
    record = json.loads(members["json"])
    media = [ext for ext in members if ext in _MEDIA_EXTS]
    if len(media) != 1:
        raise ValueError(f"{shard}: sample {key} has media members {media}, expected exactly one")
    features = members.get(FEATURES_MEMBER)
    return MediaRecord(
        id=key, split=record["split"], source=record["source"], modality=record["modality"],
        text=members["txt"].decode("utf-8", "surrogatepass"), ext=media[0], data=members[media[0]], record=record,
        features=None if features is None else np.load(io.BytesIO(features), allow_pickle=False), shard=shard)


def read(fs: pafs.FileSystem, path: str, shard: str) -> Iterator[MediaRecord]:
    """Samples in tar order, streaming (one sample's members in memory at a time), with `tarfile`."""
    with fs.open_input_stream(path, compression=None) as f, tarfile.open(fileobj=f, mode="r|") as tar:
        key, members = None, {}
        for m in tar:
            k, ext = member_key_and_field(m, shard)
            if k != key and key is not None:
                yield _record(key, members, shard)
                members = {}
            key = k
            members[ext] = tar.extractfile(m).read()
        if key is not None:
            yield _record(key, members, shard)


def read_ids(fs: pafs.FileSystem, path: str) -> list[str]:
    """Keys in order from the member headers; the seekable file lets tarfile skip every member's data."""
    ids: list[str] = []
    with fs.open_input_file(path) as f, tarfile.open(fileobj=f, mode="r:") as tar:
        for m in tar.getmembers():
            key = member_key_and_field(m, path)[0]
            if not ids or ids[-1] != key:
                ids.append(key)
    return ids


def layout(header: MediaSetHeader) -> dict:
    encodings = {
        "id": "the member key: every member of the sample is named <key>.<suffix>",
        "media": "member <key>.<ext>, ext from the stored MIME type: png, jpg, webp (images, pages), flac, wav (audio)",
        "text": "member <key>.txt, UTF-8",
        "json": "member <key>.json, UTF-8 JSON object, sorted keys, no spaces",
        "input_features": f"member <key>.{FEATURES_MEMBER}: numpy .npy format 1.0, '<f4', shape (80, 3000)",
    }
    return declared_layout(
        "POSIX ustar tar; per sample, in sample order: <key>.<ext>, <key>.txt, <key>.json"
        + (f", <key>.{FEATURES_MEMBER} (audio)" if header.audio_features else "")
        + "; <key> = document id; mtime 0, uid/gid 0, mode 0644",
        "<split>/<source>/shard-NNNNN.tar", ["data"], sample_columns(header, encodings))


FORMAT = MediaFormat(NAME, 1, ".tar", open_shard, read, read_ids, layout)
