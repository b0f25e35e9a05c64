"""The packing survey keeps nothing per input row in memory: each set's lengths, loss tokens, chunks
and ids and every row's set go to the run's spill directory (packing/spilled_columns.py, id_store.py)
and are read back by range. Before, it held 24 B a row for the whole stage (plus a copy per set while
it sorted them out): 673 MB at 8 M one-to-eight-token documents, where it is now 142 MB, as at 2 M."""

import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from platform_assets.packing.spilled_columns import SpilledColumn
from platform_assets.packing.survey import survey
from platform_assets.storage import Storage

SETS = [("train", "web"), ("train", "code"), ("val", "web")]


def _write(root: Path, docs_per_set: int) -> tuple[dict, np.ndarray]:
    """Short documents in parts of 20,000 rows, the sets' rows interleaved within each part."""
    rng = np.random.default_rng(docs_per_set)
    want = {key: {"lengths": [], "loss": [], "chunks": []} for key in SETS}
    out = root / "tokenized"
    out.mkdir(parents=True)
    n = docs_per_set * len(SETS)
    which = rng.permutation(np.repeat(np.arange(len(SETS)), docs_per_set))
    for part, a in enumerate(range(0, n, 20_000)):
        sets = which[a : a + 20_000]
        m = sets.size
        lengths = rng.integers(1, 9, m)
        loss = np.minimum(lengths, rng.integers(0, 9, m))
        chunks = rng.integers(0, 3, m).astype(np.int32)
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
        values = pa.array(np.zeros(int(offsets[-1]), np.int32))
        pq.write_table(pa.table({
            "id": pa.array([f"d{a + i}" for i in range(m)]),
            "split": pa.array([SETS[k][0] for k in sets.tolist()]),
            "source": pa.array([SETS[k][1] for k in sets.tolist()]),
            "chunk": pa.array(chunks), "input_ids": pa.ListArray.from_arrays(pa.array(offsets), values),
            "num_tokens": pa.array(lengths.astype(np.int32)), "loss_tokens": pa.array(loss.astype(np.int32)),
        }), out / f"part-{part:05d}.parquet")
        for k, key in enumerate(SETS):
            rows = sets == k
            want[key]["lengths"].append(lengths[rows])
            want[key]["loss"].append(loss[rows])
            want[key]["chunks"].append(chunks[rows])
    return {key: {c: np.concatenate(v) for c, v in cols.items()} for key, cols in want.items()}, which


def _survey_peak(root: Path) -> tuple[int, object]:
    spill = root / "spill"
    spill.mkdir()
    tracemalloc.start()
    try:
        surveyed = survey(Storage(str(root)), "tokenized", 8192, spill, keep_ids=True)
        return tracemalloc.get_traced_memory()[1], surveyed
    finally:
        tracemalloc.stop()


def test_the_survey_spills_every_per_row_column_and_its_memory_does_not_grow_with_the_rows(tmp_path):
    small_want, _ = _write(tmp_path / "small", 20_000)
    large_want, which = _write(tmp_path / "large", 120_000)
    small_peak, _ = _survey_peak(tmp_path / "small")
    large_peak, surveyed = _survey_peak(tmp_path / "large")
    # 6x the rows (360,000): in memory the columns alone were 24 B x 300,000 more, 7.2 MB
    assert large_peak < small_peak + 1.5 * 2**20, (small_peak, large_peak)
    by_key = {(s.split, s.source): s for s in surveyed.sets}
    assert list(by_key) == sorted(SETS)
    for key, s in by_key.items():
        assert isinstance(s.lengths, SpilledColumn) and isinstance(s.chunks, SpilledColumn)
        assert np.array_equal(s.lengths[: s.documents], large_want[key]["lengths"])
        assert np.array_equal(s.loss_tokens[: s.documents], large_want[key]["loss"])
        assert np.array_equal(s.chunks[: s.documents], large_want[key]["chunks"])
        assert s.tokens == int(large_want[key]["lengths"].sum())
        window = s.rows(1000, 1500)  # a placement window: in memory, ids read from the set's file
        assert np.array_equal(window.lengths, large_want[key]["lengths"][1000:1500]) and len(window.ids) == 500
    # each row's set, in sorted order, read by range
    order = [sorted(SETS).index(key) for key in SETS]
    assert len(surveyed.row_set) == which.size
    assert np.array_equal(surveyed.row_set[12_345:56_789], np.asarray(order)[which[12_345:56_789]])
    assert surveyed.has_loss_mask
