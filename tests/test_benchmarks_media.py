"""Smoke test of benchmarks/media_images.py, media_pdf.py and media_audio.py: every benchmark end to end
through the harness (fresh child processes) on tiny media written here (PNG emoji with captions, palette
sprite sheets with transparency, a PDF made with PyMuPDF, WAV speech and Ogg Vorbis sounds); the figures
on the real multimodal data are in benchmarks/RESULTS.md."""

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

from benchmarks import media_audio, media_images, media_pdf  # noqa: E402
from benchmarks.harness import BenchmarkError, get_benchmark  # noqa: E402

EMOJI = 7


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    from PIL import Image

    root = tmp_path_factory.mktemp("mm")
    rng = np.random.default_rng(0)
    emoji = root / "images" / "emoji"
    emoji.mkdir(parents=True)
    with open(root / "images.jsonl", "w") as f:
        for i in range(EMOJI):
            pixels = rng.integers(0, 256, (64, 64, 4), dtype=np.uint8)
            pixels[:8, :, 3] = 0  # transparent rows: ours composites them, the peer drops alpha
            Image.fromarray(pixels, "RGBA").save(emoji / f"e{i:02d}.png")
            if i % 2 == 0:
                f.write(json.dumps({"file": f"images/emoji/e{i:02d}.png", "caption": f"Emoji {i}."}) + "\n")
    (emoji / "notes.txt").write_text("not an image")  # only image suffixes are selected
    sheets = root / "sheets"
    sheets.mkdir()
    for side in (300, 420):
        im = Image.fromarray(rng.integers(0, 16, (side, side), dtype=np.uint8), "L").convert("P")
        im.save(sheets / f"{side}.png", transparency=0)

    import pymupdf

    (root / "pdfs").mkdir()
    doc = pymupdf.open()
    for i in range(3):
        page = doc.new_page(width=300, height=400)
        page.insert_text((40, 60), f"Page {i + 1}: the quick brown fox jumps over the lazy dog.", fontsize=9)
    doc.save(root / "pdfs" / "tiny.pdf")
    doc.close()

    import soundfile as sf

    speech, sounds = root / "audio" / "speech", root / "audio" / "sounds"
    speech.mkdir(parents=True)
    sounds.mkdir(parents=True)
    for i, seconds in enumerate((0.7, 1.3)):
        t = np.arange(int(22_050 * seconds)) / 22_050
        sf.write(speech / f"en_{i:03d}.wav", 0.3 * np.sin(2 * np.pi * (220 + 60 * i) * t), 22_050, subtype="PCM_16")
    t = np.arange(48_000) / 48_000
    tone = 0.2 * np.sin(2 * np.pi * 440 * t)
    sf.write(sounds / "mono.oga", tone, 48_000, format="OGG", subtype="VORBIS")
    sf.write(sounds / "stereo.oga", np.stack([tone, 0.5 * tone], axis=1), 48_000, format="OGG", subtype="VORBIS")
    return root


def _both_positive(fig: dict, *metrics: str) -> None:
    for m in metrics:
        assert fig[m]["ours"] > 0 and fig[m]["peer"] > 0, m


def test_media_images_writes_the_same_samples_on_both_sides(corpus: Path, tmp_path: Path):
    result = _run("media_images", corpus, tmp_path / "work")
    spec, fig = result["spec"], _figures(result)
    assert spec["images"] == EMOJI and spec["captioned"] == 4
    assert fig["samples"]["ours"] == fig["samples"]["peer"] == EMOJI
    _both_positive(fig, "images/s", "images per CPU-s", "peak RSS", "CPU time", "tar size")
    assert result["records"]["ours"][0]["shards"] == result["records"]["peer"][0]["shards"] == 1
    assert [t["metric"] for t in result["targets"]] == ["images per CPU-s"]


def test_media_images_limit_and_sheets(corpus: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("MEDIA_BENCH_IMAGES", "3")
    assert media_images.prepare_emoji(corpus, tmp_path)["images"] == 3
    result = _run("media_images_sheets", corpus, tmp_path / "work")
    fig = _figures(result)
    assert result["spec"]["images"] == 2  # MEDIA_BENCH_IMAGES is the emoji set's knob only
    assert fig["samples"]["ours"] == fig["samples"]["peer"] == 2
    _both_positive(fig, "images/s", "tar size")


def test_media_pdf_renders_every_page_on_both_sides(corpus: Path, tmp_path: Path):
    result = _run("media_pdf", corpus, tmp_path / "work")
    fig = _figures(result)
    assert fig["pages"]["ours"] == fig["pages"]["peer"] == 3
    # 300 x 400 pt at 96 dpi: 400 x 533 px per page on both sides
    assert fig["pixels"]["ours"] == fig["pixels"]["peer"] == pytest.approx(3 * 400 * 534 / 1e6, rel=0.01)
    assert fig["text"]["ours"] == fig["text"]["peer"] > 100
    _both_positive(fig, "pages/s", "PNG size", "peak RSS")


def test_media_audio_features_agree(corpus: Path, tmp_path: Path, monkeypatch):
    # one harness run (the Ogg set: mono and stereo, 48 kHz); the speech set differs only in its input
    result = _run("media_audio_sounds", corpus, tmp_path / "work")
    fig = _figures(result)
    assert fig["clips"]["ours"] == fig["clips"]["peer"] == 2
    assert fig["samples at 16 kHz"]["ours"] == fig["samples at 16 kHz"]["peer"] == 2 * 16_000
    assert fig["torch threads"]["ours"] == fig["torch threads"]["peer"] == 1
    assert result["records"]["ours"][0]["features_shape"] == [80, 3000]
    _both_positive(fig, "clips/s", "audio speed")
    monkeypatch.setenv("AUDIO_BENCH_PASSES", "3")
    speech = get_benchmark("media_audio").prepare(corpus, tmp_path)
    assert speech["clips"] == 6 and [Path(f).name for f in speech["files"]] == ["en_000.wav", "en_001.wav"]


def test_checks_refuse_incomparable_sides():
    media_images.check({"samples": 3, "rejected": {}}, {"samples": 3})
    with pytest.raises(BenchmarkError, match="samples differ"):
        media_images.check({"samples": 2, "rejected": {"corrupt_image": 1}}, {"samples": 3})
    media_pdf.check({"pages": 2, "pixels": 10}, {"pages": 2, "pixels": 10})
    with pytest.raises(BenchmarkError, match="pixels differ"):
        media_pdf.check({"pages": 2, "pixels": 10}, {"pages": 2, "pixels": 11})
    ok = {"clips": 2, "samples_16k": 100, "features_shape": [80, 3000], "feature_sum": -1000.0}
    media_audio.check(ok, {**ok, "feature_sum": -1000.5})
    with pytest.raises(BenchmarkError, match="features differ"):
        media_audio.check(ok, {**ok, "feature_sum": -1100.0})
    with pytest.raises(BenchmarkError, match="samples_16k differ"):
        media_audio.check(ok, {**ok, "samples_16k": 99})
