"""First step: whole-column checks in Arrow (C++), before any document becomes a Python string.

Rules, first match wins: ``empty`` (no text, or only whitespace), ``too_large`` (more UTF-8 bytes
than `max_bytes`: "52428800 > 4194304"), ``binary`` (share of control characters / U+FFFD in the
first `binary_sample_chars` characters above `max_binary_ratio`). Only the sample is examined for
`binary`, so a 50 MB one-line document costs the same as a 64 KB one (guard_scan.py counts it in one
compiled pass over the column's bytes). Only text and HTML documents are judged (`modalities`); a caption-less image is
counted as skipped, not removed as empty.
"""

from __future__ import annotations

import time

import pyarrow as pa
import pyarrow.compute as pc

from platform_assets.cleaning import guard_scan
from platform_assets.cleaning.guard_scan import binary_sample_counts
from platform_assets.cleaning.settings import GuardSettings
from platform_assets.cleaning.steps import Step, StepResult, StepStats, assemble_result, fmt, text_bytes

# C0 controls except tab, LF, FF, CR; DEL; U+FFFD (what a decoder leaves for undecodable bytes): the
# characters guard_scan counts, and the class that defines them (the tests compare the two)
BINARY_CHARS_RE2 = r"[\x00-\x08\x0B\x0E-\x1F\x7F\x{FFFD}]"


class Guard(Step):
    name = "guard"

    def __init__(self, settings: GuardSettings | None = None):
        self.settings = settings or GuardSettings()

    def load(self) -> None:
        guard_scan.load()

    def __call__(self, batch: pa.RecordBatch) -> StepResult:
        started = time.perf_counter()
        s = self.settings
        text = batch.column("text")
        sizes = text_bytes(text)
        in_scope = self._in_scope(batch)
        spaces = pc.utf8_is_space(text).to_pylist()  # false for "": sizes say empty
        bad, sampled = binary_sample_counts(text, s.binary_sample_chars)
        drops: list[tuple[int, str, str | None]] = []
        stats = StepStats(self.name)
        for i in range(batch.num_rows):
            if in_scope is not None and not in_scope[i]:
                stats.skipped += 1
            elif spaces[i] is None or spaces[i] or not sizes[i]:
                drops.append(
                    (i, self.rule("empty"), "null" if sizes[i] is None else f"{sizes[i]} bytes of whitespace")
                )
            elif sizes[i] > s.max_bytes:
                drops.append((i, self.rule("too_large"), f"{sizes[i]} > {s.max_bytes}"))
            elif sampled[i] and bad[i] / sampled[i] > s.max_binary_ratio:
                drops.append(
                    (i, self.rule("binary"), f"{fmt(bad[i] / sampled[i])} > {fmt(s.max_binary_ratio)}")
                )
        return assemble_result(self, batch, drops, [x or 0 for x in sizes], stats=stats, started=started)

    def _in_scope(self, batch: pa.RecordBatch) -> list[bool] | None:
        """Per row: is its modality one the guard judges (None: every row is)."""
        scope = self.settings.modalities
        if scope is None or "modality" not in batch.schema.names:  # no column: text documents
            return None
        modality = batch.column("modality")
        return pc.is_in(modality, value_set=pa.array(scope, modality.type)).fill_null(False).to_pylist()
