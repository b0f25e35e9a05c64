"""dedup.slice_bytes: a batch keyed slice by slice gives the decisions, duplicates and accepted
artifact of the batch keyed whole (dedup/batch_slices.py)."""

import random

import numpy as np
import pyarrow as pa
import pytest

from platform_assets.dedup.batch_slices import text_row_slices
from platform_assets.dedup.deduplicator import deduplicate
from platform_assets.dedup.settings import DedupSettings
from tests.unit.test_dedup_stage import _doc, _edit, _table


def _lengths(table: pa.Table) -> list[int]:
    return [len(t.encode()) if t is not None else 0 for t in table["text"].to_pylist()]


def test_slices_cover_every_row_in_order_within_the_bound():
    rng = random.Random(3)
    texts = [_doc(rng, n) for n in (40, 400, 8, 4000, 80, 120)] + [None, ""]
    table = _table([t or "" for t in texts]).set_column(2, "text", pa.array(texts, pa.large_string()))
    bound = 3_000
    pieces = list(text_row_slices(table, bound))
    assert pa.concat_tables(pieces).equals(table)
    assert len(pieces) > 2
    for piece in pieces:
        size = sum(_lengths(piece))
        assert piece.num_rows >= 1
        assert size <= bound or piece.num_rows == 1, (size, piece.num_rows)  # only a lone large row exceeds it
    assert list(text_row_slices(table, 10**9)) == [table]  # within the bound: the batch itself
    assert list(text_row_slices(table.drop_columns(["text"]), 1)) == [table.drop_columns(["text"])]


@pytest.mark.parametrize("storage", ["disk", "memory"])
def test_decisions_do_not_depend_on_the_slice_size(storage):
    rng = random.Random(11)
    base = [_doc(rng, int(n)) for n in np.random.default_rng(0).integers(200, 600, 120)]
    texts = base + [_edit(rng, t, 2) for t in base[:30]] + base[30:40] + [""] * 3
    table = _table(texts, sources=["a" if i % 3 else "b" for i in range(len(texts))])
    outputs = []
    for slice_bytes in (1, 2_000, 8 * 2**20):  # one row a slice, a few rows, the whole batch
        settings = DedupSettings.model_validate({"slice_bytes": slice_bytes, "near": {"storage": {"type": storage}}})
        kept, result = deduplicate(table, settings)
        outputs.append((kept, result.decisions, result.duplicates, result.accepted.to_table(settings)))
    first = outputs[0]
    assert first[1].num_rows == table.num_rows and first[2].num_rows == 42  # 30 near + 10 + 2 exact copies
    for other in outputs[1:]:
        for a, b in zip(first, other, strict=True):
            assert a.equals(b)
