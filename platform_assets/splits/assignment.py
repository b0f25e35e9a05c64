"""train / validation / test assignment from a seeded hash of the document id.

Unstratified (default): u = xxh3_64(id, seed) / 2^64, and the split is the ratio interval u falls
in. A document's split depends on its id, the seed and the ratios only, so adding documents never
moves existing ones, on any machine, without any state. Each split's share is binomial around its
ratio: at 1% of 1 M documents, 10,000 +- 100.

Stratified (`stratify_by`: a column, or `meta.<key>[.<key>...]` inside the JSON meta): small strata
need exact shares (a 50-document language at 1% gets 0 or 1 validation document, by luck), and exact
shares depend on the set of documents, so stability needs memory: pass the previous assignment as
`prior`. Documents in it keep their split; within each
stratum the new documents, in hash order, each go to the split furthest below its target
(ratio x stratum size); ties go train, validation, test. Every stratum then stays within one
document of its ratios, and a re-run with the same prior gives the same answer.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from platform_assets.splits.settings import SplitSettings
from platform_assets.stats.fields import FieldPath, field_values

SPLIT_NAMES: tuple[str, str, str] = ("train", "validation", "test")
_NAMES = np.array(SPLIT_NAMES, dtype=object)


def id_unit_interval(ids: pa.Array | pa.ChunkedArray, seed: int) -> np.ndarray:
    """A uniform [0, 1) number per id: top 53 bits of xxh3_64(id, seed)."""
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks()
    ids = ids.cast(pa.large_string()) if not pa.types.is_large_string(ids.type) else ids
    offsets = np.frombuffer(ids.buffers()[1], np.int64)[ids.offset : ids.offset + len(ids) + 1]
    data = ids.buffers()[2]
    mv = memoryview(data) if data is not None else memoryview(b"")
    h = xxhash.xxh3_64_intdigest
    vals = np.fromiter(
        (h(mv[a:b], seed) for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)),
        np.uint64,
        len(ids),
    )
    return (vals >> np.uint64(11)).astype(np.float64) * 2.0**-53


def hash_split_codes(u: np.ndarray, ratios: tuple[float, float, float]) -> np.ndarray:
    """0 train, 1 validation, 2 test, by the interval of the cumulative ratios u falls in."""
    t, v, _ = ratios
    return np.where(u < t, 0, np.where(u < t + v, 1, 2)).astype(np.int8)


def assign_splits(
    table: pa.Table | pa.RecordBatch, settings: SplitSettings, prior: pa.Table | None = None
) -> pa.Array:
    """The split of every row of `table` (needs `id`, and the `stratify_by` column, or `meta` for a
    `meta.` path, if set).

    `prior`: a table with `id` and `split` from the previous assignment; its documents keep their
    split (required for stability when stratifying; harmless otherwise).
    """
    return split_names(assign_split_codes(table, settings, prior))


def split_names(codes: np.ndarray) -> pa.Array:
    """Split codes (0 train, 1 validation, 2 test) as the `split` column's strings."""
    return pa.array(_NAMES[codes], pa.string())


def assign_split_codes(
    table: pa.Table | pa.RecordBatch, settings: SplitSettings, prior: pa.Table | None = None
) -> np.ndarray:
    """assign_splits as int8 codes (1 B a document; the strings are ~9 B and an offset)."""
    ids = table.column("id")
    n = len(ids)
    u = id_unit_interval(ids, settings.seed)
    ratios = settings.ratios.as_tuple()
    codes = np.full(n, -1, np.int8)
    if prior is not None and prior.num_rows:
        found = pc.index_in(ids, value_set=prior.column("id"))
        known = found.is_valid().to_numpy(zero_copy_only=False)
        prior_found = pc.index_in(prior.column("split"), value_set=pa.array(SPLIT_NAMES))
        if prior_found.null_count:
            raise ValueError(f"prior assignment has split values outside {SPLIT_NAMES}")
        prior_codes = prior_found.to_numpy(zero_copy_only=False)
        codes[known] = prior_codes[found.filter(found.is_valid()).to_numpy()]
    new = codes < 0
    if settings.stratify_by is None:
        codes[new] = hash_split_codes(u[new], ratios)
    else:
        # rows without the field (null) are one stratum of their own, reported as <missing>
        stratum = pc.dictionary_encode(stratum_values(table, settings.stratify_by), null_encoding="encode")
        stratum_idx = stratum.indices.to_numpy(zero_copy_only=False)
        id_list = ids.to_pylist()
        by_stratum = np.argsort(stratum_idx, kind="stable")
        bounds = np.cumsum(np.bincount(stratum_idx, minlength=len(stratum.dictionary)))[:-1]
        for rows in np.split(by_stratum, bounds):
            _fill_stratum(codes, rows, u, id_list, ratios)
    return codes


def stratum_values(table: pa.Table | pa.RecordBatch, spec: str) -> pa.Array:
    """The stratum of every row as strings, null where the row lacks the field: a column named `spec`
    (also a precomputed key column called `meta.label`), else the path into `meta` (stats/fields.py)."""
    return field_values(table, FieldPath.parse(spec, table.schema.names))


def _fill_stratum(
    codes: np.ndarray, rows: np.ndarray, u: np.ndarray, ids: list[str], ratios: tuple[float, float, float]
) -> None:
    counts = np.bincount(codes[rows][codes[rows] >= 0], minlength=3).astype(np.float64)
    new_rows = rows[codes[rows] < 0]
    order = sorted(new_rows.tolist(), key=lambda r: (u[r], ids[r]))
    target = np.asarray(ratios)
    for r in order:
        deficit = target * (counts.sum() + 1) - counts
        c = int(np.argmax(deficit))  # first maximum: train, then validation, then test
        codes[r] = c
        counts[c] += 1


def code_counts(codes: np.ndarray) -> np.ndarray:
    """Documents per split code (train, validation, test), for summing over batches."""
    return np.bincount(codes, minlength=len(SPLIT_NAMES)).astype(np.int64)


def split_counts(splits: pa.Array | pa.ChunkedArray) -> dict[str, int]:
    vc = pc.value_counts(splits).to_pylist()
    out = {name: 0 for name in SPLIT_NAMES}
    out.update({d["values"]: d["counts"] for d in vc})
    return out


def with_splits(table: pa.Table, settings: SplitSettings, prior: pa.Table | None = None) -> pa.Table:
    """`table` with a `split` column (replacing an existing one)."""
    splits = assign_splits(table, settings, prior)
    if "split" in table.schema.names:
        table = table.drop_columns(["split"])
    return table.append_column(pa.field("split", pa.string(), nullable=False), splits)
