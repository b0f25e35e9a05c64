"""The shared contracts: counts merge, exclusions schemas per stage, the stage result shape."""

from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa
import pytest
from pydantic import ValidationError

from platform_assets.contracts import (
    EXCLUSION_FIELDS,
    Counts,
    IOSettings,
    StageResult,
    StrictModel,
    exclusions_schema,
    schema_tag,
)


@dataclass
class _Figures(Counts):
    step: str = "s"
    docs: int = 0
    seconds: float = 0.0
    reasons: Counter = field(default_factory=Counter)
    per_lang: dict = field(default_factory=dict)
    parts: list = field(default_factory=list)


def test_counts_merge_adds_numbers_counters_dicts_and_extends_lists():
    a = _Figures(docs=2, seconds=0.5, reasons=Counter(x=1), per_lang={"en": 2}, parts=["p0"])
    b = _Figures(docs=3, seconds=0.25, reasons=Counter(x=2, y=1), per_lang={"en": 1, "de": 4}, parts=["p1"])
    assert a.merge(b) is a
    assert a.as_dict() == {"step": "s", "docs": 5, "seconds": 0.75, "reasons": {"x": 3, "y": 1},
                           "per_lang": {"de": 4, "en": 3}, "parts": ["p0", "p1"]}


def test_counts_of_different_identities_or_types_do_not_merge():
    with pytest.raises(ValueError, match="step 'other' != 's'"):
        _Figures().merge(_Figures(step="other"))

    @dataclass
    class Other(Counts):
        docs: int = 0

    with pytest.raises(TypeError):
        _Figures().merge(Other())


def test_each_stage_extends_the_shared_exclusion_columns_under_its_own_tag():
    dedup = exclusions_schema("dedup", (pa.field("kept_id", pa.string()),))
    cleaning = exclusions_schema("cleaning")
    assert dedup.names[:4] == cleaning.names == [f.name for f in EXCLUSION_FIELDS] == ["id", "rule", "value", "bytes"]
    assert schema_tag(dedup) == "platform.exclusions.dedup/2" != schema_tag(cleaning)
    with pytest.raises(ValueError, match="shared ones"):
        exclusions_schema("packing", (pa.field("rule", pa.string()),))


def test_stage_result_lists_parts_at_any_depth_and_its_exclusions_path():
    result = StageResult(rel="tokenized_documents/_all", rows=3, exclusions="_exclusions.parquet",
                         files={"train/web/part-00001.parquet": {}, "train/web/part-00000.parquet": {},
                                "_exclusions.parquet": {}, "_manifest.json": {}})
    assert result.parts == ["train/web/part-00000.parquet", "train/web/part-00001.parquet"]
    assert result.exclusions_path() == "tokenized_documents/_all/_exclusions.parquet"


def test_config_sections_are_strict_and_io_bounds_positive():
    class Section(StrictModel):
        a: int = 1

    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        Section(b=2)
    with pytest.raises(ValidationError):
        IOSettings(batch_rows=0)


def test_a_stage_result_states_its_figures_as_metadata():
    """Every stage result has the same shape; the figures it reports are its `metadata`."""
    from platform_assets.dedup.stage import DedupStageResult
    from platform_assets.ingest.run import IngestResult

    assert StageResult(rel="x/_all", files={}, rows=0).metadata == {}
    ingest = IngestResult(rel="raw_documents/web", files={}, rows=3, source="web", text_bytes=30, input_files=2,
                          input_groups=1, quarantine_counts={"malformed_json": 1, "empty_file": 1})
    assert ingest.metadata == {"source": "web", "input_files": 2, "input_groups": 1, "text_bytes": 30,
                               "quarantined": 2}
    assert issubclass(DedupStageResult, StageResult)
