"""guard_scan's compiled count of binary characters in each text's sample against what it replaced:
Arrow's utf8_slice_codeunits + RE2's count_substring_regex with the guard's class, on adversarial
text (every binary character and its neighbours, U+FFFD and its bytes' neighbours, multi-byte and
astral characters, samples cut inside them), string and large_string columns, sliced arrays, nulls."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from platform_assets.cleaning.guard import BINARY_CHARS_RE2
from platform_assets.cleaning.guard_scan import binary_sample_counts, sample_counts

PIECES = ["a", " ", "\t", "\n", "\r", "\x0c", "\x0b", "\x00", "\x08", "\x1f", "\x7f", "\x80", "\x9f", "\ufffd",
          "\ufffe", "\uffef", "\u0fff", "é", "中", "\U0001F600", "\U0010FFFD", "\ufffd\ufffd", "ab"]


def _arrow_counts(column: pa.Array, sample_chars: int) -> tuple[list[int], list[int]]:
    sample = pc.utf8_slice_codeunits(column, 0, sample_chars)
    return (pc.count_substring_regex(sample, BINARY_CHARS_RE2).to_pylist(),
            pc.utf8_length(sample).to_pylist())


@pytest.mark.parametrize("type_", [pa.string(), pa.large_string()])
def test_binary_sample_counts_equal_arrow_slices_and_re2(type_):
    rng = random.Random(4)
    texts = ["", "\ufffd", "\x00" * 50, "é" * 40]
    texts += ["".join(rng.choice(PIECES) for _ in range(rng.randint(0, 80))) for _ in range(1500)]
    column = pa.array(texts + [None], type_)
    binary_rows = 0
    for sample_chars in (1, 2, 3, 7, 30, 65_536):
        bad, sampled = binary_sample_counts(column, sample_chars)
        expected_bad, expected_sampled = _arrow_counts(column, sample_chars)
        assert bad[:-1] == expected_bad[:-1] and sampled[:-1] == expected_sampled[:-1], sample_chars
        binary_rows += sum(b > 0 for b in bad)
    assert binary_rows > 3000  # the class was met, not just counted as zero
    # a slice of the column (non-zero array offset) and a chunked column read the same rows
    part = column.slice(100, 300)
    assert binary_sample_counts(part, 30) == tuple(x[100:400] for x in binary_sample_counts(column, 30))
    chunked = pa.chunked_array([column.slice(0, 700), column.slice(700)])
    assert binary_sample_counts(chunked, 30) == binary_sample_counts(column, 30)


def test_compiled_and_python_forms_agree_and_other_types_are_refused():
    import numpy as np

    from platform_assets.cleaning.guard_scan import BINARY_ASCII

    column = pa.array(["a\x00\ufffdé", "\x7f\x7f", ""])
    data = np.frombuffer(column.buffers()[2], dtype=np.uint8)
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int32)
    bad, sampled = sample_counts(data, offsets, 3, BINARY_ASCII)
    assert (bad.tolist(), sampled.tolist()) == binary_sample_counts(column, 3) == ([2, 2, 0], [3, 2, 0])
    assert binary_sample_counts(pa.array([], pa.string()), 5) == ([], [])
    with pytest.raises(TypeError):
        binary_sample_counts(pa.array([b"x"]), 5)
