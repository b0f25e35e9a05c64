"""Config of the packing stage: the `packing:` key of the pipeline config."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from platform_assets.contracts import StrictModel
from platform_assets.packing.formats import FORMATS, format_names
from platform_assets.packing.pieces import Overlong
from platform_assets.packing.strategies import Strategy

SHARD_FORMATS: tuple[str, ...] = FORMATS  # the default formats (packing/formats/__init__.py; lance is opt-in)


class PackingSettings(StrictModel):
    seq_len: Annotated[int, Field(ge=2)] = 2048
    """Token positions per sample. At least 2: a sample of one token has no next-token target."""
    strategy: Strategy = "best_fit_decreasing"
    """How pieces are assigned to samples (platform_assets/packing/strategies.py). Non-padding on the
    real corpus at 2048 (GPT-2 tokens; overlong split / filter): best_fit_decreasing 99.999% / 99.992%,
    streaming_best_fit 99.89% / 99.43%, window 99.95% / 99.38%, first_fit 99.79% / 98.68%, none
    82.6% / 37.1%. Offline strategies hold one set's lengths in memory (8 bytes a document) and lay
    out at most `max_pieces_in_memory` pieces at once."""
    overlong: Overlong = "split"
    """A document longer than seq_len: `split` into full seq_len samples plus a remainder packed like
    any document, or `filter` (dropped and listed in _exclusions)."""
    window: Annotated[int, Field(ge=1)] = 1000
    """Documents per window of the `window` strategy (best-fit decreasing within each window)."""
    max_open_sequences: Annotated[int, Field(ge=1)] = 1000
    """Bound on the samples `streaming_best_fit` keeps open. 1000 because the corpus's length
    distribution stops gaining there: over 40 shuffled copies of its GPT-2 lengths, only documents
    that fit (799k documents, 607 M tokens, ~299k samples), the streamed layouts (before finish()'s
    re-pack of what is still open) are 99.03% non-padding at 100 open and 99.105% at 1000, 2000, 4000
    and 16000 alike (the same number of samples): past ~1000 the bound stops binding and online best
    fit itself is the limit. With the re-pack: 100 -> 99.03%, 1000 -> 99.12%, 16000 -> 99.32% (it
    re-packs the last 5% of the stream); with overlong documents split, 99.84% / 99.85% / 99.87%.
    Memory at 1000 open: 0.6 MB of Python objects (tracemalloc, after the whole corpus)."""
    formats: tuple[str, ...] = SHARD_FORMATS
    """Shard formats to write, any non-empty subset of the registered formats (flat, parquet,
    webdataset, lance); kept in registry order (whatever order the config lists them in), so equal sets
    give byte-identical indexes. Default: flat, parquet, webdataset; `lance` is opt-in because its
    datasets hold the same rows but not the same bytes on every build (UUID file names, commit times:
    SHARD_FORMAT.md), which would change the set's DVC md5 on every run."""
    samples_per_shard: Annotated[int, Field(ge=1)] = 8192
    """8192 samples x 2048 tokens x 2 bytes (uint16) = 32 MiB of tokens per flat shard."""
    max_tokens_in_memory: Annotated[int, Field(ge=1)] = 256 * 2**20
    """Offline strategies: tokens of the sets of a pass held in memory together (4 bytes each, +1 with
    loss masks), and never more than a quarter of an io batch's worth (`io.batch_bytes` / 4 / those
    bytes: 4 Mi tokens at 64 MiB), so the stage stays within the io budget whatever the input. A set
    larger than that is spilled to a file under `spill_dir` and each run of 1024 samples reads its
    pieces back (token_store.py): the same layout, the same bytes."""
    max_pieces_in_memory: Annotated[int, Field(ge=1)] = 65_536
    """Offline strategies: pieces placed at once. A set of more is packed in consecutive windows of
    whole documents of at most this many pieces, each window on its own with its samples closed at
    its end (packing/windows.py), so the layout's memory (~200-300 bytes a piece while it is made and
    checked: ~20 MB here) does not grow with the set. 65,536 holds every set of the real corpus (its
    largest, train/text, has 29,465 pieces at 2048); a larger set loses a few partly filled samples per
    window under best_fit_decreasing (the whole corpus x16 packed in windows: see benchmarks/RESULTS.md).
    The `window` and `none` layouts do not depend on it."""
    spill_dir: str | None = Field(default=None, exclude=True)
    """Where the stage's spill files go (default: the system's temp directory): the provenance rows
    until they are written, and with offline strategies every set's ids and a set's tokens larger
    than the in-memory cap; removed when the stage ends. Not part of index.json's `packing` (where
    they wait does not change a byte of the shards)."""
    pad_id: Annotated[int, Field(ge=0)] | None = None
    """Token written after the last segment of a sample; None: the tokenizer's pad id."""

    @field_validator("formats")
    @classmethod
    def _formats_set(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        registered = format_names()
        if not value:
            raise ValueError(f"at least one shard format is needed: any of {', '.join(registered)}")
        unknown = [f for f in value if f not in registered]
        if unknown:
            raise ValueError(f"unknown shard format {', '.join(map(repr, unknown))}; "
                             f"registered: {', '.join(registered)}")
        twice = sorted({f for f in value if value.count(f) > 1})
        if twice:
            raise ValueError(f"format listed more than once: {', '.join(twice)}")
        return tuple(f for f in registered if f in value)
