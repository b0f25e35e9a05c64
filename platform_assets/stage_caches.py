"""Process-wide caches a stage fills (a model, lookup tables), and their release when another stage
starts.

The CLI's main job runs every stage in one process (`execute_in_process`), so what one stage keeps for
its next call stays resident through the rest of the run unless someone drops it. A module that keeps
such a cache registers its release function with the stages that keep it; `stage_context` (every stage
asset's first call) releases the caches that the starting stage does not keep. The per-source job runs
raw_documents, cleaned_documents and dedup_signatures for each source in turn, so a cleaning cache is
kept by all three (PER_SOURCE_STAGES): it is loaded once for all sources, not once per source
(py3langid's model: ~0.4 s; cleaning's forkserver: ~1.2 CPU-s to start, measured on the end-to-end
benchmark's two sources when dedup_signatures still stopped it between them).

Registered: py3langid's model, loaded in the main process when cleaned_documents cleans there (a
source of one slice, as every source of the sample), was held through dedup, splits, tokenize and
packing. Releasing it unmaps the uncompressed cache file (cleaning/language_model_cache.py: its 97 MB
are page-cache pages, shared with the cleaning workers) or, without a cache, frees the ~120 MB of
decompressed arrays and our float32 copy of the weights (tests/unit/test_stage_caches.py).
"""

from __future__ import annotations

import gc
from collections.abc import Callable

# The assets of the per-source job (defs/pipeline/jobs.py PER_SOURCE_ASSETS; a test keeps them equal),
# in the order it runs them for each source
PER_SOURCE_STAGES = frozenset({"raw_documents", "cleaned_documents", "dedup_signatures"})

_RELEASES: dict[str, tuple[frozenset[str], Callable[[], bool]]] = {}


def register(name: str, kept_by: frozenset[str], release: Callable[[], bool]) -> None:
    """`release()` drops the cache `name` (True if it held something) when a stage not in `kept_by` starts."""
    _RELEASES[name] = (kept_by, release)


def release_other_stages(stage: str) -> list[str]:
    """Drop every registered cache that `stage` does not keep; the names of those that held data."""
    released = [name for name, (kept_by, release) in sorted(_RELEASES.items())
                if stage not in kept_by and release()]
    if released:
        gc.collect()  # the arrays may sit in reference cycles of the objects that used them
    return released
