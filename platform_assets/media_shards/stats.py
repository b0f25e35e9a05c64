"""What a media shard set holds, counted sample by sample: per modality, split and (split, source),
bytes, and the image-size and audio-duration histograms the asset charts.

Histogram buckets are fixed edges (not quantiles of the data), so the counts of two runs, or of two
sets, add up and compare bucket for bucket.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field

from platform_assets.contracts import Counts
from platform_assets.media_shards.samples import MediaSample

# Image sides in pixels, powers of two: thumbnails (< 64) to scans and photos (>= 4096).
IMAGE_SIDE_EDGES = (64, 128, 256, 512, 1024, 2048, 4096)
# Clip durations in seconds: 30 s is Whisper's window (longer clips are cut by its features).
DURATION_EDGES = (1, 5, 10, 30, 60, 300)


def bucket_labels(edges: tuple[float, ...], unit: str = "") -> list[str]:
    """Labels of the buckets below, between and above `edges`, in order."""
    inner = [f"{lo:g}-{hi:g}{unit}" for lo, hi in zip(edges, edges[1:], strict=False)]
    return [f"<{edges[0]:g}{unit}", *inner, f">={edges[-1]:g}{unit}"]


def bucket(value: float, edges: tuple[float, ...], unit: str = "") -> str:
    return bucket_labels(edges, unit)[bisect_right(edges, value)]


def ordered(counts: dict[str, int], edges: tuple[float, ...], unit: str = "") -> tuple[list[str], list[int]]:
    """(labels, counts) of every bucket from the first to the last non-empty one, empty ones as 0."""
    labels = bucket_labels(edges, unit)
    used = [i for i, label in enumerate(labels) if counts.get(label)]
    if not used:
        return [], []
    span = labels[used[0] : used[-1] + 1]
    return span, [counts.get(label, 0) for label in span]


@dataclass
class MediaCounts(Counts):
    samples: int = 0
    modalities: Counter = field(default_factory=Counter)  # image | pdf | audio -> samples
    splits: Counter = field(default_factory=Counter)  # split -> samples
    sets: Counter = field(default_factory=Counter)  # "split/source" -> samples
    text_documents: int = 0  # skipped: text and html go to the token shards
    excluded: Counter = field(default_factory=Counter)  # rule -> media documents not sharded
    extra_items: int = 0  # media items after the first of a document's kind (not sharded)
    media_bytes: int = 0  # the images', pages' and clips' own bytes
    payload_bytes: int = 0  # + text, JSON and input_features: what shards are cut on
    audio_features: int = 0  # samples with Whisper input_features
    audio_seconds: float = 0.0
    image_widths: Counter = field(default_factory=Counter)  # bucket label -> images and pages
    image_heights: Counter = field(default_factory=Counter)
    audio_durations: Counter = field(default_factory=Counter)  # bucket label -> clips

    def add(self, s: MediaSample) -> None:
        self.samples += 1
        self.modalities[s.modality] += 1
        self.splits[s.split] += 1
        self.sets[f"{s.split}/{s.source}"] += 1
        self.media_bytes += len(s.data)
        self.payload_bytes += s.payload_bytes
        self.audio_features += s.features is not None
        m = s.measured
        if s.kind == "audio":
            if m["duration_s"] is not None:
                self.audio_seconds += m["duration_s"]
                self.audio_durations[bucket(m["duration_s"], DURATION_EDGES, " s")] += 1
        else:
            if m["width"] is not None:
                self.image_widths[bucket(m["width"], IMAGE_SIDE_EDGES)] += 1
            if m["height"] is not None:
                self.image_heights[bucket(m["height"], IMAGE_SIDE_EDGES)] += 1
