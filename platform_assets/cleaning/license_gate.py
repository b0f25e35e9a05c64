"""The licence allow-list (`cleaning.licenses`), as a step in `drop` mode and as the figures of the
blocking check `license_allowed` in `fail` mode (defs/cleaned_documents/checks.py).

A document's `license` is set at ingest from the source's `license:` or its manifest row; ingest
copies it, this is where it is checked. The decision is one vectorised `is_in` over the column
(case-folded: SPDX ids are case-insensitive), so the step costs nothing per document.
"""

from __future__ import annotations

import time
from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc

from platform_assets.cleaning.settings import LicenseSettings
from platform_assets.cleaning.steps import Step, StepResult, StepStats, assemble_result, text_bytes

MISSING = "missing"
NOT_ALLOWED = "not_allowed"


def license_verdicts(column: pa.Array | pa.ChunkedArray, settings: LicenseSettings) -> tuple[pa.Array, pa.Array]:
    """(missing, not allowed) boolean masks of a `license` column (blank counts as missing)."""
    if pa.types.is_null(column.type):
        column = column.cast(pa.string())
    folded = pc.utf8_lower(pc.utf8_trim_whitespace(column))
    missing = pc.or_(pc.is_null(folded), pc.equal(folded, "")).fill_null(True)
    allow = pa.array(sorted({a.strip().casefold() for a in settings.allow or ()}), pa.string())
    allowed = pc.is_in(folded, value_set=allow).fill_null(False)
    return missing, pc.and_(pc.invert(missing), pc.invert(allowed))


def license_violations(column: pa.Array | pa.ChunkedArray, settings: LicenseSettings) -> Counter[str]:
    """{licence or "(missing)": documents} of those outside the allow-list."""
    missing, not_allowed = license_verdicts(column, settings)
    found: Counter[str] = Counter()
    n_missing = int(pc.sum(missing).as_py() or 0)
    if n_missing:
        found["(missing)"] += n_missing
    for entry in pc.value_counts(pc.filter(column, not_allowed)).to_pylist():
        found[str(entry["values"])] += entry["counts"]
    return found


class LicenseGate(Step):
    """`drop` mode: removes documents without a licence (rule `license.missing`) or with one outside
    the allow-list (rule `license.not_allowed`, value: the licence)."""

    name = "license"

    def __init__(self, settings: LicenseSettings):
        if settings.allow is None:
            raise ValueError("licenses.allow is not set: no licence gate to run")
        self.settings = settings

    def __call__(self, batch: pa.RecordBatch) -> StepResult:
        started = time.perf_counter()
        sizes = text_bytes(batch.column("text"))
        names = batch.schema.names
        column = batch.column("license") if "license" in names else pa.nulls(batch.num_rows, pa.string())
        missing, not_allowed = license_verdicts(column, self.settings)
        drops: list[tuple[int, str, str | None]] = [(int(i), self.rule(MISSING), None)
                                                    for i in pc.indices_nonzero(missing).to_pylist()]
        values = column.to_pylist() if pc.any(not_allowed).as_py() else []
        drops += [(int(i), self.rule(NOT_ALLOWED), values[i]) for i in pc.indices_nonzero(not_allowed).to_pylist()]
        drops.sort()
        return assemble_result(self, batch, drops, sizes, stats=StepStats(self.name), started=started)
