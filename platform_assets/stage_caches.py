"""Process-wide caches a stage fills (a model, lookup tables), and their release when another stage
starts.

The CLI's main job runs every stage in one process (`execute_in_process`), so what one stage keeps for
its next call stays resident through the rest of the run unless someone drops it. A module that keeps
such a cache registers its release function under the stage that uses it; `stage_context` (every
stage asset's first call) releases the caches of the other stages. Consecutive partitions of the same
stage (every source's cleaned_documents) keep theirs.

Measured: py3langid's model (lzma-decompressed arrays and our float32 copy of its weights, ~150 MB) is
loaded by cleaned_documents' language check in the main process and was held through dedup, splits,
tokenize and packing.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

_RELEASES: dict[str, dict[str, Callable[[], bool]]] = {}


def register(stage: str, name: str, release: Callable[[], bool]) -> None:
    """`release()` drops the cache `name` that `stage` fills (True if it held something)."""
    _RELEASES.setdefault(stage, {})[name] = release


def release_other_stages(stage: str) -> list[str]:
    """Drop every registered cache of a stage other than `stage`; the names of those that held data."""
    released = [name for owner, caches in sorted(_RELEASES.items()) if owner != stage
                for name, release in sorted(caches.items()) if release()]
    if released:
        gc.collect()  # the arrays may sit in reference cycles of the objects that used them
    return released
