"""How the Rust tokenizer runs inside a stage's process: its batch call (`tokenizers_ids`), its thread
pool (`serial_tokenizers`) and its word cache (`resize_word_cache`). The last two are process-level
knobs of tokenizers, measured for the tokenize stage's memory (tokenize/encode.py uses them;
settings.TokenizeSettings has the figures)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from tokenizers import Encoding, Tokenizer

PARALLELISM_VARIABLE = "TOKENIZERS_PARALLELISM"


def tokenizers_ids(tokenizer: Tokenizer) -> Callable[[list[str]], Sequence[Encoding]]:
    """The tokenize stage's encoder (encode.IdsOf) over `tokenizer`: its Encodings, ONE
    `encode_batch_fast` call (no offsets computed) per list of texts. encode.py takes their ids out one
    document at a time: a list of every document's ids beside the Encodings would hold ~36 more bytes
    a token at once (under a memory limit, a slice of token-dense text then failed inside tokenizers,
    where it hung, instead of in Python)."""
    return functools.partial(tokenizer.encode_batch_fast, add_special_tokens=False)


@contextmanager
def serial_tokenizers() -> Iterator[None]:
    """tokenizers' batch calls run on the calling thread, not on its Rayon pool, while inside; the
    previous setting is put back on leaving.

    Why: the encoder runs one slice per core on its own threads. With Rayon, each slice was split
    again over tokenizers' pool, whose threads live as long as the process: every run of 1 MB
    documents (~105-130 bytes per byte of text while encoded) fragmented their glibc arenas, which
    kept ~100 MB free but resident each and never gave it back, so the stage's floor rose with
    the input (pipeline_scaling's 4x input: ~455 -> ~505 MB, one step per such run; 16x has
    sixteen). Serially on the encoder's threads, with each large document on a thread of its own
    (`own_thread_min_chars`), the floor stayed at ~440-480 MB and the arenas went back to 200-225
    MB after each large document. In-process, one after the other on an idle machine, the 4x / 1x
    peaks were 570 / 568 MB (1.004x) against 601 / 575 (1.045x). The stage alone on
    pipeline_scaling's kept inputs: 1x 608-622 MB (three runs), 4x 623, 16x 674 by high-water
    marks, against 604 / 642 / 676; what was left at 16x was the set writes (settings'
    `row_group_bytes`). CPU: the tokenization benchmark's, against the same peer in the same run,
    did not change (ours 1.32x less than the peer's, 1.34x before), and the stage itself, run back
    to back with the Rayon version on the same inputs, took 1,789 against 1,814 CPU-s at 16x and
    411 against 465 at 4x (an earlier +22% at 16x came from runs an hour apart: the machine's speed
    per CPU-second varies by up to ~40% during the day).

    tokenizers reads TOKENIZERS_PARALLELISM at each batch call and has no other switch a Python
    caller can reach. The variable is the process's: it is set here before the encoder's threads
    encode and put back after, so the tokenizer's training (Rayon, the same process in an
    in-process job) is not slowed. It is never set to true here, which would keep tokenizers from
    turning its pool off in a forked child."""
    previous = os.environ.get(PARALLELISM_VARIABLE)
    os.environ[PARALLELISM_VARIABLE] = "false"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(PARALLELISM_VARIABLE, None)
        else:
            os.environ[PARALLELISM_VARIABLE] = previous


def resize_word_cache(tokenizer: Tokenizer, capacity: int) -> bool:
    """Set the model's word cache to `capacity` entries (emptied); False for a model without one
    (WordPiece, WordLevel). settings.TokenizeSettings.word_cache_capacity says why."""
    resize = getattr(tokenizer.model, "_resize_cache", None)
    if resize is None:
        return False
    resize(capacity)
    return True
