"""What makes two documents the same, per modality: one key function per modality for exact dedup,
and the modalities whose text goes through MinHash near-dedup.

- text and html: the normalised text (exact.text_hashes), and MinHash over its shingles;
- image and audio: the media bytes (the sha256 of each item, as stored in `media`). Their text is a
  caption or transcript: two different images with the same caption are not duplicates, the same
  image with two captions is. No MinHash on captions (perceptual hashes are the media rooms' job);
- pdf (a page): the page's media bytes for exact dedup, and MinHash on the page text as for
  documents (the same page rendered twice with different bytes still shares its text).

A batch without media rows (every text corpus) takes exactly the text path it took before, so text
outputs stay byte-identical.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from platform_assets.dedup.exact import TEXT_HASH_TYPE, text_hashes
from platform_assets.dedup.settings import ExactSettings
from platform_assets.dedup.shingles import texts_to_array
from platform_assets.schema import Modality

MEDIA_KEY_COLUMNS = ("media.sha256", "media.phash")
"""What dedup and the leak check read of the media items: their hashes, never their bytes (a batch of
8k images of 100 KB would be 800 MB; read_batches projects the item fields)."""

ExactKey = Callable[[pa.RecordBatch, ExactSettings], pa.Array]
"""(batch of one modality, settings) -> a TEXT_HASH_TYPE key per row: equal keys are exact duplicates."""


def text_key(batch: pa.RecordBatch, settings: ExactSettings) -> pa.Array:
    return text_hashes(texts_to_array(batch.column("text")), settings)


def media_key(batch: pa.RecordBatch, settings: ExactSettings) -> pa.Array:
    """xxh3-128 over the sha256s of a row's media items, in order (the bytes themselves are hashed
    once, at ingest). A media row without items falls back to its text key."""
    media = batch.column("media").to_pylist() if "media" in batch.schema.names else [None] * batch.num_rows
    text = None
    out: list[bytes] = []
    for i, items in enumerate(media):
        if items:
            h = xxhash.xxh3_128()
            for item in items:
                h.update(bytes.fromhex(item["sha256"]))
            out.append(h.digest())
        else:
            text = text if text is not None else text_key(batch, settings)
            out.append(text[i].as_py())
    return pa.array(out, TEXT_HASH_TYPE)


EXACT_KEYS: dict[str, ExactKey] = {
    Modality.TEXT: text_key,
    Modality.HTML: text_key,
    Modality.PDF: media_key,
    Modality.IMAGE: media_key,
    Modality.AUDIO: media_key,
}
"""One line per modality; a modality not listed is keyed by its text."""

NEAR_DEDUP_MODALITIES = frozenset({Modality.TEXT, Modality.HTML, Modality.PDF})
"""Modalities whose text goes through MinHash-LSH; others get no shingles (exact dedup only)."""


def _modalities(batch: pa.RecordBatch) -> pa.Array | None:
    return batch.column("modality") if "modality" in batch.schema.names else None


def exact_keys(batch: pa.RecordBatch, settings: ExactSettings) -> pa.Array:
    """The exact-dedup key of every row, each by its modality's key function."""
    modality = _modalities(batch)
    kinds = pc.unique(modality).to_pylist() if modality is not None else [Modality.TEXT.value]
    if all(EXACT_KEYS.get(k, text_key) is text_key for k in kinds):
        return text_key(batch, settings)  # the text-only path, unchanged
    keys = np.empty(batch.num_rows, dtype=object)
    for kind in kinds:
        rows = np.flatnonzero(pc.equal(modality, kind).to_numpy(zero_copy_only=False))
        subset = batch.take(pa.array(rows))
        keys[rows] = EXACT_KEYS.get(kind, text_key)(subset, settings).to_pylist()
    return pa.array(keys.tolist(), TEXT_HASH_TYPE)


def near_dedup_texts(batch: pa.RecordBatch) -> pa.Array:
    """The texts MinHash sees: a row outside NEAR_DEDUP_MODALITIES contributes no text (no shingles)."""
    text = texts_to_array(batch.column("text"))
    modality = _modalities(batch)
    if modality is None:
        return text
    outside = pc.invert(pc.is_in(modality, value_set=pa.array(sorted(NEAR_DEDUP_MODALITIES), modality.type)))
    if not pc.any(outside).as_py():
        return text
    return pc.if_else(outside, pa.scalar("", text.type), text)
