"""Smoke test of benchmarks/media_loader.py on tiny media written here (RGBA PNG emoji with captions, WAV
speech with transcripts): the input build (rooms -> media_shards' writer, with and without Whisper features,
and a tokenizer), one benchmark end to end through the harness, every side delivering batches of the right
shape, and ours and the peers computing the same pixels and features for the same sample; the figures on the
real multimodal data are in benchmarks/RESULTS.md."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from benchmark_runs import figures as _figures  # noqa: E402
from benchmark_runs import run as _run  # noqa: E402

from benchmarks import media_loader as ml  # noqa: E402
from benchmarks.harness import BenchmarkError  # noqa: E402

pytest.importorskip("webdataset")
pytest.importorskip("datasets")
EMOJI, CLIPS = 40, 40  # one shard each (40 a shard): webdataset needs a batch's 32 within one worker's shards


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    import soundfile as sf
    from PIL import Image

    root = tmp_path_factory.mktemp("mm")
    rng = np.random.default_rng(0)
    emoji = root / "images" / "emoji"
    emoji.mkdir(parents=True)
    with open(root / "images.jsonl", "w") as f:
        for i in range(EMOJI):
            pixels = rng.integers(0, 256, (64, 64, 4), dtype=np.uint8)
            Image.fromarray(pixels, "RGBA").save(emoji / f"e{i:02d}.png")
            if i % 2 == 0:
                f.write(json.dumps({"file": f"images/emoji/e{i:02d}.png", "caption": f"Emoji {i}."}) + "\n")
    speech = root / "audio" / "speech"
    speech.mkdir(parents=True)
    with open(root / "audio" / "speech.jsonl", "w") as f:
        for i in range(CLIPS):
            t = np.arange(int(22_050 * (0.3 + 0.01 * i))) / 22_050
            sf.write(speech / f"en_{i:03d}.wav", 0.3 * np.sin(2 * np.pi * (220 + 40 * i) * t), 22_050,
                     subtype="PCM_16")
            f.write(json.dumps({"file": f"audio/speech/en_{i:03d}.wav", "transcript": f"clip number {i}"}) + "\n")
    return root


@pytest.fixture()
def env(tmp_path_factory, monkeypatch):
    cache = tmp_path_factory.getbasetemp() / "media-loader-cache"  # one build for the whole module
    monkeypatch.setenv("MEDIA_LOADER_BENCH_CACHE", str(cache))
    monkeypatch.setenv("MEDIA_LOADER_BENCH_BATCHES", "2")
    monkeypatch.setenv("MEDIA_LOADER_BENCH_AUDIO_BATCHES", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return cache


@pytest.fixture()
def spec(corpus, env, tmp_path):
    return ml.prepare(corpus, tmp_path)


def test_build_writes_both_sets_and_a_tokenizer(spec):
    assert spec["images"] == EMOJI and spec["captioned"] == EMOJI // 2 and spec["clips"] == CLIPS
    assert len(spec["image_tars"]) == len(spec["image_parquet"]) == 1  # 40 samples a shard
    for path in ml.AUDIO_PATHS:
        assert len(spec["audio_tars"][path]) == len(spec["audio_parquet"][path]) == 1
    feat = json.loads((Path(spec["sets"]["features"]) / "webdataset" / "index.json").read_text())
    nofeat = json.loads((Path(spec["sets"]["nofeatures"]) / "webdataset" / "index.json").read_text())
    assert (feat["audio_features"], nofeat["audio_features"]) == ("whisper", "none")
    assert (Path(spec["tokenizer"]) / "tokenizer.json").is_file()


def test_images_webdataset_end_to_end(corpus, env, tmp_path):
    result = _run("media_loader_images_webdataset", corpus, tmp_path / "work")
    fig = _figures(result)
    for metric in ("images/s, 0 workers", "images/s, 2 workers", "peak RSS"):
        assert fig[metric]["ours"] > 0 and fig[metric]["peer"] > 0, metric
    assert fig["batches timed"]["ours"] == fig["batches timed"]["peer"] == 4
    assert [t["metric"] for t in result["targets"]] == ["images/s, 2 workers"]


@pytest.mark.parametrize("side", ["run_ours_images", "run_webdataset_images", "run_datasets_images",
                                  "run_ours_audio", "run_webdataset_audio", "run_datasets_audio"])
def test_every_side_delivers_its_batches(spec, tmp_path, side):
    out = getattr(ml, side)(spec, tmp_path).work()  # _timed raises on another shape or dtype
    want = ["0", "2"] if "images" in side else ["decoded/0", "decoded/2", "precomputed/0", "precomputed/2"]
    assert sorted(out["runs"]) == want
    assert all(r["batches"] >= 1 and r["per_s"] > 0 for r in out["runs"].values())


def test_ours_and_the_peers_compute_the_same_inputs(spec):
    from training.data.media_index import read_media_index
    from training.data.media_reader import MediaSplitReader

    vision, speech = ml.ours_collators(spec)
    reader = MediaSplitReader(read_media_index(str(Path(spec["sets"]["nofeatures"]) / "webdataset")), "train")
    by_modality = {st.modality: i for i, st in enumerate(reader.streams)}
    images = [reader.read(by_modality["image"], i) for i in range(3)]
    ours = vision(images, 0)["pixel_values"].numpy()
    import io

    from PIL import Image

    peer = ml.PixelBatch()([Image.open(io.BytesIO(s.media)) for s in images]).numpy()
    np.testing.assert_array_equal(ours, peer)
    clips = [reader.read(by_modality["audio"], i) for i in range(2)]
    assert all(c.input_features is None for c in clips)  # the `none` set: ours decodes and extracts
    np.testing.assert_allclose(speech(clips, 0)["input_features"].numpy(),
                               ml.FeatureBatch()([c.media for c in clips]).numpy(), atol=1e-5)


def test_check_refuses_different_batch_counts():
    rec = {"runs": {"0": {"batches": 2}, "2": {"batches": 2}}}
    ml.check(rec, rec)
    with pytest.raises(BenchmarkError, match="different batch counts"):
        ml.check(rec, {"runs": {"0": {"batches": 2}, "2": {"batches": 1}}})
