"""A multimodal shard set and a tokenizer for the multimodal loader and training tests, written by the
platform's own writers (media_shards, the tokenizer stage's builder) from data drawn here: Pillow
images with captions (some as chat instructions), PDF-like pages (PNG + page text), and FLAC speech
stand-ins (tones whose pitch follows the words of the transcript) at 16 kHz.

Sizes are small on purpose: a tiny model must train a few steps on 2 CPU cores in seconds.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import soundfile as sf
from PIL import Image, ImageDraw

from platform_assets.parquet_parts import TableSink
from platform_assets.schema import DOCUMENTS_SCHEMA, MEDIA_MEASURED_FIELDS, document_id
from platform_assets.storage import Storage

SPLITS_REL = "dataset_splits/_all"
MEDIA_REL = "media_shards/_all"
SPLITS_SCHEMA = DOCUMENTS_SCHEMA.append(pa.field("split", pa.string(), nullable=False))
RATE = 16_000
COLOURS = {"red": (220, 30, 30), "green": (30, 170, 60), "blue": (30, 60, 210), "yellow": (240, 210, 20)}
SHAPES = ("circle", "square")
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot")


@dataclass(frozen=True)
class MediaShardSet:
    root: Path
    """The storage root holding media_shards/_all/{webdataset,parquet}/index.json."""
    ids: dict[str, list[str]]
    """Sample ids per split, in input order."""

    def format_dir(self, fmt: str) -> Path:
        return self.root / MEDIA_REL / fmt


def _item(kind: str, mime: str, uri: str, data: bytes, **measured) -> dict:
    return {"kind": kind, "mime": mime, "uri": uri, "sha256": hashlib.sha256(data).hexdigest(), "bytes": data,
            **{name: measured.get(name) for name in MEDIA_MEASURED_FIELDS}}


def _shape_png(colour: str, shape: str, size: int, rng: np.random.Generator) -> bytes:
    background = tuple(int(v) for v in rng.integers(200, 256, 3))
    img = Image.new("RGB", (size, size), background)
    draw = ImageDraw.Draw(img)
    a, b = int(rng.integers(2, size // 4)), int(rng.integers(3 * size // 4, size - 2))
    (draw.ellipse if shape == "circle" else draw.rectangle)((a, a, b, b), fill=COLOURS[colour])
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def _page_png(text: str, rng: np.random.Generator) -> bytes:
    img = Image.new("RGB", (96, 64), (255, 255, 255))
    ImageDraw.Draw(img).text((4, int(rng.integers(4, 40))), text, fill=(0, 0, 0))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def _speech_flac(words: list[str], rng: np.random.Generator) -> tuple[bytes, float]:
    """0.25 s a word, the pitch a function of the word: a transcript the audio actually predicts."""
    parts = []
    for w in words:
        t = np.arange(int(0.25 * RATE)) / RATE
        parts.append(0.3 * np.sin(2 * np.pi * (300 + 120 * WORDS.index(w)) * t))
    samples = (np.concatenate(parts) + rng.normal(0, 0.01, sum(len(p) for p in parts)))
    buf = io.BytesIO()
    sf.write(buf, (samples * 32767).astype(np.int16), RATE, format="FLAC", subtype="PCM_16")
    return buf.getvalue(), len(samples) / RATE


def write_media_shard_set(root: Path, images: int = 24, pages: int = 6, clips: int = 16, validation: int = 4,
                          seed: int = 0, shard_max_samples: int = 5, audio_features: str = "whisper",
                          text_documents: int = 0) -> MediaShardSet:
    """Sources `photos` (images, every third a chat instruction), `scans` (pages), `speech` (audio); the
    last `validation` of each source go to the validation split. Shards of `shard_max_samples`, so a
    source spans several shards. `text_documents`: text rows of a source `notes` in the train split
    (the token path's input: the tokenizer stage trains on text documents only; media shards skip them)."""
    from platform_assets.media_shards.settings import MediaShardSettings
    from platform_assets.media_shards.stage import write_media_shards

    rng = np.random.default_rng(seed)
    rows: list[dict] = []
    ids: dict[str, list[str]] = {}

    def add(source: str, split: str, modality: str, text: str, uri: str, item: dict, meta: dict | None) -> None:
        doc = document_id(source, uri, text, [item["sha256"]])
        rows.append({"id": doc, "source": source, "text": text, "modality": modality, "uri": uri,
                     "license": "cc-by", "meta": json.dumps(meta) if meta is not None else None,
                     "ingested_at": 1_700_000_000_000, "media": [item], "split": split})
        ids.setdefault(split, []).append(doc)

    for i in range(images):
        colour, shape = list(COLOURS)[i % len(COLOURS)], SHAPES[(i // len(COLOURS)) % len(SHAPES)]
        png = _shape_png(colour, shape, 48, rng)
        caption = f"a {colour} {shape}"
        meta = None
        if i % 3 == 2:
            meta = {"messages": [{"role": "user", "content": "What colour is the shape?"},
                                 {"role": "assistant", "content": f"It is {colour}."}]}
        split = "validation" if i >= images - validation else "train"
        add("photos", split, "image", caption, f"photos/{i}.png",
            _item("image", "image/png", f"photos/{i}.png", png, width=48, height=48, format="PNG", mode="RGB"), meta)
    for i in range(pages):
        text = f"page {i} {WORDS[i % len(WORDS)]}"
        png = _page_png(text, rng)
        split = "validation" if i >= pages - min(validation, pages // 2) else "train"
        add("scans", split, "pdf", text, f"scans/{i}.pdf#page=1",
            _item("page", "image/png", f"scans/{i}.pdf#page=1", png, width=96, height=64, format="PDF", page=0,
                  frames=1, ocr=False), None)
    for i in range(clips):
        words = [WORDS[int(k)] for k in rng.integers(0, len(WORDS), 3)]
        flac, seconds = _speech_flac(words, rng)
        split = "validation" if i >= clips - validation else "train"
        add("speech", split, "audio", " ".join(words), f"speech/{i}.flac",
            _item("audio", "audio/flac", f"speech/{i}.flac", flac, format="FLAC", duration_s=seconds,
                  sample_rate=RATE, source_sample_rate=RATE, channels=1), None)
    for i in range(text_documents):
        words = [WORDS[int(k)] for k in rng.integers(0, len(WORDS), 12)]
        text = f"a {list(COLOURS)[i % len(COLOURS)]} {SHAPES[i % 2]}: " + " ".join(words) + "."
        rows.append({"id": document_id("notes", f"notes/{i}.txt", text), "source": "notes", "text": text,
                     "modality": "text", "uri": f"notes/{i}.txt", "license": "cc-by", "meta": None,
                     "ingested_at": 1_700_000_000_000, "media": None,
                     "split": "validation" if i % 5 == 4 else "train"})
    storage = Storage(str(root))
    table = pa.Table.from_pylist(rows, SPLITS_SCHEMA)
    with TableSink(storage, SPLITS_REL, SPLITS_SCHEMA) as sink:
        sink.write(table)
    settings = MediaShardSettings(shard_max_samples=shard_max_samples, audio_features=audio_features)
    write_media_shards(storage, SPLITS_REL, MEDIA_REL, settings)
    return MediaShardSet(root, ids)


def write_tokenizer(directory: Path) -> Path:
    """A byte-level BPE (vocab 512) trained on the fixture's words, saved as the tokenizer stage saves
    it: `AutoTokenizer.from_pretrained(directory)` loads it with its ChatML chat template (generation
    blocks: the assistant-only loss mask)."""
    from platform_assets.tokenize.settings import TokenizerSettings
    from platform_assets.tokenize.tokenizer_build import make_artifact, save_artifact, train_tokenizer

    settings = TokenizerSettings(vocab_size=512, min_frequency=1)
    texts = [f"a {c} {s}" for c in COLOURS for s in SHAPES] + [f"It is {c}." for c in COLOURS]
    texts += [" ".join(WORDS), "What colour is the shape?", "page 0 1 2 3 4 5 6 7 8 9"] * 20
    save_artifact(make_artifact(train_tokenizer([texts], settings), settings), directory)
    return directory


WHISPER_MODEL = {"model_type": "whisper", "overrides": {
    "d_model": 32, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2,
    "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64}}
LLAVA_MODEL = {"model_type": "llava", "overrides": {
    "vision_config": {"model_type": "clip_vision_model", "patch_size": 8, "hidden_size": 32,
                      "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2},
    "text_config": {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                    "num_attention_heads": 2, "num_key_value_heads": 2}}}


def media_run_config(shards: MediaShardSet, tokenizer: Path, ckpt: Path, family: str, **top) -> dict:
    """A raw run config for a tiny Whisper (`family` "whisper") or LLaVA ("llava") on the fixture's
    webdataset shards: fp32, one thread, deterministic, every step logged with its sample ids, images
    augmented (random resized crop + flip). `top`: overrides by dotted path with `__` (data__num_workers=2)."""
    import copy

    raw: dict = {
        "data": {"data_dir": str(shards.format_dir("webdataset")), "global_batch_size": 4, "micro_batch_size": 2,
                 "num_workers": 0, "seed": 3,
                 "media": {"tokenizer_path": str(tokenizer), "max_text_tokens": 64,
                           "image": {"size": 32, "augment": {"random_resized_crop_scale": [0.6, 1.0],
                                                             "hflip_probability": 0.5}}}},
        "model": copy.deepcopy({"whisper": WHISPER_MODEL, "llava": LLAVA_MODEL}[family]),
        "optimizer": {"lr": 3e-3},
        "schedule": {"warmup_steps": 0, "decay_steps": 12},
        "checkpoint": {"dir": str(ckpt), "interval": 5},
        "validation": {"eval_interval": 5, "eval_batches": 1},
        "dataset_version": "media-fixture-v1",
        "max_steps": 12,
        "precision": "fp32",
        "log_interval": 1,
        "log_sample_ids": True,
        "deterministic": True,
        "cpu_threads": 1,
        "seed": 5,
    }
    for dotted, value in top.items():
        *parents, leaf = dotted.split("__")
        node = raw
        for p in parents:
            node = node.setdefault(p, {})
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return raw
