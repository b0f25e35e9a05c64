"""Images -> WebDataset media shards: our images room + media-shard writer vs a plain Pillow +
`webdataset.ShardWriter` loop.

Input (`--corpus`, the multimodal data of `../shared/data/build_multimodal.sh`, e.g. /work/mm):

- `media_images`: `images/emoji/*.png` (3,786 64 px RGBA PNGs), captions from `images.jsonl` (its
  `file` and `caption` fields; "" for a file it does not name). `MEDIA_BENCH_IMAGES=N` takes the first
  N files in name order (peak RSS at 1,000 vs all 3,786 shows whether memory grows with the input).
- `media_images_sheets`: `sheets/*.png` (a few large palette sprite sheets, 1116-4092 px), caption "".

Both sides read each file's bytes inside the timed loop (the parent read every file once first, so both
find them in the page cache), one image at a time, single process, and write one tar shard into the run
directory:

- ours: `platform_assets.media.images.prepare_image(data, ImageSettings())` (size and bomb limits, full
  decode, PNG CRC check, EXIF orientation, alpha composited on white, RGB PNG at the room's encoder
  settings, luma_std and the 64-bit perceptual hash), then the media-shard path of the `media_shards`
  stage: the document id (`schema.document_id`), the item's sha256 (`PreparedMedia.item`), the sample
  record (`samples.sample_record`) as `<key>.json`, then what `stage.write_media_shards` does per sample,
  `MediaSetWriter.add` (the `webdataset` format only) and `MediaCounts.add`, in one staged set of a
  `Storage` (index.json written, manifest, atomic commit). Members per sample: `<key>.png`, `<key>.txt`,
  `<key>.json`. The stage builds its `MediaSample`s from Arrow rows (`samples.media_samples`); here they
  are built from the room's result directly, with the same `sample_record`: the tar is written by the
  stage's own writer, not a copy of it.
- peer: the Pillow work a plain loader script does, per image: `Image.open(BytesIO(b)); im.verify()`;
  open again, `im.load()`, `im.convert("RGB")`, `im.save(buf, "PNG")` (Pillow's defaults; JPEG sources
  saved as JPEG), then `webdataset.ShardWriter.write({"__key__", "png", "txt"})`. No perceptual hash,
  no JSON record, no id or sha256, and `convert("RGB")` drops alpha instead of compositing it: the peer
  does less than ours.

Samples written are counted from each side's tar afterwards (untimed) and must be equal.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    MB,
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

SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp", ".tif", ".tiff")
SOURCE = "bench"
SHARD_MAX_SAMPLES = 10_000  # media_shards' defaults, for both sides' shard cuts
SHARD_MAX_BYTES = 256 * 2**20
ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # single process, one core


# -- input -----------------------------------------------------------------------------------------
def _captions(corpus: Path) -> dict[str, str]:
    manifest = corpus / "images.jsonl"
    out: dict[str, str] = {}
    if manifest.is_file():
        with open(manifest, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    out[str((corpus / row["file"]).resolve())] = row.get("caption") or ""
    return out


def _prepare(corpus: Path, run_dir: Path, folder: str, limit_env: str | None) -> Spec:
    root = corpus / folder
    files = sorted(p for p in root.glob("*") if p.is_file() and p.suffix.lower() in SUFFIXES) if root.is_dir() else []
    if not files:
        raise BenchmarkError(f"no images ({', '.join(SUFFIXES)}) in {root}")
    limit = int(os.environ.get(limit_env, "0") or 0) if limit_env else 0
    if limit > 0:
        files = files[:limit]
    captions = _captions(corpus)
    items, total = [], 0
    for p in files:
        total += len(p.read_bytes())  # also warms the page cache for both sides
        items.append({"path": str(p), "uri": f"{folder}/{p.name}", "caption": captions.get(str(p.resolve()), "")})
    listing = run_dir / "images.json"
    listing.write_text(json.dumps(items))
    return {"corpus": str(corpus), "folder": folder, "listing": str(listing), "images": len(items),
            "input_bytes": total, "captioned": sum(1 for i in items if i["caption"])}


def prepare_emoji(corpus: Path, run_dir: Path) -> Spec:
    return _prepare(corpus, run_dir, "images/emoji", "MEDIA_BENCH_IMAGES")


def prepare_sheets(corpus: Path, run_dir: Path) -> Spec:
    return _prepare(corpus, run_dir, "sheets", None)


def describe(spec: Spec) -> str:
    return (f"{spec['images']:,} images under {spec['folder']}/, {spec['input_bytes'] / MB:,.1f} MB, "
            f"{spec['captioned']:,} with captions")


def _items(spec: Spec) -> list[dict[str, str]]:
    return json.loads(Path(spec["listing"]).read_text())


def count_tar_samples(paths: list[Path]) -> tuple[int, int]:
    """(samples, bytes) of tar shards: a sample is a regular member whose suffix is an image extension.
    Walks the 512-byte member headers itself, keeping nothing (tarfile keeps a TarInfo per member, which
    would put ~3 KB per sample into the child's peak RSS)."""
    samples = size = 0
    for p in paths:
        size += p.stat().st_size
        with open(p, "rb") as f:
            while (head := f.read(512)) and head.strip(b"\0"):
                name = head[:100].rstrip(b"\0").decode("utf-8", "replace")
                length = int(head[124:136].strip(b"\0 ") or b"0", 8)
                if head[156:157] in (b"0", b"\0") and name.rsplit(".", 1)[-1] in ("png", "jpg", "webp"):
                    samples += 1
                f.seek(length + (-length % 512), 1)
    return samples, size


# -- ours ------------------------------------------------------------------------------------------
def run_ours(spec: Spec, run_dir: Path) -> Prepared:
    from platform_assets.contracts import DEFAULT_IO
    from platform_assets.media.errors import MediaRejected
    from platform_assets.media.images import prepare_image
    from platform_assets.media.settings import ImageSettings
    from platform_assets.media_shards.formats import MediaSetHeader, get_format
    from platform_assets.media_shards.samples import EXTENSIONS, MediaSample, sample_record
    from platform_assets.media_shards.settings import MediaShardSettings
    from platform_assets.media_shards.stage import MediaSetWriter
    from platform_assets.media_shards.stats import MediaCounts
    from platform_assets.schema import MEDIA_MEASURED_FIELDS, document_id
    from platform_assets.storage import Storage

    items = _items(spec)
    image_settings = ImageSettings()
    shard_settings = MediaShardSettings(formats=["webdataset"], audio_features="none",
                                        shard_max_samples=SHARD_MAX_SAMPLES, shard_max_bytes=SHARD_MAX_BYTES)
    header = MediaSetHeader(audio_features=False)
    storage = Storage(str(run_dir / "store"))
    fmt = get_format("webdataset")
    prepare_image(Path(items[0]["path"]).read_bytes(), image_settings)  # first-call costs (scipy's DCT plan), untimed

    def work():
        rejected: dict[str, int] = {}
        counts = MediaCounts()
        with storage.staged_dir("media_shards") as staged:
            writer = MediaSetWriter(staged, [fmt], header, shard_settings, DEFAULT_IO.batch_bytes)
            for it in items:
                data = Path(it["path"]).read_bytes()
                try:
                    prepared = prepare_image(data, image_settings)
                except MediaRejected as e:
                    rejected[e.reason.value] = rejected.get(e.reason.value, 0) + 1
                    continue
                item = prepared.item(it["uri"])
                doc_id = document_id(SOURCE, it["uri"], it["caption"], [item["sha256"]])
                row = {"id": doc_id, "source": SOURCE, "split": "train", "modality": "image", "uri": it["uri"],
                       "license": None, "ingested_at": None, "meta": None}
                sample = MediaSample(
                    id=doc_id, split="train", source=SOURCE, modality="image", kind="image", text=it["caption"],
                    ext=EXTENSIONS[prepared.mime], data=prepared.data,
                    measured={n: item.get(n) for n in MEDIA_MEASURED_FIELDS}, record=sample_record(row, item))
                writer.add(sample)
                counts.add(sample)
            indexes = writer.close()
        return indexes["webdataset"], rejected

    def finish(result) -> dict[str, Any]:
        index, rejected = result
        tars = sorted((run_dir / "store" / "media_shards" / "webdataset").rglob("*.tar"))
        samples, size = count_tar_samples(tars)
        if samples != index["totals"]["samples"]:
            raise BenchmarkError(f"ours: index.json says {index['totals']['samples']} samples, tars hold {samples}")
        return {"samples": samples, "tar_bytes": size, "shards": len(tars), "rejected": rejected}

    return Prepared(work, finish)


# -- peer ------------------------------------------------------------------------------------------
def run_peer(spec: Spec, run_dir: Path) -> Prepared:
    import io

    import webdataset as wds
    from PIL import Image

    items = _items(spec)
    out = run_dir / "peer"
    out.mkdir()

    def work():
        n = 0
        with wds.ShardWriter(str(out / "shard-%05d.tar"), maxcount=SHARD_MAX_SAMPLES, maxsize=SHARD_MAX_BYTES,
                             verbose=0) as sink:
            for it in items:
                b = Path(it["path"]).read_bytes()
                im = Image.open(io.BytesIO(b))
                im.verify()
                im = Image.open(io.BytesIO(b))
                im.load()
                jpeg = im.format == "JPEG"
                im = im.convert("RGB")
                buf = io.BytesIO()
                im.save(buf, "JPEG" if jpeg else "PNG")
                sink.write({"__key__": f"{n:08d}", "jpg" if jpeg else "png": buf.getvalue(), "txt": it["caption"]})
                n += 1
        return n

    def finish(n) -> dict[str, Any]:
        tars = sorted(out.glob("*.tar"))
        samples, size = count_tar_samples(tars)
        if samples != n:
            raise BenchmarkError(f"peer: wrote {n} samples, tars hold {samples}")
        return {"samples": samples, "tar_bytes": size, "shards": len(tars), "rejected": {}}

    return Prepared(work, finish)


# -- comparison ------------------------------------------------------------------------------------
def check(ours: Record, peer: Record) -> None:
    if ours["samples"] != peer["samples"]:
        raise BenchmarkError(f"samples differ: ours {ours['samples']:,} (rejected: {ours['rejected'] or 'none'}), "
                             f"peer {peer['samples']:,}; the figures are not comparable")


METRICS = (
    Metric("images/s", "images/s", True, lambda r, s: r["samples"] / r["seconds"], "{:,.1f}"),
    Metric("images per CPU-s", "images/CPU-s", True, lambda r, s: r["samples"] / r["cpu_seconds"], "{:,.1f}"),
    Metric("wall time", "s", False, lambda r, s: r["seconds"], "{:,.2f}"),
    cpu_seconds_metric(),
    Metric("cores used", "CPU s / wall s", None, lambda r, s: r["cpu_seconds"] / r["seconds"], "{:.2f}"),
    peak_rss_metric(),
    Metric("RSS after setup", "MB", None, lambda r, s: (r["rss_after_setup_bytes"] or 0) / MB, "{:,.0f}"),
    Metric("tar size", "MB", None, lambda r, s: r["tar_bytes"] / MB, "{:,.1f}"),
    Metric("samples", "", None, lambda r, s: r["samples"], "{:,.0f}", must_match=True),
)
OURS_LABEL = ("platform_assets.media.images.prepare_image (verify, bomb limit, EXIF, RGB compositing, PNG, "
              "phash) + media_shards MediaSetWriter, webdataset format (png, txt, json members)")
PEER_LABEL = ("Pillow open+verify, open+load+convert('RGB')+save PNG (defaults) + "
              "webdataset.ShardWriter.write({__key__, png, txt})")
PACKAGES = ("platform-assets", "pillow", "imagehash", "scipy", "numpy", "webdataset")
TARGETS = (Target("images per CPU-s", "images per CPU-second (per core) at least 2x the peer's", min_ratio=2.0),)

BENCHMARKS = (
    Benchmark(name="media_images", description="64 px emoji PNGs -> validated, normalised WebDataset media shard",
              ours_label=OURS_LABEL, peer_label=PEER_LABEL, prepare=prepare_emoji, ours=run_ours, peer=run_peer,
              metrics=METRICS, packages=PACKAGES, check=check, targets=TARGETS, env=ENV, describe=describe),
    Benchmark(name="media_images_sheets", description="large sprite-sheet PNGs -> validated, normalised WebDataset "
              "media shard", ours_label=OURS_LABEL, peer_label=PEER_LABEL, prepare=prepare_sheets, ours=run_ours,
              peer=run_peer, metrics=METRICS, packages=PACKAGES, check=check, targets=TARGETS, env=ENV,
              describe=describe),
)
