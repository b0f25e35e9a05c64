"""Media loader: multimodal samples delivered as model-input batches, ours vs webdataset and HF datasets.

Four benchmarks (the harness compares ours with one peer at a time), same samples, same processors, batches
of 32, 0 and 2 DataLoader workers:

- `media_loader_images_webdataset` / `media_loader_images_datasets`: images/s delivered as `pixel_values`
  [32, 3, 224, 224] float32 (decode + CLIP preprocessing).
- `media_loader_audio_webdataset` / `media_loader_audio_datasets`: clips/s delivered as `input_features`
  [32, 80, 3000] float32, two ways, each side doing the same work in each:
  - `precomputed`: the shard's stored Whisper features (the set written with `audio_features: whisper`):
    ours reads the tar's `.input_features.npy` member; webdataset decodes the same `.npy` member; datasets
    reads the Parquet `input_features` column (`with_format("numpy")`);
  - `decoded`: the set written with `audio_features: none`: every side decodes the FLAC bytes with soundfile
    and runs the same `WhisperFeatureExtractor` (one call per batch).

Ours: `training.data.media_loader.MediaLoader` on the `webdataset` format (its tar reader: one pread per
member) with the collators `training/media_training.py` builds: `VisionLanguageCollator` (CLIP image
processor from `build_image_processor(ImageSettings(size=224))`, no augmentation, image_seq_length 256,
the tokenizer with `ensure_image_token`) and `SpeechCollator` (`build_feature_extractor()`). global batch =
micro batch = 32, one rank, modalities ("image",) or ("audio",). **Ours does more than the peers:** it
also builds the text side of every batch (the chat template tokenized with its assistant mask, the image
token expanded, input_ids / attention_mask / labels for images; transcript labels and decoder inputs for
audio), plus sample ids and counts; the peers deliver pixel_values / input_features only. With 0 workers
MediaLoader builds batches in process (no DataLoader, by design); the peers run in a torch DataLoader with
num_workers=0, their documented use.

Peers (the same processor objects, built the same way, applied once per batch of 32):
- webdataset: `wds.WebDataset(tars, shardshuffle=False).shuffle(1000).decode("pil")` (`.decode()` for the
  `.npy` features, no decode for FLAC bytes) `.to_tuple(member).batched(32, collation_fn=<processor>)
  .repeat()` in a DataLoader(batch_size=None);
- datasets: `datasets.Dataset.from_parquet(files)` (the features embedded in the files: `image` is `Image()`),
  `set_transform(<processor over the batch>)` (audio: `cast_column("audio", Audio(decode=False))`, soundfile
  on the bytes), DataLoader(batch_size=32, RandomSampler); precomputed features via `with_format("numpy")`.
  The Arrow cache that `from_parquet` writes is built in setup, untimed.

Input (built once in a subprocess, untimed; MEDIA_LOADER_BENCH_CACHE=<dir> keeps and reuses it): from the
multimodal corpus of `../shared/data/build_multimodal.sh` (`--corpus`, e.g. /work/mm): every
`images/emoji/*.png` (3,786 Noto emoji, 64 px RGBA) with its `images.jsonl` caption, and every
`audio/speech/*.wav` (espeak-ng, 22,050 Hz) with its `speech.jsonl` transcript, each run through the
platform's media rooms (`prepare_image`: RGB PNG, alpha on white; `prepare_audio`: 16 kHz mono FLAC), as a
dataset_splits table (split train, sources `emoji` and `speech`) written by the `media_shards` stage's own
writer (`platform_assets.media_shards.stage.write_media_shards`, both formats) twice: with
`audio_features: whisper` and with `none`. `shard_max_samples` is 40 (not the default 10,000) so that
webdataset, which hands whole shards to its workers, has shards for both workers (160 clips -> 4 shards);
ours does not depend on it. A BPE tokenizer (vocab 2,048, ChatML template) is trained on the captions and
transcripts by the tokenizer stage's builder. MEDIA_LOADER_BENCH_IMAGES=N takes the first N emoji.

Timing: for 0 and then 2 workers (and for audio, each path), a side builds its pipeline, takes 1 + workers
batches untimed (worker start-up, first maps, and the batches the other workers finished meanwhile), then
times MEDIA_LOADER_BENCH_BATCHES batches (default 40) of images, MEDIA_LOADER_BENCH_AUDIO_BATCHES (default
12) of precomputed and decoded clips. Epochs are long enough that no side restarts inside the timed stretch.
torch/OpenMP on one thread in every process (OMP_NUM_THREADS=1). webdataset batches within one worker's
shards and one pass (partial=False), so each worker's shards must hold at least a batch.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    MB,
    REPO_ROOT,
    Benchmark,
    BenchmarkError,
    Metric,
    Prepared,
    Record,
    Spec,
    Target,
    cpu_seconds_metric,
    peak_rss_metric,
)

BATCH = 32
WORKERS = (0, 2)
IMAGE_SIZE = 224
IMAGE_SEQ_LENGTH = 256  # CLIP ViT-L/14 at 224 px: (224 / 14) ** 2 patches
MAX_TEXT_TOKENS = 1024
MAX_TARGET_TOKENS = 448  # Whisper's max_target_positions
SHUFFLE_BUFFER = 1000
SHARD_MAX_SAMPLES = 40
VOCAB = 2048
IMAGE_BATCHES_DEFAULT = 40
AUDIO_BATCHES_DEFAULT = 12
AUDIO_PATHS = ("precomputed", "decoded")
ENV = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_DATASETS_CACHE": "{run_dir}/hf-cache",
}


# -- input: built in a subprocess (PIL, pyarrow, transformers stay out of the parent) -----------------
def _manifest(path: Path, key: str) -> dict[str, str]:
    out: dict[str, str] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                out[row["file"]] = row.get(key) or ""
    return out


def _inputs(corpus: Path, limit: int) -> tuple[list[Path], list[Path]]:
    images = sorted((corpus / "images" / "emoji").glob("*.png"))
    if limit > 0:
        images = images[:limit]
    clips = sorted((corpus / "audio" / "speech").glob("*.wav"))
    return images, clips


def build_input(corpus: str, out: str, limit: int) -> dict[str, Any]:
    """Rooms -> dataset_splits table -> media_shards twice (features whisper / none) + a tokenizer."""
    import pyarrow as pa

    from platform_assets.media.audio import prepare_audio
    from platform_assets.media.images import prepare_image
    from platform_assets.media_shards.settings import MediaShardSettings
    from platform_assets.media_shards.stage import write_media_shards
    from platform_assets.parquet_parts import TableSink
    from platform_assets.schema import DOCUMENTS_SCHEMA, document_id
    from platform_assets.storage import Storage
    from platform_assets.tokenize.settings import TokenizerSettings
    from platform_assets.tokenize.tokenizer_build import make_artifact, save_artifact, train_tokenizer

    root, base = Path(out), Path(corpus)
    root.mkdir(parents=True, exist_ok=True)
    captions = _manifest(base / "images.jsonl", "caption")
    transcripts = _manifest(base / "audio" / "speech.jsonl", "transcript")
    images, clips = _inputs(base, limit)
    rows: list[dict] = []
    texts: list[str] = []
    media_bytes = {"image": 0, "audio": 0}
    audio_seconds = 0.0

    def add(source: str, modality: str, rel: str, text: str, prepared) -> None:
        item = prepared.item(rel)
        rows.append({"id": document_id(source, rel, text, [item["sha256"]]), "source": source, "text": text,
                     "modality": modality, "uri": rel, "license": "see the corpus", "meta": None,
                     "ingested_at": 1_700_000_000_000, "media": [item], "split": "train"})
        texts.append(text)
        media_bytes[modality] += len(prepared.data)

    for p in images:
        rel = str(p.relative_to(base))
        add("emoji", "image", rel, captions.get(rel, ""), prepare_image(p.read_bytes()))
    for p in clips:
        rel = str(p.relative_to(base))
        prepared = prepare_audio(p.read_bytes())
        audio_seconds += float(prepared.measured.get("duration_s") or 0.0)
        add("speech", "audio", rel, transcripts.get(rel, ""), prepared)
    if len(images) < BATCH or len(clips) < 2:
        raise BenchmarkError(f"{base}: {len(images)} emoji PNGs and {len(clips)} speech WAVs; need >= {BATCH} "
                             f"and >= 2 (build it with ../shared/data/build_multimodal.sh)")
    schema = DOCUMENTS_SCHEMA.append(pa.field("split", pa.string(), nullable=False))
    table = pa.Table.from_pylist(rows, schema)
    sets = {}
    for name, features in (("features", "whisper"), ("nofeatures", "none")):
        storage = Storage(str(root / name))
        with TableSink(storage, "dataset_splits/_all", schema) as sink:
            sink.write(table)
        write_media_shards(storage, "dataset_splits/_all", "media_shards/_all",
                           MediaShardSettings(shard_max_samples=SHARD_MAX_SAMPLES, audio_features=features))
        sets[name] = str(root / name / "media_shards" / "_all")
    settings = TokenizerSettings(vocab_size=VOCAB, min_frequency=1)
    save_artifact(make_artifact(train_tokenizer([texts], settings), settings), root / "tokenizer")

    def files(set_dir: str, fmt: str, source: str) -> list[str]:
        index = json.loads((Path(set_dir) / fmt / "index.json").read_text())
        return [str(Path(set_dir) / fmt / sh["files"]["data"]["path"]) for st in index["sets"]
                if st["source"] == source for sh in st["shards"]]

    return {
        "sets": sets, "tokenizer": str(root / "tokenizer"),
        "images": len(images), "clips": len(clips), "image_bytes": media_bytes["image"],
        "audio_bytes": media_bytes["audio"], "audio_seconds": audio_seconds,
        "captioned": sum(1 for p in images if captions.get(str(p.relative_to(base)))),
        "image_tars": files(sets["features"], "webdataset", "emoji"),
        "image_parquet": files(sets["features"], "parquet", "emoji"),
        "audio_tars": {"precomputed": files(sets["features"], "webdataset", "speech"),
                       "decoded": files(sets["nofeatures"], "webdataset", "speech")},
        "audio_parquet": {"precomputed": files(sets["features"], "parquet", "speech"),
                          "decoded": files(sets["nofeatures"], "parquet", "speech")},
    }


def _cache_key(corpus: Path, images: list[Path], clips: list[Path]) -> str:
    h = hashlib.sha256(str(corpus).encode())
    h.update(Path(__file__).read_bytes())  # any change to the build (or its constants) builds anew
    for f in (*images, *clips):
        st = f.stat()
        h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def prepare(corpus: Path, run_dir: Path) -> Spec:
    limit = int(os.environ.get("MEDIA_LOADER_BENCH_IMAGES", "0") or 0)
    images, clips = _inputs(corpus, limit)
    if len(images) < BATCH or len(clips) < 2:
        raise BenchmarkError(f"{corpus}: {len(images)} images/emoji/*.png and {len(clips)} audio/speech/*.wav; "
                             f"need >= {BATCH} and >= 2 (build it with ../shared/data/build_multimodal.sh)")
    cache = os.environ.get("MEDIA_LOADER_BENCH_CACHE")
    out = Path(cache) / _cache_key(corpus, images, clips) if cache else run_dir / "input"
    meta = out / "meta.json"
    if not meta.is_file():
        code = ("import json, sys; from benchmarks.media_loader import build_input; "
                "print(json.dumps(build_input(sys.argv[1], sys.argv[2], int(sys.argv[3]))))")
        proc = subprocess.run([sys.executable, "-c", code, str(corpus), str(out), str(limit)], cwd=REPO_ROOT,
                              capture_output=True, text=True, env={**os.environ, **{k: v for k, v in ENV.items()
                                                                                   if "{" not in v}})
        if proc.returncode != 0:
            raise BenchmarkError(f"building the input failed:\n{proc.stderr[-3000:]}")
        meta.write_text(proc.stdout.strip().splitlines()[-1])
    built = json.loads(meta.read_text())
    return {"corpus": str(corpus), "image_batches": int(os.environ.get("MEDIA_LOADER_BENCH_BATCHES",
                                                                         IMAGE_BATCHES_DEFAULT)),
            "audio_batches": int(os.environ.get("MEDIA_LOADER_BENCH_AUDIO_BATCHES", AUDIO_BATCHES_DEFAULT)),
            **built}


def describe_images(spec: Spec) -> str:
    return (f"{spec['images']:,} emoji PNGs ({spec['image_bytes'] / MB:,.1f} MB after the image room, "
            f"{spec['captioned']:,} captioned) in {len(spec['image_tars'])} shards of <= {SHARD_MAX_SAMPLES}; "
            f"{spec['image_batches']} batches of {BATCH} timed per worker count")


def describe_audio(spec: Spec) -> str:
    return (f"{spec['clips']:,} espeak-ng clips ({spec['audio_seconds']:,.0f} s, {spec['audio_bytes'] / MB:,.1f} MB "
            f"of 16 kHz FLAC) in {len(spec['audio_tars']['decoded'])} shards; {spec['audio_batches']} batches of "
            f"{BATCH} timed per path and worker count")


# -- timing, shared by every side -------------------------------------------------------------------
def _timed(batches, n: int, shape: tuple[int, ...], workers: int) -> dict[str, float]:
    """Take 1 + workers batches untimed (worker start-up; the batches the other workers finished meanwhile,
    which would otherwise arrive for free in the timed stretch), then time n more; every batch must be
    [32, *shape] float32."""
    import torch

    def check(x) -> None:
        if not isinstance(x, torch.Tensor) or x.dtype != torch.float32 or tuple(x.shape) != (BATCH, *shape):
            got = (tuple(x.shape), x.dtype) if hasattr(x, "shape") else type(x)
            raise BenchmarkError(f"a batch of {got}, expected [{BATCH}, {', '.join(map(str, shape))}] float32")

    for _ in range(1 + workers):
        check(next(batches))
    t0 = time.perf_counter()
    total = 0.0
    for _ in range(n):
        x = next(batches)
        check(x)
        total += float(x[:, 0].mean())  # touch the values (a cheap sum of one channel / mel bin)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "per_s": n * BATCH / seconds, "batches": n, "value_sum": total}


def _long_epoch(n: int) -> int:
    return (n + 2 + max(WORKERS)) * BATCH  # one iterator covers warm-up and timed batches: no restart inside


def _image_work(spec: Spec, pipeline) -> Prepared:
    def work() -> dict[str, Any]:
        runs = {}
        for w in WORKERS:
            it = pipeline(w)
            runs[str(w)] = _timed(it, spec["image_batches"], (3, IMAGE_SIZE, IMAGE_SIZE), w)
            close = getattr(it, "close", None)
            if close:
                close()  # a generator: its finally stops the workers now
            del it
        return {"runs": runs}

    return Prepared(work)


def _audio_work(spec: Spec, pipeline) -> Prepared:
    def work() -> dict[str, Any]:
        runs = {}
        for path in AUDIO_PATHS:
            for w in WORKERS:
                it = pipeline(path, w)
                runs[f"{path}/{w}"] = _timed(it, spec["audio_batches"], (80, 3000), w)
                close = getattr(it, "close", None)
                if close:
                    close()
                del it
        return {"runs": runs}

    return Prepared(work)


# -- ours ---------------------------------------------------------------------------------------------
def image_processor():
    from training.data.media_collate import ImageSettings, build_image_processor

    return build_image_processor(ImageSettings(size=IMAGE_SIZE))


def ours_collators(spec: Spec):
    """(VisionLanguageCollator, SpeechCollator) as training/media_training.py builds them."""
    from training.data.image_augment import AugmentSettings
    from training.data.media_collate import (
        SpeechCollator,
        VisionLanguageCollator,
        build_feature_extractor,
        ensure_image_token,
    )
    from training.media_training import IMAGE_TOKEN, load_tokenizer

    tok = load_tokenizer(spec["tokenizer"])
    ensure_image_token(tok, IMAGE_TOKEN)
    vision = VisionLanguageCollator(tok, image_processor(), AugmentSettings(), 0, image_token=IMAGE_TOKEN,
                                    image_seq_length=IMAGE_SEQ_LENGTH, max_text_tokens=MAX_TEXT_TOKENS)
    speech_tok = load_tokenizer(spec["tokenizer"])
    start = speech_tok.bos_token_id if speech_tok.bos_token_id is not None else speech_tok.eos_token_id
    speech = SpeechCollator(speech_tok, build_feature_extractor(), MAX_TARGET_TOKENS, start)
    return vision, speech


def _ours_loader(data_dir: str, modality: str, collate, workers: int, batches: int):
    from training.data.media_loader import MediaLoader, MediaLoaderConfig

    cfg = MediaLoaderConfig(data_dir, global_batch_size=BATCH, micro_batch_size=BATCH, seed=0,
                            samples_per_epoch=_long_epoch(batches), num_workers=workers, modalities=(modality,))
    return MediaLoader(cfg, collate)


def run_ours_images(spec: Spec, run_dir: Path) -> Prepared:
    vision, _ = ours_collators(spec)
    data_dir = str(Path(spec["sets"]["features"]) / "webdataset")

    def pipeline(workers: int):
        loader = _ours_loader(data_dir, "image", vision, workers, spec["image_batches"])
        return (b["pixel_values"] for b in loader)

    return _image_work(spec, pipeline)


def run_ours_audio(spec: Spec, run_dir: Path) -> Prepared:
    _, speech = ours_collators(spec)
    dirs = {"precomputed": str(Path(spec["sets"]["features"]) / "webdataset"),
            "decoded": str(Path(spec["sets"]["nofeatures"]) / "webdataset")}

    def pipeline(path: str, workers: int):
        loader = _ours_loader(dirs[path], "audio", speech, workers, spec["audio_batches"])
        return (b["input_features"] for b in loader)

    return _audio_work(spec, pipeline)


# -- peers: per-batch functions (module level: they pickle into the DataLoader workers) ----------------
class PixelBatch:
    """A list of PIL images (or rows whose first field is one) -> [B, 3, 224, 224] float32 tensor."""

    def __init__(self) -> None:
        self.processor = image_processor()

    def __call__(self, images) -> Any:
        import torch

        images = [im[0] if isinstance(im, tuple) else im for im in images]
        return torch.from_numpy(self.processor(images=images, return_tensors="np")["pixel_values"])


class FeatureBatch:
    """FLAC bytes of a batch -> [B, 80, 3000] float32 tensor: soundfile + WhisperFeatureExtractor."""

    def __init__(self) -> None:
        from transformers import WhisperFeatureExtractor

        self.extractor = WhisperFeatureExtractor()

    def __call__(self, blobs) -> Any:
        import io

        import numpy as np
        import soundfile as sf
        import torch

        rate = self.extractor.sampling_rate
        clips = []
        for b in blobs:
            b = b[0] if isinstance(b, tuple) else b
            x, sr = sf.read(io.BytesIO(b), dtype="float32", always_2d=True)
            x = x[:, 0] if x.shape[1] == 1 else x.mean(axis=1)
            if sr != rate:
                import soxr

                x = soxr.resample(x, sr, rate).astype(np.float32)
            clips.append(x)
        return torch.from_numpy(self.extractor(clips, sampling_rate=rate, return_tensors="np")["input_features"])


def _stack_npy(rows) -> Any:
    import numpy as np
    import torch

    return torch.from_numpy(np.stack([r[0] if isinstance(r, tuple) else r for r in rows]).astype(np.float32))


class _HFImageTransform:
    def __init__(self) -> None:
        self.pixels = PixelBatch()

    def __call__(self, batch: dict) -> dict:
        return {"pixel_values": self.pixels(batch["image"])}


class _HFAudioTransform:
    def __init__(self) -> None:
        self.features = FeatureBatch()

    def __call__(self, batch: dict) -> dict:
        return {"input_features": self.features([a["bytes"] for a in batch["audio"]])}


def _stack_key(key: str):
    return _StackKey(key)


class _StackKey:
    def __init__(self, key: str) -> None:
        self.key = key

    def __call__(self, rows: list[dict]) -> Any:
        import numpy as np
        import torch

        values = [r[self.key] for r in rows]
        if isinstance(values[0], torch.Tensor):
            return torch.stack(values)
        return torch.from_numpy(np.stack(values).astype(np.float32, copy=False))


def run_webdataset_images(spec: Spec, run_dir: Path) -> Prepared:
    import webdataset as wds
    from torch.utils.data import DataLoader

    collate = PixelBatch()

    def pipeline(workers: int):
        ds = (wds.WebDataset(spec["image_tars"], shardshuffle=False, empty_check=False)
              .shuffle(SHUFFLE_BUFFER).decode("pil").to_tuple("png")
              .batched(BATCH, collation_fn=collate, partial=False).repeat())
        return iter(DataLoader(ds, batch_size=None, num_workers=workers))

    return _image_work(spec, pipeline)


def run_webdataset_audio(spec: Spec, run_dir: Path) -> Prepared:
    import webdataset as wds
    from torch.utils.data import DataLoader

    features = FeatureBatch()

    def pipeline(path: str, workers: int):
        ds = wds.WebDataset(spec["audio_tars"][path], shardshuffle=False, empty_check=False).shuffle(SHUFFLE_BUFFER)
        if path == "precomputed":  # the stored .npy member, decoded by webdataset's default handler
            ds = ds.decode().to_tuple("input_features.npy").batched(BATCH, collation_fn=_stack_npy, partial=False)
        else:  # FLAC bytes as stored, decoded in the collation
            ds = ds.to_tuple("flac").batched(BATCH, collation_fn=features, partial=False)
        return iter(DataLoader(ds.repeat(), batch_size=None, num_workers=workers))

    return _audio_work(spec, pipeline)


def _hf_loader(ds, workers: int, batches: int, key: str):
    import torch
    from torch.utils.data import DataLoader, RandomSampler

    sampler = RandomSampler(ds, replacement=False, num_samples=_long_epoch(batches),
                            generator=torch.Generator().manual_seed(0))
    return iter(DataLoader(ds, batch_size=BATCH, sampler=sampler, num_workers=workers, collate_fn=_stack_key(key)))


def run_datasets_images(spec: Spec, run_dir: Path) -> Prepared:
    import datasets

    ds = datasets.Dataset.from_parquet(spec["image_parquet"], cache_dir=str(run_dir / "hf-cache"))
    if not isinstance(ds.features["image"], datasets.Image):
        raise BenchmarkError(f"the Parquet files' embedded features give image {ds.features['image']}, not Image()")
    ds.set_transform(_HFImageTransform(), columns=["image"])

    def pipeline(workers: int):
        return _hf_loader(ds, workers, spec["image_batches"], "pixel_values")

    return _image_work(spec, pipeline)


def run_datasets_audio(spec: Spec, run_dir: Path) -> Prepared:
    import datasets

    pre = datasets.Dataset.from_parquet(spec["audio_parquet"]["precomputed"], cache_dir=str(run_dir / "hf-cache"))
    pre = pre.with_format("numpy", columns=["input_features"])
    dec = datasets.Dataset.from_parquet(spec["audio_parquet"]["decoded"], cache_dir=str(run_dir / "hf-cache"))
    dec = dec.cast_column("audio", datasets.Audio(decode=False))
    dec.set_transform(_HFAudioTransform(), columns=["audio"])
    sets = {"precomputed": pre, "decoded": dec}

    def pipeline(path: str, workers: int):
        return _hf_loader(sets[path], workers, spec["audio_batches"], "input_features")

    return _audio_work(spec, pipeline)


# -- the benchmarks -----------------------------------------------------------------------------------
def _rate(run: str):
    return lambda r, s: r["runs"][run]["per_s"]


def _batches(r: Record, s: Spec) -> float:
    return sum(run["batches"] for run in r["runs"].values())


def check(ours: Record, peer: Record) -> None:
    if _batches(ours, {}) != _batches(peer, {}):
        raise BenchmarkError(f"the sides timed different batch counts: {_batches(ours, {})} vs {_batches(peer, {})}")


IMAGE_METRICS = (
    *(Metric(f"images/s, {w} workers", "/s", True, _rate(str(w)), "{:,.0f}") for w in WORKERS),
    peak_rss_metric(),
    cpu_seconds_metric(),
    Metric("batches timed", "", None, _batches, "{:,.0f}", must_match=True),
)
AUDIO_METRICS = (
    *(Metric(f"clips/s, {p}, {w} workers", "/s", True, _rate(f"{p}/{w}"), "{:,.0f}")
      for p in AUDIO_PATHS for w in WORKERS),
    peak_rss_metric(),
    cpu_seconds_metric(),
    Metric("batches timed", "", None, _batches, "{:,.0f}", must_match=True),
)
OURS_IMAGES = ("training.data.MediaLoader (webdataset tars, pread per member) + VisionLanguageCollator "
               "(CLIP processor; also tokenizes the chat text: input_ids, attention_mask, labels)")
OURS_AUDIO = ("training.data.MediaLoader (webdataset tars) + SpeechCollator (stored features, or soundfile + "
              "WhisperFeatureExtractor; also tokenizes the transcripts: labels, decoder inputs)")


def _bench(name: str, kind: str, peer, peer_label: str, package: str) -> Benchmark:
    images = kind == "images"
    return Benchmark(
        name=name,
        description=(f"shuffled batches of {BATCH} " + (f"images -> pixel_values [{BATCH}, 3, {IMAGE_SIZE}, "
                                                         f"{IMAGE_SIZE}] float32" if images else
                                                         f"clips -> input_features [{BATCH}, 80, 3000] float32 "
                                                         f"(precomputed and decoded)")
                     + ", 0 and 2 DataLoader workers"),
        ours_label=OURS_IMAGES if images else OURS_AUDIO,
        peer_label=peer_label,
        prepare=prepare,
        ours=run_ours_images if images else run_ours_audio,
        peer=peer,
        metrics=IMAGE_METRICS if images else AUDIO_METRICS,
        packages=("torch", "transformers", "pillow", "soundfile", package),
        check=check,
        targets=(Target("images/s, 2 workers", f"at least 1.5x {package} with 2 workers", min_ratio=1.5),)
        if images else (),
        env=ENV,
        describe=describe_images if images else describe_audio,
    )


BENCHMARKS = (
    _bench("media_loader_images_webdataset", "images", run_webdataset_images,
           f"webdataset WebDataset(tars, shardshuffle=False).shuffle({SHUFFLE_BUFFER}).decode('pil').batched({BATCH}, "
           f"CLIP processor).repeat() in a DataLoader(batch_size=None)", "webdataset"),
    _bench("media_loader_images_datasets", "images", run_datasets_images,
           f"datasets Dataset.from_parquet (Image() feature) + set_transform(CLIP processor) in a "
           f"DataLoader(batch_size={BATCH}, random sampler)", "datasets"),
    _bench("media_loader_audio_webdataset", "audio", run_webdataset_audio,
           f"webdataset WebDataset(tars, shardshuffle=False).shuffle({SHUFFLE_BUFFER}): .decode() of the .npy "
           f"features, or FLAC bytes + soundfile + WhisperFeatureExtractor per batch", "webdataset"),
    _bench("media_loader_audio_datasets", "audio", run_datasets_audio,
           f"datasets Dataset.from_parquet: with_format('numpy') input_features, or Audio(decode=False) + "
           f"set_transform(soundfile + WhisperFeatureExtractor); DataLoader(batch_size={BATCH}, random sampler)",
           "datasets"),
)
