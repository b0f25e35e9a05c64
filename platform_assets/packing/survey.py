"""The survey pass of packing: one read of tokenized_documents' small columns gives the (split, source)
sets, each row's set and each document's length and loss tokens (for offline strategies also each
row's chunk and id), all of them written to files in the run's spill directory (spilled_columns.py,
id_store.py) and read back a window or a batch at a time, so that no per-row state stays in memory;
and the checked flattening of token lists into arrays that both packing passes use. Input that breaks the
tokenized_documents contract raises TokenizedInputError naming the document."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from platform_assets.packing.id_store import SpilledIds
from platform_assets.packing.spilled_columns import SpilledColumn
from platform_assets.parquet_parts import output_rows, read_batches
from platform_assets.progress import tracked_batches
from platform_assets.storage import Storage


class ConservationError(RuntimeError):
    """Packing lost, duplicated or invented tokens: a bug, never a property of the input."""


class TokenizedInputError(ValueError):
    """The tokenized_documents input breaks its contract (the message names the document)."""


@dataclass
class PackSet:
    split: str
    source: str
    # per document (input row) of the set, in input order: the survey's sets hold them on disk
    # (spilled_columns.py), a placement window (`rows`) in memory
    lengths: np.ndarray | SpilledColumn  # int64 num_tokens
    loss_tokens: np.ndarray | SpilledColumn  # int64
    chunks: np.ndarray | SpilledColumn | None = None  # offline strategies only, as the ids
    id_store: SpilledIds | None = None  # the set's ids on disk (the survey's sets)
    ids: pa.Array | None = None  # the rows' ids in memory (a placement window's: `rows`)

    @property
    def name(self) -> str:
        return f"{self.split}/{self.source}"

    @property
    def documents(self) -> int:
        return len(self.lengths)

    @property
    def tokens(self) -> int:
        return int(self.lengths.sum())

    def rows(self, d0: int, d1: int) -> PackSet:
        """Documents d0..d1-1 of the set, in memory (read from the set's spilled columns and id store,
        or views of a set in memory): a placement window (windows.py)."""
        ids = (self.id_store.range(d0, d1) if self.id_store is not None else
               self.ids.slice(d0, d1 - d0) if self.ids is not None else None)
        return PackSet(self.split, self.source, self.lengths[d0:d1], self.loss_tokens[d0:d1],
                       self.chunks[d0:d1] if self.chunks is not None else None, ids=ids)


class RowSets:
    """Each input row's set (an index into Survey.sets), read by row range: on disk in the order the
    survey met the sets, mapped to their sorted order on reading."""

    def __init__(self, column: SpilledColumn, remap: np.ndarray):
        self.column, self.remap = column, remap

    def __len__(self) -> int:
        return len(self.column)

    def __getitem__(self, rows: slice) -> np.ndarray:
        return self.remap[self.column[rows]]


@dataclass
class Survey:
    sets: list[PackSet]  # sorted by (split, source)
    row_set: RowSets  # per input row: index into sets
    has_loss_mask: bool


def _no_nulls(batch: pa.RecordBatch, columns: list[str], rows_before: int) -> None:
    for c in columns:
        col = batch.column(c)
        if col.null_count:
            raise TokenizedInputError(f"tokenized_documents row {rows_before + _first_null(col)}: {c} is null")


@dataclass
class _SetColumns:
    lengths: SpilledColumn
    loss: SpilledColumn
    chunks: SpilledColumn | None
    ids: SpilledIds | None

    def close(self) -> None:
        for c in (self.lengths, self.loss, self.chunks, self.ids):
            if c is not None:
                c.close()


def survey(storage: Storage, rel: str, batch_rows: int, spill_dir: Path, keep_ids: bool) -> Survey:
    """One pass over the small columns: the sets, each row's set, each document's length and loss
    tokens; with `keep_ids` (offline packing) also its id and chunk. All of them per row go to files
    in `spill_dir` (spilled_columns.py, id_store.py), which the caller removes."""
    columns = ["split", "source", "num_tokens", "loss_tokens"] + (["id", "chunk"] if keep_ids else [])
    keys: dict[tuple[str, str], int] = {}
    stores: list[_SetColumns] = []  # by the order sets are met
    row_sets = SpilledColumn(spill_dir / "row-sets.i32", np.int32)
    rows, has_loss_mask = 0, False

    def store(k: int) -> _SetColumns:
        while len(stores) <= k:
            j = len(stores)
            stores.append(_SetColumns(SpilledColumn(spill_dir / f"lengths-{j:05d}.i64", np.int64),
                                      SpilledColumn(spill_dir / f"loss-{j:05d}.i64", np.int64),
                                      SpilledColumn(spill_dir / f"chunks-{j:05d}.i32", np.int32) if keep_ids else None,
                                      SpilledIds(spill_dir / f"ids-{j:05d}.arrow") if keep_ids else None))
        return stores[k]

    try:
        batches = read_batches(storage, rel, columns, batch_rows)
        for batch in tracked_batches(batches, "survey", output_rows(storage, rel), "rows"):
            _no_nulls(batch, columns, rows)
            split, source = batch.column("split").cast(pa.string()), batch.column("source").cast(pa.string())
            encoded = pc.dictionary_encode(pc.binary_join_element_wise(split, source, "\x00"))
            local = np.empty(len(encoded.dictionary), np.int32)
            for i, key in enumerate(encoded.dictionary.to_pylist()):
                local[i] = keys.setdefault(tuple(key.split("\x00")), len(keys))
            batch_sets = local[encoded.indices.to_numpy()]
            n_tok = batch.column("num_tokens").to_numpy().astype(np.int64)
            n_loss = batch.column("loss_tokens").to_numpy().astype(np.int64)
            bad = np.flatnonzero((n_tok < 1) | (n_loss < 0) | (n_loss > n_tok))
            if bad.size:
                i = int(bad[0])
                raise TokenizedInputError(f"tokenized_documents row {rows + i}: num_tokens {n_tok[i]}, loss_tokens "
                                          f"{n_loss[i]} (need num_tokens >= 1, 0 <= loss_tokens <= num_tokens)")
            has_loss_mask = has_loss_mask or bool(np.any(n_loss != n_tok))
            row_sets.append(batch_sets)
            ids = batch.column("id").cast(pa.string()) if keep_ids else None
            chunks = batch.column("chunk").to_numpy().astype(np.int32) if keep_ids else None
            for k in np.unique(batch_sets).tolist():
                st = store(k)
                take = None if len(local) == 1 else np.flatnonzero(batch_sets == k)
                st.lengths.append(n_tok if take is None else n_tok[take])
                st.loss.append(n_loss if take is None else n_loss[take])
                if keep_ids:
                    st.chunks.append(chunks if take is None else chunks[take])
                    st.ids.append(ids if take is None else ids.take(pa.array(take)))
            rows += batch.num_rows
    except BaseException:
        for st in stores:
            st.close()
        row_sets.close()
        raise
    if not rows:
        row_sets.close()
        raise TokenizedInputError(f"no tokenized documents under {rel}")
    order = sorted(keys)
    remap = np.empty(len(keys), np.int32)
    for new, key in enumerate(order):
        remap[keys[key]] = new
    sets = []
    for split, source in order:
        st = stores[keys[(split, source)]]
        if st.ids is not None:
            st.ids.seal()
        sets.append(PackSet(split, source, st.lengths, st.loss, st.chunks, id_store=st.ids))
    return Survey(sets, RowSets(row_sets, remap), has_loss_mask)


def _first_null(array: pa.Array) -> int:
    return int(np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))[0])


def flatten(
    input_ids: pa.Array,
    loss_mask: pa.Array | None,
    lengths: np.ndarray,
    loss_tokens: np.ndarray,
    vocab_size: int,
    describe: Callable[[int], str],
) -> tuple[np.ndarray, np.ndarray | None]:
    """Rows' tokens (int32) and masks (uint8; a null mask is all ones) end to end, checked against the
    rows' num_tokens and loss_tokens and the vocabulary. `describe(i)` names row i in an error."""
    if input_ids.null_count:
        raise TokenizedInputError(f"{describe(_first_null(input_ids))}: input_ids is null")
    lens = pc.list_value_length(input_ids).to_numpy().astype(np.int64)
    bad = np.flatnonzero(lens != lengths)
    if bad.size:
        i = int(bad[0])
        raise TokenizedInputError(f"{describe(i)}: {lens[i]} input_ids but num_tokens {lengths[i]}")
    values = pc.list_flatten(input_ids).to_numpy()
    if values.dtype.kind not in "iu":
        raise TokenizedInputError(f"input_ids must be lists of integers, got {input_ids.type}")
    starts = np.cumsum(lens) - lens
    if values.size and (int(values.min()) < 0 or int(values.max()) >= vocab_size):
        pos = int(np.argmax((values < 0) | (values >= vocab_size)))
        i = int(np.searchsorted(starts, pos, side="right") - 1)
        raise TokenizedInputError(f"{describe(i)}: token id {int(values[pos])} outside the vocabulary "
                                  f"(vocab_size {vocab_size})")
    values = values.astype(np.int32, copy=False)
    if loss_mask is None:
        return values, None
    mask = np.ones(len(values), np.uint8)
    valid = loss_mask.is_valid().to_numpy(zero_copy_only=False)
    if valid.any():
        given = loss_mask.filter(pa.array(valid))
        given_lens = pc.list_value_length(given).to_numpy().astype(np.int64)
        bad = np.flatnonzero(given_lens != lens[valid])
        if bad.size:
            i = int(np.flatnonzero(valid)[bad[0]])
            raise TokenizedInputError(f"{describe(i)}: loss_mask has {given_lens[bad[0]]} entries, input_ids {lens[i]}")
        within = np.arange(int(given_lens.sum()), dtype=np.int64)
        dst = np.repeat(starts[valid] - (np.cumsum(given_lens) - given_lens), given_lens) + within
        given_values = pc.list_flatten(given).to_numpy()
        if given_values.size and (given_values.min() < 0 or given_values.max() > 1):
            raise TokenizedInputError(f"loss_mask values must be 0 or 1 ({describe(0)} and its batch)")
        mask[dst] = given_values
    sums = np.add.reduceat(mask, starts, dtype=np.int64) if starts.size else np.zeros(0, np.int64)
    bad = np.flatnonzero(sums != loss_tokens)
    if bad.size:
        i = int(bad[0])
        raise TokenizedInputError(f"{describe(i)}: loss_mask has {sums[i]} ones but loss_tokens {loss_tokens[i]}")
    return values, mask


def describe(s: PackSet, doc: int) -> str:
    if s.id_store is not None:
        return f"document {s.id_store[doc]} chunk {int(s.chunks[doc])} ({s.name})"
    return f"{s.name} document #{doc}"
