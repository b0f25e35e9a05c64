"""Cleaning media documents: the image and audio filters decide on what ingest measured (no decoding),
first matching rule wins, every removal keeps its rule and value; captions go through the text steps
(PII, blocklist, language labels) without being removed for a low language score."""

from __future__ import annotations

import pyarrow as pa
import pytest
from document_batches import documents_batch

from platform_assets.cleaning.pipeline import build_pipeline
from platform_assets.cleaning.settings import CleaningSettings
from platform_assets.schema import MEDIA_ITEM_TYPE


def _item(**measured) -> list[dict]:
    item = {f.name: None for f in MEDIA_ITEM_TYPE}
    item.update(kind="image", mime="image/png", uri="x", sha256="0" * 64, bytes=b"...")
    item.update(measured)
    return [item]


def _run(texts, modalities, media, settings=None):
    pipeline = build_pipeline(settings or CleaningSettings())
    result = pipeline.process_batch(documents_batch(texts, modalities=modalities, media=media))
    removed = dict(zip(result.exclusions.column("id").to_pylist(), zip(
        result.exclusions.column("rule").to_pylist(), result.exclusions.column("value").to_pylist(), strict=True),
        strict=True))
    return result, removed, pipeline.funnel()


def test_image_filters_decide_on_measured_fields_first_rule_wins():
    media = [
        _item(width=224, height=224, luma_std=60.0),  # kept
        _item(width=16, height=300, luma_std=60.0),  # min_side first (also an extreme aspect ratio)
        _item(width=900, height=100, luma_std=60.0),  # aspect 9 > 8
        _item(width=128, height=128, luma_std=0.0),  # blank
        _item(kind="page", width=794, height=1123, luma_std=0.4),  # a blank PDF page
        _item(width=None, height=None, luma_std=None),  # nothing measured (a v2 row): nothing to decide on
    ]
    texts = ["A red circle."] * 4 + ["", "A picture."]
    result, removed, funnel = _run(texts, ["image"] * 4 + ["pdf", "image"], media)
    assert removed == {"d1": ("images.min_side", "16 < 32"), "d2": ("images.aspect_ratio", "9 > 8"),
                       "d3": ("images.blank", "0 < 2"), "d4": ("images.blank", "0.4 < 2")}
    assert result.kept.column("id").to_pylist() == ["d0", "d5"]
    funnel.check()
    assert funnel.removed_by_rule()["images.blank"]["docs"] == 2


def test_audio_filters_and_text_documents_untouched():
    clip = dict(kind="audio", mime="audio/flac")
    media = [_item(**clip, duration_s=2.0, silent_fraction=0.2, clipped_fraction=0.0),
             _item(**clip, duration_s=0.1, silent_fraction=0.0, clipped_fraction=0.0),
             _item(**clip, duration_s=45.0, silent_fraction=0.0, clipped_fraction=0.0),
             _item(**clip, duration_s=3.0, silent_fraction=0.97, clipped_fraction=0.0),
             _item(**clip, duration_s=3.0, silent_fraction=0.1, clipped_fraction=0.05),
             None]
    texts = ["one two three four"] * 5 + ["A plain text document that no media filter may judge."]
    # no quality presets: the text row must pass whatever the media filters do, and only they may act
    settings = CleaningSettings.model_validate({"audio": {"max_duration_s": 30}, "quality": []})
    result, removed, _ = _run(texts, ["audio"] * 5 + ["text"], media, settings)
    assert removed == {"d1": ("audio.too_short", "0.1 s < 0.3"), "d2": ("audio.too_long", "45 s > 30"),
                       "d3": ("audio.silent", "0.97 > 0.9"), "d4": ("audio.clipped", "0.05 > 0.01")}
    assert "d5" in result.kept.column("id").to_pylist() and "d0" in result.kept.column("id").to_pylist()


def test_captions_are_redacted_and_labelled_but_not_removed_for_a_short_low_score():
    media = [_item(width=224, height=224, luma_std=60.0)] * 2
    texts = ["A red circle.", "Photo by jane.doe@example.com of a cat on a sofa."]
    result, removed, _ = _run(texts, ["image", "image"], media)
    assert removed == {}
    rows = result.kept.to_pylist()
    assert rows[0]["lang"] is not None and rows[0]["lang_score"] < 0.5  # labelled, low score, kept
    assert "<EMAIL>" in rows[1]["text"] and "jane.doe" not in rows[1]["text"]
    # the same short text as a text document is removed for its low score, as before
    _, removed, _ = _run(["A red circle."], ["text"], [None])
    assert removed["d0"][0] == "language.low_confidence"


def test_media_filters_can_be_switched_off():
    settings = CleaningSettings.model_validate({"images": {"enabled": False}})
    result, removed, _ = _run(["A red circle."], ["image"], [_item(width=8, height=8, luma_std=0.0)], settings)
    assert removed == {} and result.kept.num_rows == 1
    with pytest.raises(ValueError):
        CleaningSettings.model_validate({"images": {"max_aspect_ratio": 0.5}})


def test_rows_without_a_media_column_pass(monkeypatch):
    batch = documents_batch(["hello world, a plain text document"])
    batch = pa.RecordBatch.from_arrays(batch.columns[:-1], names=batch.schema.names[:-1])
    from platform_assets.cleaning.media_filters import ImageFilter
    from platform_assets.cleaning.settings import ImageFilterSettings

    out = ImageFilter(ImageFilterSettings())(batch)
    assert out.kept.num_rows == 1 and out.stats.skipped == 1
