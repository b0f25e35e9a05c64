"""A mixed multimodal manifest through the Dagster assets, in process: raw_documents -> cleaned_documents
-> deduplicated_documents -> dataset_splits -> media_shards, then both shard formats read back by the
libraries users read them with (`webdataset` with `.decode("pil")`, `datasets` with the embedded
Image/Audio features) and compared: the same samples, texts, pixels and audio."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import dagster as dg
import numpy as np
import pytest
import yaml

pytest.importorskip("PIL")
pytest.importorskip("pymupdf")
pytest.importorskip("soundfile")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from PIL import Image  # noqa: E402

from platform_assets.defs.cleaned_documents.assets import cleaned_documents  # noqa: E402
from platform_assets.defs.dataset_splits.assets import dataset_splits  # noqa: E402
from platform_assets.defs.dedup_band_buckets.assets import ALL_BUCKETS_RUN_TAGS, dedup_band_buckets  # noqa: E402
from platform_assets.defs.dedup_signatures.assets import dedup_signatures  # noqa: E402
from platform_assets.defs.deduplicated_documents.assets import deduplicated_documents  # noqa: E402
from platform_assets.defs.media_shards.assets import media_shards  # noqa: E402
from platform_assets.defs.raw_documents.assets import raw_documents  # noqa: E402
from platform_assets.defs.raw_documents.partitions import source_partitions  # noqa: E402
from platform_assets.defs.resources import PipelineResource  # noqa: E402


def _picture(seed: int, size=(96, 72)) -> Image.Image:
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 255, (6, 8, 3), dtype=np.uint8)  # a coarse random pattern, upscaled: real structure
    return Image.fromarray(base).resize(size, Image.Resampling.NEAREST)


def _bytes(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kw)
    return buf.getvalue()


@pytest.fixture
def mixed(tmp_path: Path):
    import pymupdf
    import soundfile as sf

    d = tmp_path / "mm"
    (d / "media").mkdir(parents=True)
    for i in range(6):
        (d / "media" / f"img{i}.png").write_bytes(_bytes(_picture(i), "PNG"))
    rgba = _picture(10).convert("RGBA")
    rgba.putalpha(128)
    (d / "media" / "alpha.png").write_bytes(_bytes(rgba, "PNG"))
    (d / "media" / "photo.jpg").write_bytes(_bytes(_picture(11, (160, 120)), "JPEG", quality=90))
    doc = pymupdf.open()
    for text in ("The first page explains packing of token sequences into samples.",
                 "The second page explains how splits are assigned by a seeded hash."):
        doc.new_page(width=300, height=400).insert_textbox(pymupdf.Rect(30, 30, 270, 370), text, fontsize=11)
    (d / "media" / "notes.pdf").write_bytes(doc.tobytes())
    t = np.arange(int(1.5 * 22_050)) / 22_050
    for k in range(2):
        buf = io.BytesIO()
        sf.write(buf, (0.3 * np.sin(2 * np.pi * (220 + 110 * k) * t)).astype(np.float32), 22_050, format="WAV",
                 subtype="PCM_16")
        (d / "media" / f"tone{k}.wav").write_bytes(buf.getvalue())
    rows = [{"modality": "image", "file": f"media/img{i}.png", "caption": f"Pattern number {i} in colour blocks."}
            for i in range(6)]
    rows += [
        {"modality": "image", "file": "media/img0.png", "caption": "The same picture under another caption."},
        {"modality": "image", "file": "media/alpha.png", "instruction": "Describe it.",
         "response": "Half-transparent colour blocks on white."},
        {"modality": "image", "file": "media/photo.jpg", "caption": "A larger picture, stored as JPEG."},
        {"modality": "pdf", "file": "media/notes.pdf", "caption": None},  # every page
        {"modality": "audio", "file": "media/tone0.wav", "transcription": "a low tone"},
        {"modality": "audio", "file": "media/tone1.wav", "transcription": "a higher tone"},
        {"modality": "image", "file": "../outside.png", "caption": "never read"},
        {"modality": "audio", "file": "media/img1.png", "transcription": "declared audio"},
    ]
    (d / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = {"storage": {"root": str(tmp_path / "out")},
           "sources": [{"name": "mm", "format": "manifest", "path": str(d / "manifest.jsonl"), "license": "CC0-1.0"}],
           "ingest": {"max_quarantine_fraction": 0.5, "max_media_decode_failure_fraction": 0.5},
           "splits": {"ratios": {"train": 0.6, "validation": 0.2, "test": 0.2}},
           "media_shards": {"shard_max_samples": 4}}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(cfg))
    return tmp_path, PipelineResource(config_path=str(tmp_path / "p.yaml"))


def test_a_mixed_manifest_becomes_webdataset_and_parquet_shards_read_back_identically(mixed):
    import datasets
    import soundfile as sf
    import webdataset as wds

    tmp, pipeline = mixed
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(source_partitions.name, ["mm"])
        per_source = dg.materialize([raw_documents, cleaned_documents, dedup_signatures], partition_key="mm",
                                    resources={"pipeline": pipeline}, instance=instance)
        assert per_source.success
        # the CLI's band_buckets_job: every bucket partition in one run
        assert dg.materialize([dedup_band_buckets], tags=ALL_BUCKETS_RUN_TAGS, instance=instance,
                              resources={"pipeline": pipeline}).success
        corpus = dg.materialize([deduplicated_documents, dataset_splits, media_shards],
                                resources={"pipeline": pipeline}, instance=instance)
        assert corpus.success
        checks = {e.check_name: e.passed for r in (per_source, corpus) for e in r.get_asset_check_evaluations()}
    assert all(checks.values()), checks
    assert {"media_decode_failures_within_bounds", "removal_rate_per_modality_within_bounds",
            "media_shards_verified", "media_formats_agree", "no_split_leakage"} <= set(checks)
    raw = per_source.asset_materializations_for_node("raw_documents")[0].metadata
    # 6 + 1 + 1 + 1 images, 2 pages, 2 clips; the row outside the root and the mislabelled one quarantined
    assert (raw["documents_image"].value, raw["documents_pdf"].value, raw["documents_audio"].value) == (9, 2, 2)
    assert raw["quarantined"].value == 2
    shards = corpus.asset_materializations_for_node("media_shards")[0].metadata
    # dedup: img0 under a second caption is the same image (an exact duplicate): 12 samples remain
    assert shards["samples"].value == 12
    assert (shards["samples_image"].value, shards["samples_pdf"].value, shards["samples_audio"].value) == (8, 2, 2)

    root = tmp / "out" / "media_shards" / "_all"
    tars = sorted((root / "webdataset").rglob("*.tar"))
    parquets = sorted((root / "parquet").rglob("*.parquet"))
    assert len(tars) == len(parquets) >= 3  # at most 4 samples a shard
    from_tar = {}
    for sample in wds.WebDataset([str(p) for p in tars], shardshuffle=False, empty_check=False).decode("pil"):
        record = sample["json"]
        media = sample.get("png") or sample.get("jpg") or sample.get("flac")
        from_tar[sample["__key__"]] = (record, sample["txt"], media)
    from_parquet = {}
    for path in parquets:
        ds = datasets.Dataset.from_parquet(str(path))
        assert isinstance(ds.features["image"], datasets.Image) and isinstance(ds.features["audio"], datasets.Audio)
        ds = ds.cast_column("audio", datasets.Audio(decode=False))  # decoding audio needs torchcodec: not installed
        for row in ds:
            from_parquet[row["id"]] = row
    assert sorted(from_tar) == sorted(from_parquet) and len(from_tar) == 12
    for key, (record, text, media) in from_tar.items():
        row = from_parquet[key]
        assert text == row["text"] and record == json.loads(row["json"]) and record["id"] == key
        # locations relative to the manifest's folder: the shard bytes do not depend on the checkout's path
        # (a PDF row without a page gives one document per page, located at its page)
        assert record["uri"].startswith(("manifest.jsonl#line=", "media/notes.pdf#page="))
        assert record["media_uri"].startswith("media/")
        if record["modality"] in ("image", "pdf"):
            assert media.mode == "RGB" and row["image"].mode == "RGB"
            assert np.array_equal(np.asarray(media), np.asarray(row["image"].convert("RGB")))
            assert (media.width, media.height) == (record["width"], record["height"])
        else:
            clip, rate = sf.read(io.BytesIO(row["audio"]["bytes"]), dtype="float32")
            assert rate == 16_000 and abs(len(clip) / rate - 1.5) < 1e-3 and record["duration_s"] == len(clip) / rate
            assert isinstance(media, bytes) and sf.read(io.BytesIO(media), dtype="float32")[0].tolist() == clip.tolist()
    # `explain` finds a media document in both formats' shards
    from platform_assets.media_shards.index import locate_sample
    from platform_assets.storage import Storage

    some_id = sorted(from_tar)[0]
    found = locate_sample(Storage(str(tmp / "out")), "media_shards/_all", some_id)
    assert sorted(fmt for fmt, _ in found) == ["parquet", "webdataset"] and found[0][1] == found[1][1]
    assert locate_sample(Storage(str(tmp / "out")), "media_shards/_all", "0" * 32) == []
    texts = sorted(t for _, t, _ in from_tar.values())
    assert "user: Describe it.\n\nassistant: Half-transparent colour blocks on white." in texts
    assert any("seeded hash" in t for t in texts)  # the second PDF page's own text
