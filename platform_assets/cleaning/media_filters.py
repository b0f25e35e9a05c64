"""Filters on what ingest measured of each media item: no image, page or clip is decoded again.

`images` (images and rendered PDF pages): `min_side` ("24 < 32": too small to learn from), `max_side`,
`aspect_ratio` (long side / short side: banners, scrollbars), `blank` (luminance std deviation: a
white page or a solid-colour image). `audio`: `too_short`, `too_long`, `silent` (share of silent
20 ms frames), `clipped` (share of samples at full scale). Each removal keeps its rule and the
measured value, like every other step; a document outside the step's modalities passes untouched.
Vectorised over the first media item of each row (a document of schema v3 has one).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from platform_assets.cleaning.settings import AudioFilterSettings, ImageFilterSettings
from platform_assets.cleaning.steps import Step, StepResult, StepStats, assemble_result, fmt, text_bytes

Rule = tuple[str, Callable[[dict[str, pa.Array]], pa.Array | None], Callable[[dict[str, object]], str]]


def _first_items(batch: pa.RecordBatch, fields: tuple[str, ...]) -> dict[str, pa.Array]:
    """{field: value of the row's first media item, null where the row has none}."""
    if "media" not in batch.schema.names:
        return {f: pa.nulls(batch.num_rows, pa.float64()) for f in fields}
    first = pc.list_element(pc.if_else(pc.greater(pc.list_value_length(batch.column("media")), 0),
                                       batch.column("media"), pa.scalar(None, batch.column("media").type)), 0)
    return {f: pc.struct_field(first, f) for f in fields}


class _MediaFilter(Step):
    fields: tuple[str, ...] = ()

    def __init__(self, settings):
        self.settings = settings

    def rules(self) -> list[Rule]:
        raise NotImplementedError

    def __call__(self, batch: pa.RecordBatch) -> StepResult:
        started = time.perf_counter()
        stats = StepStats(self.name)
        sizes = [x or 0 for x in text_bytes(batch.column("text"))]
        modality = batch.column("modality")
        in_scope = pc.is_in(modality, value_set=pa.array(self.settings.modalities, modality.type)).fill_null(False)
        stats.skipped += batch.num_rows - pc.sum(in_scope).as_py() if batch.num_rows else 0
        drops: list[tuple[int, str, str | None]] = []
        if pc.any(in_scope).as_py():
            values = _first_items(batch, self.fields)
            decided = pc.invert(in_scope)
            for name, test, describe in self.rules():
                hit = test(values)
                if hit is None:
                    continue
                hit = pc.and_(pc.fill_null(hit, False), pc.invert(decided))  # first matching rule wins
                for row in pc.indices_nonzero(hit).to_pylist():
                    drops.append((row, self.rule(name), describe({f: values[f][row].as_py() for f in self.fields})))
                decided = pc.or_(decided, hit)
        drops.sort()
        return assemble_result(self, batch, drops, sizes, stats=stats, started=started)


class ImageFilter(_MediaFilter):
    name = "images"
    fields = ("width", "height", "luma_std")

    def rules(self) -> list[Rule]:
        s: ImageFilterSettings = self.settings
        out: list[Rule] = []
        if s.min_side is not None:
            out.append(("min_side", lambda v: pc.less(pc.min_element_wise(v["width"], v["height"]), s.min_side),
                        lambda r: f"{min(r['width'], r['height'])} < {s.min_side}"))
        if s.max_side is not None:
            out.append(("max_side", lambda v: pc.greater(pc.max_element_wise(v["width"], v["height"]), s.max_side),
                        lambda r: f"{max(r['width'], r['height'])} > {s.max_side}"))
        if s.max_aspect_ratio is not None:
            def ratio(v):
                long = pc.cast(pc.max_element_wise(v["width"], v["height"]), pa.float64())
                short = pc.cast(pc.max_element_wise(pc.min_element_wise(v["width"], v["height"]), 1), pa.float64())
                return pc.divide(long, short)
            out.append(("aspect_ratio", lambda v: pc.greater(ratio(v), s.max_aspect_ratio),
                        lambda r: f"{fmt(max(r['width'], r['height']) / max(1, min(r['width'], r['height'])))} "
                                  f"> {fmt(s.max_aspect_ratio)}"))
        if s.min_luma_std is not None:
            out.append(("blank", lambda v: pc.less(v["luma_std"], s.min_luma_std),
                        lambda r: f"{fmt(r['luma_std'])} < {fmt(s.min_luma_std)}"))
        return out


class AudioFilter(_MediaFilter):
    name = "audio"
    fields = ("duration_s", "silent_fraction", "clipped_fraction")

    def rules(self) -> list[Rule]:
        s: AudioFilterSettings = self.settings
        out: list[Rule] = []
        if s.min_duration_s is not None:
            out.append(("too_short", lambda v: pc.less(v["duration_s"], s.min_duration_s),
                        lambda r: f"{fmt(r['duration_s'])} s < {fmt(s.min_duration_s)}"))
        if s.max_duration_s is not None:
            out.append(("too_long", lambda v: pc.greater(v["duration_s"], s.max_duration_s),
                        lambda r: f"{fmt(r['duration_s'])} s > {fmt(s.max_duration_s)}"))
        if s.max_silent_fraction is not None:
            out.append(("silent", lambda v: pc.greater(v["silent_fraction"], s.max_silent_fraction),
                        lambda r: f"{fmt(r['silent_fraction'])} > {fmt(s.max_silent_fraction)}"))
        if s.max_clipped_fraction is not None:
            out.append(("clipped", lambda v: pc.greater(v["clipped_fraction"], s.max_clipped_fraction),
                        lambda r: f"{fmt(r['clipped_fraction'])} > {fmt(s.max_clipped_fraction)}"))
        return out
