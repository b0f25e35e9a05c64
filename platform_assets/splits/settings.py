"""Config of the split stage: the `splits:` key of the pipeline config."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator, model_validator

from platform_assets.contracts import StrictModel
from platform_assets.stats.settings import validate_field_spec


class SplitRatios(StrictModel):
    train: Annotated[float, Field(ge=0.0, le=1.0)] = 0.98
    validation: Annotated[float, Field(ge=0.0, le=1.0)] = 0.01
    test: Annotated[float, Field(ge=0.0, le=1.0)] = 0.01

    @model_validator(mode="after")
    def _sum_to_one(self) -> SplitRatios:
        total = self.train + self.validation + self.test
        if abs(total - 1.0) > 1e-9:
            raise ValueError(f"split ratios must sum to 1, got {total:g}")
        return self

    def as_tuple(self) -> tuple[float, float, float]:
        return (self.train, self.validation, self.test)


class LeakCheckSettings(StrictModel):
    exact: bool = True
    """Fail on any normalised-text duplicate in two different splits."""
    near: bool = True
    """Fail on any near-duplicate (the dedup stage's MinHash-LSH and threshold) of a train document
    in validation or test."""
    images: bool = True
    """Fail on any two image documents in different splits whose phashes are within
    `dedup.images.max_distance` (checked whether or not dedup removed such images)."""
    max_pairs_reported: Annotated[int, Field(gt=0)] = 10_000


class SplitSettings(StrictModel):
    seed: Annotated[int, Field(ge=0)] = 0
    """Salt of the id hash: changing it reshuffles every document, so it is part of a dataset's identity."""
    ratios: SplitRatios = SplitRatios()
    stratify_by: str | None = None
    """Column (e.g. `source`, `lang`) or field of the JSON `meta` (`meta.label`, `meta.annotation.class`:
    where CSV/JSONL sources keep their labels) whose every value gets the ratios within +-1 document;
    documents without the field are one more stratum, `<missing>`. Needs the previous assignment to stay
    stable as the corpus grows (see splits/assignment.py)."""
    leakage: LeakCheckSettings = LeakCheckSettings()

    @field_validator("stratify_by")
    @classmethod
    def _stratify_field(cls, spec: str | None) -> str | None:
        return None if spec is None else validate_field_spec(spec)
