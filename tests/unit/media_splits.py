"""A small dataset_splits output with every media modality, built for the media shard tests: Pillow
PNG/JPEG images, a page rendered by PyMuPDF, two 16 kHz FLAC clips written by soundfile, text rows
(which media shards leave to the token path) and an image row without bytes (an exclusion)."""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import soundfile as sf
from PIL import Image

from platform_assets.contracts import IOSettings
from platform_assets.parquet_parts import TableSink
from platform_assets.schema import DOCUMENTS_SCHEMA, MEDIA_MEASURED_FIELDS, document_id
from platform_assets.storage import Storage

SPLITS_REL = "dataset_splits/_all"
SPLITS_SCHEMA = DOCUMENTS_SCHEMA.append(pa.field("split", pa.string(), nullable=False))
RATE = 16_000


@dataclass
class Expected:
    """What the shards must hold: per document id, its text, pixels (RGB uint8) or samples (int16)."""

    ids: list[str]  # every media sample, in input order
    texts: dict[str, str]
    pixels: dict[str, np.ndarray]
    audio: dict[str, np.ndarray]
    text_rows: int
    excluded: list[str]
    chat_id: str


def _image(w: int, h: int, seed: int, fmt: str) -> bytes:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, fmt)
    return buf.getvalue()


def _page() -> tuple[bytes, str]:
    import pymupdf

    doc = pymupdf.open()
    page = doc.new_page(width=200, height=120)
    page.insert_text((12, 40), "Shard contract, page one")
    return page.get_pixmap(dpi=72).tobytes("png"), page.get_text().strip()


def _clip(seconds: float, freq: float) -> tuple[bytes, np.ndarray]:
    t = np.arange(int(seconds * RATE)) / RATE
    samples = (0.3 * np.sin(2 * np.pi * freq * t) * 32767).astype(np.int16)
    buf = io.BytesIO()
    sf.write(buf, samples, RATE, format="FLAC", subtype="PCM_16")
    return buf.getvalue(), samples


def _item(kind: str, mime: str, uri: str, data: bytes | None, **measured) -> dict:
    sha = hashlib.sha256(data or b"").hexdigest()
    return {"kind": kind, "mime": mime, "uri": uri, "sha256": sha, "bytes": data,
            **{name: measured.get(name) for name in MEDIA_MEASURED_FIELDS}}


def write_splits(storage: Storage, io_settings: IOSettings | None = None) -> Expected:
    """Commit the dataset_splits output; returns what the shards must hold."""
    rows: list[dict] = []
    exp = Expected([], {}, {}, {}, 0, [], "")

    def add(source, split, modality, text, uri, media=None, meta=None, media_row=True):
        shas = [m["sha256"] for m in media or ()]
        doc = document_id(source, uri, text, shas)
        rows.append({"id": doc, "source": source, "text": text, "modality": modality, "uri": uri, "license": "cc-by",
                     "meta": json.dumps(meta) if meta is not None else None, "ingested_at": 1_700_000_000_000,
                     "media": media, "split": split})
        if media_row:
            exp.ids.append(doc)
            exp.texts[doc] = text
        return doc

    chat = {"messages": [{"role": "user", "content": "What is shown?"}, {"role": "assistant", "content": "Noise."}],
            "album": "a1"}
    for i, (w, h, fmt, mime, split) in enumerate([(40, 30, "PNG", "image/png", "train"),
                                                  (64, 48, "JPEG", "image/jpeg", "train"),
                                                  (300, 90, "PNG", "image/png", "validation")]):
        data = _image(w, h, i, fmt)
        doc = add("photos", split, "image", f"photo {i} caption", f"photos/{i}.{fmt.lower()}",
                  [_item("image", mime, f"photos/{i}", data, width=w, height=h, format=fmt, mode="RGB",
                         luma_std=40.5, phash=2**63 + i)], meta=chat if i == 0 else {"album": "a1"})
        exp.pixels[doc] = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        if i == 0:
            exp.chat_id = doc
    add("photos", "train", "text", "a text document in a media source", "photos/readme.txt", media_row=False)
    png, page_text = _page()
    doc = add("scans", "train", "pdf", page_text, "scans/a.pdf#page=1",
              [_item("page", "image/png", "scans/a.pdf#page=1", png, width=200, height=120, format="PDF", page=0,
                     frames=1, ocr=False)])
    exp.pixels[doc] = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    for i, (seconds, split) in enumerate([(0.5, "train"), (1.25, "test")]):
        flac, samples = _clip(seconds, 440.0 * (i + 1))
        doc = add("clips", split, "audio", f"transcript {i}", f"clips/{i}.wav",
                  [_item("audio", "audio/flac", f"clips/{i}.wav", flac, format="WAV", duration_s=seconds,
                         sample_rate=RATE, source_sample_rate=44_100, channels=2, rms_dbfs=-13.5)])
        exp.audio[doc] = samples
    for i in range(3):
        add("notes", "train", "text", f"note {i}", f"notes/{i}.txt", media_row=False)
    gone = add("photos", "train", "image", "kept by uri only", "photos/remote.png",
               [_item("image", "image/png", "s3://elsewhere/remote.png", None)], media_row=False)
    exp.excluded.append(gone)
    exp.text_rows = 4
    table = pa.Table.from_pylist(rows, SPLITS_SCHEMA)
    with TableSink(storage, SPLITS_REL, SPLITS_SCHEMA, io_settings) as sink:
        sink.write(table)
    return exp
