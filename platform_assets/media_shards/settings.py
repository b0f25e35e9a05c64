"""The `media_shards:` config section."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from platform_assets.contracts import StrictModel


class MediaShardSettings(StrictModel):
    formats: list[Literal["webdataset", "parquet"]] = ["webdataset", "parquet"]
    """Each format is a complete copy of the media samples (WebDataset tars for streaming loaders,
    Parquet with binary columns for `datasets` and DuckDB); the names of media_shards/formats/'s registry."""
    shard_max_bytes: Annotated[int, Field(gt=0)] = 256 * 2**20
    """A shard closes before a sample would take its payload (media + text + JSON + features) past this;
    a tar adds 512 B of header and < 512 B of padding per member (3 or 4 members a sample); Parquet
    stores less than the payload (zstd on everything but the media bytes)."""
    shard_max_samples: Annotated[int, Field(gt=0)] = 10_000
    audio_features: Literal["none", "whisper"] = "whisper"
    """`whisper`: each audio sample also carries Whisper's `input_features` (80 x 3000 log-Mel)."""

    @field_validator("formats")
    @classmethod
    def _formats_set(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("at least one media shard format is needed: webdataset, parquet")
        if twice := sorted({f for f in value if value.count(f) > 1}):
            raise ValueError(f"format listed more than once: {', '.join(twice)}")
        return value
