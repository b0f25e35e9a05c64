"""The `media_shards:` config section."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from platform_assets.contracts import StrictModel


class MediaShardSettings(StrictModel):
    formats: list[Literal["webdataset", "parquet"]] = ["webdataset", "parquet"]
    """Each format is a complete copy of the media samples (WebDataset tars for streaming loaders,
    Parquet with binary columns for `datasets` and DuckDB)."""
    shard_max_bytes: Annotated[int, Field(gt=0)] = 256 * 2**20
    shard_max_samples: Annotated[int, Field(gt=0)] = 10_000
    audio_features: Literal["none", "whisper"] = "whisper"
    """`whisper`: each audio sample also carries Whisper's `input_features` (80 x 3000 log-Mel)."""
