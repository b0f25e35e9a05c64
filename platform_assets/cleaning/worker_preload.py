"""Imported by the cleaning workers' forkserver before it forks a worker (worker_pool.py): the stage's
modules, the compiled kernels loaded from numba's cache and py3langid's model, which every worker then
has without loading them (a worker started with `spawn` paid ~1.4 CPU-s for them)."""

from platform_assets.cleaning import (
    blocklist_screen,
    blocklist_words,
    guard_scan,
    language_kernels,
    language_script,
    normalize,
    pii_digits,
    stage,  # noqa: F401 - the module a worker runs
)
from platform_assets.cleaning.language_id import preload_model
from platform_assets.cleaning.quality import array_vocab, kernels, line_stats, ngram_kernels, phrase_screen

for _module in (kernels, ngram_kernels, line_stats, array_vocab, phrase_screen, language_kernels, language_script,
                normalize, guard_scan, pii_digits, blocklist_screen, blocklist_words):
    _module.load()
preload_model()
