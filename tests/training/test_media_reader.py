"""The media reader (training/data/media_index.py, media_reader.py) on a set written by the platform's own
writers (media_runs.py): both formats give the same samples, streams and sizes follow the index, corrupt
shards are caught or skipped, malformed indexes are refused, and the reader survives pickling and fork."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import multiprocessing
import os
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from media_runs import write_media_shard_set

from training.data.media_index import MediaIndexError, read_media_index
from training.data.media_reader import (
    CorruptMediaShardError,
    MediaDataError,
    MediaSplitReader,
    MediaStream,
)

FORMATS = ("webdataset", "parquet")


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    return write_media_shard_set(tmp_path_factory.mktemp("media"))


def _copy(media, fmt: str, tmp_path: Path) -> Path:
    """A private copy of one format dir, to damage."""
    return Path(shutil.copytree(media.format_dir(fmt), tmp_path / fmt))


def _set_file(format_dir: Path, rel: str, data: bytes, index_too: bool = True) -> None:
    """Write shard file `rel`; with index_too, the index lists its new size and sha256 (the damage is in the
    content only, not a mismatch with the index)."""
    (format_dir / rel).write_bytes(data)
    if not index_too:
        return
    doc = json.loads((format_dir / "index.json").read_bytes())
    for s in doc["sets"]:
        for sh in s["shards"]:
            if sh["files"]["data"]["path"] == rel:
                sh["files"]["data"].update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    (format_dir / "index.json").write_text(json.dumps(doc, indent=1, sort_keys=True))


def _fields(s) -> tuple:
    return s.id, s.source, s.modality, s.kind, s.mime, s.ext, s.media, s.text, s.record


def test_both_formats_read_the_same_samples(media):
    readers = {f: MediaSplitReader(read_media_index(media.format_dir(f)), "train") for f in FORMATS}
    tar, par = readers["webdataset"], readers["parquet"]
    assert tar.streams == par.streams == (MediaStream("photos", "image"), MediaStream("scans", "pdf"),
                                          MediaStream("speech", "audio"))
    assert [s.name for s in tar.streams] == ["photos/image", "scans/pdf", "speech/audio"]
    ids = []
    for stream in range(len(tar.streams)):
        for i in range(int(tar.sizes[stream])):
            a, b = tar.read(stream, i), par.read(stream, i)
            assert _fields(a) == _fields(b)
            assert a.record["id"] == a.id and a.record["source"] == a.source
            if a.modality == "audio":
                assert a.input_features.dtype == np.float32 and a.input_features.shape == (80, 3000)
                np.testing.assert_array_equal(a.input_features, b.input_features)
                assert a.ext == "flac" and a.kind == "audio"
            else:
                assert a.input_features is None and b.input_features is None
                assert a.ext == "png" and a.kind == ("page" if a.modality == "pdf" else "image")
            ids.append(a.id)
    assert ids == media.ids["train"]  # input order: sources in index order, shards, positions
    with pytest.raises(IndexError, match="photos/image"):
        tar.read(0, int(tar.sizes[0]))


@pytest.mark.parametrize("fmt", FORMATS)
def test_streams_and_sizes_follow_the_index(media, fmt):
    index = read_media_index(media.format_dir(fmt))
    for split in ("train", "validation"):
        reader = MediaSplitReader(index, split)
        counts: dict[tuple[str, str], int] = {}
        for s in index.sets_of(split):
            for sh in s.shards:
                for m, n in sh.modalities.items():
                    counts[(s.source, m)] = counts.get((s.source, m), 0) + n
        assert [(st.source, st.modality) for st in reader.streams] == sorted(counts)
        assert reader.sizes.dtype == np.int64
        assert reader.sizes.tolist() == [counts[k] for k in sorted(counts)]
        assert reader.skipped == ()
    assert index.format == fmt and index.audio_features == "whisper" and len(index.sha256) == 64
    with pytest.raises(MediaIndexError, match="no media set for split 'test'"):
        index.sets_of("test")


@pytest.mark.parametrize("fmt", FORMATS)
def test_modality_filter(media, fmt):
    index = read_media_index(media.format_dir(fmt))
    audio = MediaSplitReader(index, "train", modalities=["audio"])
    assert audio.streams == (MediaStream("speech", "audio"),) and audio.sizes.tolist() == [12]
    assert audio.read(0, 11).modality == "audio"
    visual = MediaSplitReader(index, "validation", modalities=("image", "pdf"))
    assert [s.name for s in visual.streams] == ["photos/image", "scans/pdf"]
    assert MediaSplitReader(index, "train", modalities=[]).streams == ()
    with pytest.raises(TypeError, match="string"):
        MediaSplitReader(index, "train", modalities="audio")


def _mixed_source(media, tmp_path: Path, fmt: str) -> Path:
    """A source `mixed` whose one shard interleaves photos and speech samples: modalities per sample are
    learnt from the JSON member / the modality column."""
    d = _copy(media, fmt, tmp_path)
    doc = json.loads((d / "index.json").read_bytes())
    photos, speech = (f"train/{s}/shard-00000{'.tar' if fmt == 'webdataset' else '.parquet'}"
                      for s in ("photos", "speech"))
    rel = f"train/mixed/shard-00000{Path(photos).suffix}"
    (d / rel).parent.mkdir(parents=True)
    order = [(photos, 0), (speech, 0), (speech, 1), (photos, 1), (photos, 2)]
    if fmt == "webdataset":
        groups: dict[str, list[list[tuple[tarfile.TarInfo, bytes]]]] = {}
        for src in (photos, speech):
            with tarfile.open(d / src) as t:
                per_key: dict[str, list] = {}
                for m in t.getmembers():
                    per_key.setdefault(m.name.split(".")[0], []).append((m, t.extractfile(m).read()))
                groups[src] = list(per_key.values())
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
            for src, i in order:
                for m, data in groups[src][i]:
                    t.addfile(m, io.BytesIO(data))
        data = buf.getvalue()
    else:
        tables = {src: pq.read_table(d / src) for src in (photos, speech)}
        table = pa.concat_tables([tables[src].slice(i, 1) for src, i in order])
        sink = io.BytesIO()
        pq.write_table(table, sink, row_group_size=2)  # 3 row groups: the reader's row group lookup
        data = sink.getvalue()
    (d / rel).write_bytes(data)
    doc["sets"].insert(0, {"split": "train", "source": "mixed", "samples": 5, "shards": [{
        "name": "train/mixed/shard-00000", "samples": 5, "modalities": {"audio": 2, "image": 3},
        "files": {"data": {"path": rel, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}}}]})
    (d / "index.json").write_text(json.dumps(doc))
    return d


def test_a_source_of_several_modalities(media, tmp_path):
    readers = [MediaSplitReader(read_media_index(_mixed_source(media, tmp_path, f)), "train") for f in FORMATS]
    for r in readers:
        assert [s.name for s in r.streams][:2] == ["mixed/audio", "mixed/image"]
        assert r.sizes.tolist()[:2] == [2, 3]
    tar, par = readers
    photos = MediaSplitReader(read_media_index(media.format_dir("parquet")), "train", modalities=["image"])
    speech = MediaSplitReader(read_media_index(media.format_dir("parquet")), "train", modalities=["audio"])
    assert [tar.read(0, i).id for i in range(2)] == [speech.read(0, i).id for i in range(2)]
    assert [tar.read(1, i).id for i in range(3)] == [photos.read(0, i).id for i in range(3)]
    for stream in range(2):
        for i in range(int(tar.sizes[stream])):
            assert _fields(tar.read(stream, i)) == _fields(par.read(stream, i))
    assert tar.locate(1, 1) == ("train/mixed/shard-00000", 3)


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_corrupt_tar_is_caught_or_skipped(media, tmp_path):
    d = _copy(media, "webdataset", tmp_path)
    rel = "train/photos/shard-00001.tar"
    with tarfile.open(d / rel) as t:
        first = t.getmembers()[0]
    _flip(d / rel, first.offset_data + 40)  # inside sample 0's PNG: same size, other sha256
    index = read_media_index(d)
    assert MediaSplitReader(index, "train").read(0, 5).id  # verify="none": nothing hashed, read as is

    stop = MediaSplitReader(index, "train", verify="first_open")  # hashed lazily, on the first open
    assert stop.read(0, 4).id
    with pytest.raises(CorruptMediaShardError, match=r"shard-00001\.tar: sha256 .*train/photos/shard-00001"):
        stop.read(0, 5)

    skip = MediaSplitReader(index, "train", verify="first_open", on_corrupt="skip")
    assert skip.sizes.tolist() == [15, 3, 12]
    assert [(s.shard, s.source, s.samples) for s in skip.skipped] == [("train/photos/shard-00001", "photos", 5)]
    assert "sha256" in skip.skipped[0].reason
    full = MediaSplitReader(read_media_index(media.format_dir("webdataset")), "train")
    assert [skip.read(0, i).id for i in range(15)] == [full.read(0, i).id for i in (*range(5), *range(10, 20))]

    # truncated: the size differs, caught by a stat whatever `verify` says
    (d / rel).write_bytes((d / rel).read_bytes()[:5000])
    with pytest.raises(CorruptMediaShardError, match=r"5000 bytes on disk, the index says 20480.*shard-00001"):
        MediaSplitReader(index, "train")
    skip = MediaSplitReader(index, "train", on_corrupt="skip")
    assert skip.sizes.tolist() == [15, 3, 12] and "5000 bytes on disk" in skip.skipped[0].reason


def test_verify_always_hashes_every_open(media, tmp_path):
    d = _copy(media, "webdataset", tmp_path)
    index = read_media_index(d)
    once, always = (MediaSplitReader(index, "train", verify=v) for v in ("first_open", "always"))
    assert once.read(1, 0).id == always.read(1, 0).id
    _flip(d / "train/scans/shard-00000.tar", 600)  # inside the PNG of sample 0
    for r in (once, always):
        r.drop_files()
    assert once.read(1, 0).id  # this process hashed it already
    with pytest.raises(CorruptMediaShardError, match="sha256"):
        always.read(1, 0)


def test_bad_member_content_names_shard_and_key(media, tmp_path):
    d = _copy(media, "webdataset", tmp_path)
    rel = "train/photos/shard-00000.tar"
    with tarfile.open(d / rel) as t:
        members = t.getmembers()
        blobs = [t.extractfile(m).read() for m in members]
    js = next(i for i, m in enumerate(members) if m.name.endswith(".json"))
    key = members[js].name.split(".")[0]
    data = bytearray((d / rel).read_bytes())
    data[members[js].offset_data] = ord("[")  # '{' -> '[': same size, no longer parses
    _set_file(d, rel, bytes(data))
    reader = MediaSplitReader(read_media_index(d), "train", verify="always")
    with pytest.raises(MediaDataError, match=rf"sample {key}: its JSON record does not parse.*shard-00000"):
        reader.read(0, 0)

    buf = io.BytesIO()  # sample 0 without its media member
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for m, blob in zip(members, blobs, strict=True):
            if m.name != f"{key}.png":
                t.addfile(m, io.BytesIO(blob))
    _set_file(d, rel, buf.getvalue())
    with pytest.raises(MediaDataError, match=rf"shard train/photos/shard-00000\): sample {key} has no media"):
        MediaSplitReader(read_media_index(d), "train")
    skip = MediaSplitReader(read_media_index(d), "train", on_corrupt="skip")
    assert skip.skipped[0].shard == "train/photos/shard-00000" and skip.sizes.tolist() == [15, 3, 12]


@pytest.mark.parametrize(("change", "match"), [
    ({"format_version": 2}, "format_version: this reader reads version 1, got 2"),
    ({"kind": "tokens"}, "kind: expected 'media', got 'tokens'"),
    ({"format": "flat"}, "format: expected one of"),
    ({"format_minor": 7, "new_key": 1}, None),  # any minor, unknown keys ignored
])
def test_index_versions(media, tmp_path, change, match):
    d = _copy(media, "parquet", tmp_path)
    doc = json.loads((d / "index.json").read_bytes())
    doc.update(change)
    (d / "index.json").write_text(json.dumps(doc))
    if match is None:
        assert read_media_index(d).sets
    else:
        with pytest.raises(MediaIndexError, match=match) as err:
            read_media_index(d)
        assert str(d / "index.json") in str(err.value)


@pytest.mark.parametrize("path", ["../photos/shard-00000.parquet", "/etc/shard.parquet", "train/a/../../x.parquet"])
def test_index_paths_stay_inside(media, tmp_path, path):
    d = _copy(media, "parquet", tmp_path)
    doc = json.loads((d / "index.json").read_bytes())
    doc["sets"][0]["shards"][0]["files"]["data"]["path"] = path
    (d / "index.json").write_text(json.dumps(doc))
    with pytest.raises(MediaIndexError, match=r"files\.data\.path: must be relative"):
        read_media_index(d)


def _read_in_child(reader, conn) -> None:
    conn.send([reader.read(s, 1).id for s in range(len(reader.streams))])
    conn.close()


@pytest.mark.parametrize("fmt", FORMATS)
def test_pickle_and_fork(media, fmt):
    reader = MediaSplitReader(read_media_index(media.format_dir(fmt)), "train", verify="first_open")
    expected = [reader.read(s, 1).id for s in range(len(reader.streams))]  # files now open in this process
    # deepcopy takes the pickle protocol's state path (__reduce_ex__) without unpickling bytes, which
    # the platform never does (tests/faults/test_fault_security.py); the spawn child below unpickles for real
    clone = copy.deepcopy(reader)
    assert clone._files == {} and clone._row_groups == {}
    assert [_fields(clone.read(s, 1)) for s in range(3)] == [_fields(reader.read(s, 1)) for s in range(3)]
    for method in ("fork", "spawn"):  # DataLoader workers: forked by default, spawned where configured
        ctx = multiprocessing.get_context(method)
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_read_in_child, args=(reader, child))
        p.start()
        assert parent.recv() == expected, method
        p.join(30)
        assert p.exitcode == 0, method
    assert [reader.read(s, 1).id for s in range(3)] == expected  # the parent's files still work


def test_a_tar_read_touches_only_the_sample_members(media, monkeypatch):
    reader = MediaSplitReader(read_media_index(media.format_dir("webdataset")), "train")
    stream, k = 2, 7  # speech: media, txt, json, input_features
    shard, pos = reader.locate(stream, k)
    assert (shard, pos) == ("train/speech/shard-00001", 2)
    path = media.format_dir("webdataset") / f"{shard}.tar"
    with tarfile.open(path) as t:
        members = [m for m in t.getmembers() if m.name.startswith(reader.read(stream, k).id)]
        blobs = {m.name.split(".", 1)[1]: t.extractfile(m).read() for m in members}
    assert [m.name.split(".", 1)[1] for m in members] == ["flac", "txt", "json", "input_features.npy"]
    calls = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, off: calls.append((off, n)) or real(fd, n, off))
    sample = reader.read(stream, k)
    assert sorted(calls) == sorted((m.offset_data, m.size) for m in members)
    assert sample.media == blobs["flac"] and sample.text == blobs["txt"].decode()
    assert sample.record == json.loads(blobs["json"])
    np.testing.assert_array_equal(sample.input_features, np.load(io.BytesIO(blobs["input_features.npy"])))
