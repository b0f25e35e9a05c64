"""Config of the statistics reported with the stages' outputs: the `statistics:` key of the pipeline config."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from platform_assets.contracts import StrictModel

MAX_DEFAULT_LENGTH_EXPONENT = 20
"""Default bins reach 2^20 (1,048,576 tokens): longer documents share the last, open bin."""


def half_octave_edges(max_exponent: int = MAX_DEFAULT_LENGTH_EXPONENT) -> list[int]:
    """0, 1, 2, 3, 4, 6, 8, 11, 16, 23, 32, ... 2^max_exponent: lower bin edges at round(2^(k/2)).

    Half an octave a bin: powers of two alone put 513 and 1,023 tokens in one bin, too coarse to see
    where a 1,024-token context cuts; 41 bins still fit one chart."""
    edges = sorted({0, *(round(2 ** (k / 2)) for k in range(2 * max_exponent + 1))})
    return edges


def validate_field_spec(spec: str) -> str:
    """A top-level column name or `meta.<key>[.<key>...]` with no empty key."""
    if not spec or spec != spec.strip():
        raise ValueError(f"field {spec!r}: give a column name or meta.<key>[.<key>...] without spaces around it")
    if spec.startswith("meta."):
        keys = spec.split(".")[1:]
        if any(not k for k in keys):
            raise ValueError(f"field {spec!r}: empty key in the path (write meta.<key>[.<key>...])")
    return spec


class StatisticsSettings(StrictModel):
    length_bin_edges: list[Annotated[int, Field(ge=0)]] = Field(default_factory=half_octave_edges)
    """Lower edges of the token-length bins (strictly increasing, starting at 0): bin i holds lengths in
    [edge_i, edge_i+1), the last bin everything from the last edge up. Default: half-octave log-spaced
    edges 0, 1, 2, 3, 4, 6, 8, 11, 16, ... 2^20 (41 bins). Counts only: memory does not grow with documents."""
    label_field: str | None = None
    """Field whose value distribution is reported per split with dataset_splits (e.g. `meta.label`,
    `meta.annotation.class`, or a column such as `lang`); None reports none. Documents without it count as
    `<missing>`."""
    label_top_k: Annotated[int, Field(gt=0)] = 20
    """Labels shown by name per split (largest first); the rest are summed as `<other>`."""
    max_distinct_labels: Annotated[int, Field(gt=0)] = 10_000
    """Distinct labels counted exactly; further new labels are counted together as `<beyond max_distinct_labels>`
    and the report says so (a label field holding ids would otherwise keep one counter per document)."""
    strata_reported: Annotated[int, Field(gt=0)] = 50
    """Largest strata listed (with `<missing>` always) in dataset_splits metadata when `splits.stratify_by` is set."""

    @field_validator("length_bin_edges")
    @classmethod
    def _edges_increasing(cls, edges: list[int]) -> list[int]:
        if not edges or edges[0] != 0:
            raise ValueError("statistics.length_bin_edges must start at 0")
        if any(b <= a for a, b in zip(edges, edges[1:], strict=False)):
            raise ValueError("statistics.length_bin_edges must be strictly increasing")
        return edges

    @field_validator("label_field")
    @classmethod
    def _label_field(cls, spec: str | None) -> str | None:
        return None if spec is None else validate_field_spec(spec)
