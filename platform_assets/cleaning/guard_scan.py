"""The guard's binary-text figures in one compiled pass (numba) over a text column's UTF-8 buffer
(issue #13): per row, how many characters its first `sample_chars` hold and how many of them are
binary (C0 controls other than tab, LF, FF, CR; DEL; U+FFFD).

guard.py had Arrow slice every text to its sample (utf8_slice_codeunits) and count them with RE2
(count_substring_regex): 0.053 CPU-s on the cleaning_stage benchmark's 32 MB, 0.040 of it RE2's. In
UTF-8 every byte below 0x80 is an ASCII character and no other byte is, and U+FFFD is the one
sequence EF BF BD, so counting bytes gives the same answer (tests/unit/test_cleaning_guard_scan.py
compares it with Arrow's on adversarial text).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
import pyarrow as pa

# The guard's binary characters below 0x80: C0 controls except tab, LF, FF, CR (what its RE2 class
# [\x00-\x08\x0B\x0E-\x1F\x7F\x{FFFD}] names), and DEL
BINARY_ASCII = np.zeros(128, dtype=np.int64)
BINARY_ASCII[[*range(0x00, 0x09), 0x0B, *range(0x0E, 0x20), 0x7F]] = 1


def binary_sample_counts(text: pa.Array, sample_chars: int) -> tuple[list[int], list[int]]:
    """(binary characters, characters) among each row's first `sample_chars` characters, as lists;
    `text` a string or large_string array (a null row reads whatever its slot spans, usually nothing:
    the guard removes it as empty before looking)."""
    if isinstance(text, pa.ChunkedArray):
        text = text.combine_chunks()
    if not pa.types.is_string(text.type) and not pa.types.is_large_string(text.type):
        raise TypeError(f"a string column was expected, got {text.type}")
    if len(text) == 0:
        return [], []
    _, offsets_buf, data_buf = text.buffers()
    width = np.int32 if pa.types.is_string(text.type) else np.int64
    offsets = np.frombuffer(offsets_buf, dtype=width)[text.offset: text.offset + len(text) + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, dtype=np.uint8)
    bad, sampled = _kernel()(data, offsets, sample_chars, BINARY_ASCII)
    return bad.tolist(), sampled.tolist()


def load() -> None:
    """Compile or load from the cache the kernel, with the argument types the guard passes."""
    for type_ in (pa.string(), pa.large_string()):
        binary_sample_counts(pa.array(["a\x00"], type_), 1)


@cache
def _kernel() -> Any:
    """sample_counts compiled, on first use: numba (~0.15 s to import) stays out of this module's
    import, which the pipeline's pulls in."""
    from platform_assets.cleaning.quality.kernels import compiled

    return compiled(sample_counts)


def sample_counts(data, offsets, sample_chars, binary_ascii):
    """binary_sample_counts over the UTF-8 bytes and the rows' offsets into them (compiled by _kernel;
    callable as Python). A character starts at every byte that is not a continuation (10xxxxxx)."""
    n = offsets.size - 1
    bad = np.zeros(n, dtype=np.int64)
    sampled = np.zeros(n, dtype=np.int64)
    for r in range(n):
        end = offsets[r + 1]
        chars = count = 0
        i = offsets[r]
        while i < end:
            c = data[i]
            if c < 0x80:
                if chars == sample_chars:
                    break
                chars += 1
                count += binary_ascii[c]
            elif c & 0xC0 != 0x80:
                if chars == sample_chars:
                    break
                chars += 1
                if c == 0xEF and i + 2 < end and data[i + 1] == 0xBF and data[i + 2] == 0xBD:
                    count += 1
            i += 1
        bad[r], sampled[r] = count, chars
    return bad, sampled
