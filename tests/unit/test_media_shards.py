"""Media shard sets from a dataset_splits output: WebDataset tars and Parquet hold the same samples,
read back by `webdataset` and `datasets` themselves; indexes verify, corruption is caught, rebuilds are
byte-identical, shards cut where the settings say."""

import hashlib
import importlib.util
import io
import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import soundfile as sf
from media_splits import SPLITS_REL, write_splits

from platform_assets.contracts import EXCLUSIONS_FILE, IOSettings
from platform_assets.media_shards.index import (
    format_dirs,
    iter_media_samples,
    load_index,
    sample_ids,
    verify_media_shards,
)
from platform_assets.media_shards.samples import NO_MEDIA_BYTES, WHISPER_SHAPE
from platform_assets.media_shards.settings import MediaShardSettings
from platform_assets.media_shards.stage import write_media_shards
from platform_assets.storage import Storage

OUT = "media_shards/_all"
PLAIN = MediaShardSettings(audio_features="none")


@pytest.fixture
def built(storage: Storage):
    expected = write_splits(storage)
    return storage, expected, write_media_shards(storage, SPLITS_REL, OUT, PLAIN)


def _shard_files(storage: Storage, fmt: str) -> list[str]:
    index = load_index(storage.path(f"{OUT}/{fmt}"))
    return [storage.path(f"{OUT}/{fmt}/{sh['files']['data']['path']}") for s in index["sets"] for sh in s["shards"]]


def test_webdataset_and_datasets_read_the_same_samples_as_went_in(built, tmp_path):
    import datasets
    import webdataset as wds

    storage, exp, _ = built
    tars = wds.WebDataset(_shard_files(storage, "webdataset"), shardshuffle=False).decode("pil")
    from_tar = {s["__key__"]: s for s in tars}
    ds = datasets.Dataset.from_parquet(_shard_files(storage, "parquet"), cache_dir=str(tmp_path / "hf"))
    # the embedded features cast the media columns by themselves, no cast_column needed for images
    assert isinstance(ds.features["image"], datasets.Image) and isinstance(ds.features["audio"], datasets.Audio)
    ds = ds.cast_column("audio", datasets.Audio(decode=False))  # decoding audio needs torchcodec: not installed
    # 3 images + 1 page + 2 clips; 4 text rows and 1 image held by uri only are not samples
    assert sorted(from_tar) == sorted(ds["id"]) == sorted(exp.ids) and len(exp.ids) == 6
    assert [s["__key__"] for s in tars] == ds["id"]  # same order too (index order of both)
    for row in ds:
        tar = from_tar[row["id"]]
        assert row["text"] == tar["txt"] == exp.texts[row["id"]]
        assert json.loads(row["json"]) == tar["json"] and tar["json"]["split"] == row["split"]
        if row["id"] in exp.pixels:  # images and the rendered page: the same pixels through PIL
            pil = tar.get("png") or tar.get("jpg")
            assert np.array_equal(np.asarray(row["image"].convert("RGB")), exp.pixels[row["id"]])
            assert np.array_equal(np.asarray(pil.convert("RGB")), exp.pixels[row["id"]])
            assert row["audio"] is None
        else:  # clips: FLAC bytes decode to the int16 samples written
            pcm_parquet, rate = sf.read(io.BytesIO(row["audio"]["bytes"]), dtype="int16")
            pcm_tar, _ = sf.read(io.BytesIO(tar["flac"]), dtype="int16")
            assert rate == 16_000 and np.array_equal(pcm_parquet, exp.audio[row["id"]])
            assert np.array_equal(pcm_tar, pcm_parquet) and row["image"] is None and row["duration_s"] > 0


def test_json_carries_fields_measurements_and_chat_messages(built):
    storage, exp, _ = built
    records = {r.id: r.record for r in iter_media_samples(storage.path(f"{OUT}/webdataset"))}
    chat = records[exp.chat_id]
    assert chat["messages"][1] == {"role": "assistant", "content": "Noise."}
    assert chat["meta"] == {"album": "a1"}  # messages moved out of meta, not stored twice
    # phash 2^63 as 16 hex digits: as a JSON number it would lose its low bits in most readers
    assert chat["phash"] == f"{2**63:016x}" and chat["width"] == 40 and chat["mime"] == "image/png"
    assert "duration_s" not in chat  # measured fields that do not apply are left out
    page = next(r for r in records.values() if r["modality"] == "pdf")
    assert page["kind"] == "page" and page["page"] == 0 and page["ocr"] is False
    assert page["ingested_at"] == "2023-11-14T22:13:20+00:00"


def test_index_counts_hashes_and_exclusions(built):
    storage, exp, result = built
    for fmt in ("webdataset", "parquet"):
        index = load_index(storage.path(f"{OUT}/{fmt}"))
        assert index["kind"] == "media" and index["format_version"] == 1
        assert index["totals"]["samples"] == 6 and index["totals"]["modalities"] == {"audio": 2, "image": 3, "pdf": 1}
        # photos: 2 train + 1 validation; scans 1 train; clips 1 train + 1 test; no `notes` set (text only)
        sets = {(s["split"], s["source"]): s["samples"] for s in index["sets"]}
        assert sets == {("train", "photos"): 2, ("validation", "photos"): 1, ("train", "scans"): 1,
                        ("train", "clips"): 1, ("test", "clips"): 1}
        for s in index["sets"]:
            for shard in s["shards"]:
                info = shard["files"]["data"]
                with open(storage.path(f"{OUT}/{fmt}/{info['path']}"), "rb") as f:
                    raw = f.read()
                assert (len(raw), hashlib.sha256(raw).hexdigest()) == (info["bytes"], info["sha256"])
        assert result.format_bytes[fmt] == index["totals"]["bytes"]
        assert {c["name"] for c in index["layout"]["columns"]} >= {"id", "media", "text", "json"}
    assert result.counts.text_documents == exp.text_rows == 4
    assert dict(result.counts.sets) == {"train/photos": 2, "validation/photos": 1, "train/scans": 1,
                                        "train/clips": 1, "test/clips": 1}
    assert result.counts.image_widths == {"<64": 1, "64-128": 1, "256-512": 1, "128-256": 1}
    assert result.counts.audio_durations == {"<1 s": 1, "1-5 s": 1} and result.counts.audio_seconds == 1.75
    excluded = pq.read_table(storage.path(f"{OUT}/{EXCLUSIONS_FILE}")).to_pylist()
    assert [(e["id"], e["rule"]) for e in excluded] == [(exp.excluded[0], NO_MEDIA_BYTES)]
    assert verify_media_shards(storage, OUT) == []
    assert result.metadata["samples_image"] == 3 and result.metadata["dagster/row_count"] == 6


def test_verify_reports_corrupt_missing_and_unlisted_files(built):
    storage, _, _ = built
    tar = _shard_files(storage, "webdataset")[0]
    with open(tar, "r+b") as f:  # one flipped byte inside the first member's data (after the 512 B header)
        f.seek(600)
        b = f.read(1)
        f.seek(600)
        f.write(bytes([b[0] ^ 0xFF]))
    parquet = _shard_files(storage, "parquet")[1]
    with open(parquet, "ab") as f:
        f.write(b"extra")
    with open(storage.path(f"{OUT}/parquet/stray.bin"), "wb") as f:
        f.write(b"x")
    problems = verify_media_shards(storage, OUT)
    assert any(p.startswith("webdataset: ") and "(corrupt)" in p for p in problems), problems
    assert any("bytes, index says" in p and p.startswith("parquet: ") for p in problems), problems
    assert "parquet: stray.bin: not listed in the index" in problems
    assert len(problems) == 4  # the tar's sha256; the Parquet file's size and sha256; the stray file


def test_verify_counts_the_samples_in_each_file(built):
    # an index whose sample count disagrees with its file (and its own sums) is reported, even though
    # every byte of the file is intact
    storage, _, _ = built
    path = storage.path(f"{OUT}/webdataset/index.json")
    index = json.load(open(path))
    index["sets"][0]["shards"][0]["samples"] += 1
    with open(path, "w") as f:
        json.dump(index, f)
    problems = verify_media_shards(storage, OUT)
    assert any("holds 1 samples, index says 2" in p for p in problems), problems
    assert any(p.startswith("webdataset: set test/clips: parts hold 2 samples") for p in problems), problems
    assert "webdataset: index.json: differs from _manifest.json" in problems


def test_rebuild_is_byte_identical(built):
    storage, _, first = built
    again = write_media_shards(storage, SPLITS_REL, OUT, PLAIN)
    elsewhere = write_media_shards(storage, SPLITS_REL, "copy/_all", PLAIN)
    assert again.files == first.files == elsewhere.files  # names, sizes and sha256 of every file


def test_shards_cut_by_samples_and_bytes_at_the_same_samples_in_both_formats(built):
    storage, exp, _ = built
    # one sample per shard: 6 samples, 6 shards in each format
    by_count = write_media_shards(storage, SPLITS_REL, "count/_all",
                                  MediaShardSettings(audio_features="none", shard_max_samples=1))
    assert sum(s.shards for s in by_count.sets) == 6  # one sample each
    # 3 kB of payload: the 3.7 kB PNG and the 2.5 kB JPEG of train/photos cannot share a shard; a sample
    # larger than the bound still gets a shard of its own (the 81 kB validation PNG)
    by_bytes = write_media_shards(storage, SPLITS_REL, "bytes/_all",
                                  MediaShardSettings(audio_features="none", shard_max_bytes=3_000))
    shards = {(s.split, s.source): s.shards for s in by_bytes.sets}
    assert shards[("train", "photos")] == 2 and shards[("validation", "photos")] == 1
    roomy = write_media_shards(storage, SPLITS_REL, "roomy/_all",
                               MediaShardSettings(audio_features="none", shard_max_bytes=10_000))
    assert {(s.split, s.source): s.shards for s in roomy.sets}[("train", "photos")] == 1  # 6.2 kB + JSON fit
    for rel in ("count/_all", "bytes/_all"):
        dirs = format_dirs(storage, rel)
        ids = [sample_ids(storage.path(d)) for d in dirs]
        assert len(dirs) == 2 and ids[0] == ids[1] and sorted(i for _, i in ids[0]) == sorted(exp.ids)
        assert verify_media_shards(storage, rel) == []


def test_memory_budget_changes_parquet_row_groups_not_samples(storage):
    # io.batch_bytes of 4 kB: input batches of 1 row (the part's rows average ~9.5 kB), and every open
    # Parquet shard flushed after about each sample; the tars are the same bytes, the Parquet shards
    # the same rows in more row groups
    write_splits(storage)
    roomy = write_media_shards(storage, SPLITS_REL, "a/_all", PLAIN)
    tight = write_media_shards(storage, SPLITS_REL, "b/_all", PLAIN, IOSettings(batch_bytes=4_096))
    tars = {k: v for k, v in roomy.files.items() if k.startswith("webdataset/")}
    assert tars == {k: v for k, v in tight.files.items() if k.startswith("webdataset/")}
    one = [(r.id, r.text, r.data) for r in iter_media_samples(storage.path("a/_all/parquet"))]
    two = [(r.id, r.text, r.data) for r in iter_media_samples(storage.path("b/_all/parquet"))]
    assert one == two and len(one) == 6
    path = storage.path("b/_all/parquet/train/photos/shard-00000.parquet")
    assert pq.ParquetFile(path).metadata.num_row_groups == 2  # vs 1 with the default 64 MiB budget


@pytest.mark.skipif(importlib.util.find_spec("platform_assets.media.audio") is None,
                    reason="platform_assets/media/audio.py (decode_clip, whisper_features) is not there yet")
def test_whisper_input_features_in_both_formats(storage, tmp_path):
    import datasets

    from platform_assets.media.audio import decode_clip, whisper_features

    exp = write_splits(storage)
    result = write_media_shards(storage, SPLITS_REL, OUT, MediaShardSettings(audio_features="whisper"))
    assert result.counts.audio_features == 2
    tar = {r.id: r for r in iter_media_samples(storage.path(f"{OUT}/webdataset"))}
    par = {r.id: r for r in iter_media_samples(storage.path(f"{OUT}/parquet"))}
    for doc in exp.audio:
        want = whisper_features(*decode_clip(tar[doc].data))
        assert tar[doc].features.shape == WHISPER_SHAPE and tar[doc].features.dtype == np.float32
        assert np.array_equal(tar[doc].features, want) and np.array_equal(par[doc].features, want)
    assert all(tar[d].features is None and par[d].features is None for d in exp.pixels)
    # 80 x 3000 float32 = 960,000 bytes (+128 of .npy header) in each clip's tar, whatever its length;
    # zstd in Parquet stores the padded frames of these sub-second clips in a few kB
    tar_bytes = result.format_bytes["webdataset"] - sum(len(t.data) for t in tar.values())
    assert tar_bytes > 2 * 960_128 and result.format_bytes["parquet"] < 960_000
    files = [storage.path(f"{OUT}/parquet/{s}/clips/shard-00000.parquet") for s in ("train", "test")]
    ds = datasets.Dataset.from_parquet(files, cache_dir=str(tmp_path / "hf"))
    features = ds.select_columns(["input_features"]).with_format("numpy")[0]["input_features"]
    assert features.shape == WHISPER_SHAPE and features.dtype == np.float32  # List(List(float32)) -> (80, 3000)


def test_uris_are_relative_to_the_source_directory():
    from platform_assets.media_shards.samples import relative_uri

    assert relative_uri("/data/mm/manifest.jsonl#line=3", "/data/mm") == "manifest.jsonl#line=3"
    assert relative_uri("/data/mm/media/a.pdf#page=2", "/data/mm/") == "media/a.pdf#page=2"
    assert relative_uri("/data/mmx/a.png", "/data/mm") == "/data/mmx/a.png"  # a sibling is not under it
    assert relative_uri("s3://bucket/a.png", "/data/mm") == "s3://bucket/a.png"
    assert relative_uri("/data/mm/a.png", None) == "/data/mm/a.png"


def test_provenance_names_every_sample_in_shard_order(tmp_path):
    """provenance.parquet has one row per sample, in the order and shards the formats hold them."""
    import pyarrow.parquet as pq

    from platform_assets.media_shards.index import sample_ids
    from platform_assets.media_shards.settings import MediaShardSettings
    from platform_assets.media_shards.stage import PROVENANCE_FILE, write_media_shards
    from platform_assets.storage import Storage

    storage = Storage(str(tmp_path))
    write_splits(storage)
    write_media_shards(storage, "dataset_splits/_all", "media_shards/_all",
                       MediaShardSettings(audio_features="none", shard_max_samples=2))
    rows = pq.read_table(tmp_path / "media_shards" / "_all" / PROVENANCE_FILE).to_pylist()
    ids = sample_ids(str(tmp_path / "media_shards" / "_all" / "webdataset"))
    assert sorted((r["shard"], r["sample"], r["document_id"]) for r in rows) == sorted(
        (shard, i, doc) for shard in {s for s, _ in ids}
        for i, doc in enumerate(d for s, d in ids if s == shard))
    assert all(r["sample"] < 2 and len(r["sha256"]) == 64 for r in rows)
