"""Dedup keys per modality: media rows are keyed by their bytes, never collapse by caption."""

import hashlib

import pyarrow as pa
from document_batches import documents_batch

from platform_assets.dedup.deduplicator import deduplicate
from platform_assets.dedup.exact import text_hashes
from platform_assets.dedup.keys import exact_keys, near_dedup_texts
from platform_assets.dedup.settings import DedupSettings, ExactSettings


def _item(data: bytes, kind: str = "image", mime: str = "image/png") -> list[dict]:
    return [{"kind": kind, "mime": mime, "uri": "u", "sha256": hashlib.sha256(data).hexdigest(), "bytes": data}]


CAPTION = "A golden retriever lying on the grass in the afternoon sun, looking at the camera."
ESSAY = ("Deduplication before splitting keeps the evaluation honest: a near copy of a training document "
         "in the test split inflates every metric, and web crawls are full of such copies. ") * 3


def _batch():
    return documents_batch(
        [CAPTION, CAPTION, "", "", ESSAY, ESSAY.upper(), "", CAPTION + " Another caption."],
        modalities=["image", "image", "image", "image", "text", "text", "audio", "image"],
        ids=[f"d{i}" for i in range(8)],
        media=[_item(b"dog-1"), _item(b"dog-2"), _item(b"cat"), _item(b"bird"), None, None,
               _item(b"clip", "audio", "audio/flac"), _item(b"dog-1")],
    )


def test_images_are_keyed_by_bytes_and_text_by_normalised_text():
    batch = _batch()
    keys = exact_keys(batch, ExactSettings()).to_pylist()
    assert keys[0] != keys[1]  # two different images with the same caption
    assert keys[2] != keys[3]  # caption-less images do not all collapse into one
    assert keys[0] == keys[7]  # the same image with another caption
    assert keys[4] == keys[5]  # text: lower-cased normalised text, as before
    text_only = documents_batch([ESSAY, ESSAY.upper()])
    assert exact_keys(text_only, ExactSettings()).to_pylist() == text_hashes(text_only.column("text"),
                                                                             ExactSettings()).to_pylist()


def test_captions_do_not_go_through_minhash():
    texts = near_dedup_texts(_batch()).to_pylist()
    assert texts == ["", "", "", "", ESSAY, ESSAY.upper(), "", ""]


def test_dedup_removes_only_true_media_duplicates():
    kept, result = deduplicate(pa.Table.from_batches([_batch()]), DedupSettings())
    removed = dict(zip(result.exclusions()["id"].to_pylist(), result.exclusions()["kept_id"].to_pylist(),
                       strict=True))
    assert removed == {"d7": "d0", "d5": "d4"}  # same image bytes; same normalised text
    assert sorted(kept["id"].to_pylist()) == ["d0", "d1", "d2", "d3", "d4", "d6"]
