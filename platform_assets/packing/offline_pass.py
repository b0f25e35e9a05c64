"""Offline packing strategies (best_fit_decreasing, first_fit_decreasing, first_fit, window, none):
every length of a set is known before anything is placed (the survey), then the token lists of the
sets of a pass are read into token stores (token_store.py) -- in memory while the pass's tokens fit
the cap (stage.in_memory_tokens), else a spill file per set -- and each run of 1024 samples is
gathered from its store. A set of more than `max_pieces_in_memory` pieces is laid out and emitted
window by window (windows.py)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from platform_assets.packing.emission import Emitter, SetStats, exclusion_rows, set_stats, summed_stats, verify_set
from platform_assets.packing.provenance_sink import ProvenanceSink
from platform_assets.packing.settings import PackingSettings
from platform_assets.packing.shard_writers import ShardSetHeader, ShardSetWriter
from platform_assets.packing.strategies import pack
from platform_assets.packing.survey import PackSet, Survey, TokenizedInputError, describe, flatten
from platform_assets.packing.token_batches import part_token_batches
from platform_assets.packing.token_store import HeldTokens, SpilledTokens
from platform_assets.packing.windows import placement_windows
from platform_assets.parquet_parts import part_files
from platform_assets.storage import Storage

Packed = tuple[list[SetStats], list[pa.Table]]  # stats, exclusions per set


def plan_passes(sets: list[PackSet], max_tokens: int) -> list[list[int]]:
    """Consecutive sets whose tokens fit `max_tokens` together (a larger set is a pass by itself)."""
    passes: list[list[int]] = []
    held = 0
    for i, s in enumerate(sets):
        if passes and held + s.tokens <= max_tokens:
            passes[-1].append(i)
            held += s.tokens
        else:
            passes.append([i])
            held = s.tokens
    return passes


@dataclass
class _Held:
    """A set's tokens in a store, in document order: a document's tokens start where the tokens of the
    documents before it end."""

    store: HeldTokens | SpilledTokens
    next_doc: int = 0  # documents filled so far (they arrive in input order)
    next_token: int = 0  # their tokens


def _parts(storage: Storage, rel: str) -> list[tuple[str, int]]:
    """(path in the storage's filesystem, rows) of every part, in the order token_batches reads them."""
    out = []
    for path in part_files(storage, rel):
        with storage.fs.open_input_file(path) as f:
            out.append((path, pq.ParquetFile(f).metadata.num_rows))
    return out


def _read_sets(storage: Storage, rel: str, survey: Survey, members: list[int], batch_rows: int,
               vocab_size: int, max_tokens: int, spill_dir: Path) -> dict[int, _Held]:
    """The tokens (and masks) of the sets `members`: in memory when they fit `max_tokens` (the pass
    planner groups only sets that fit together), else spilled to a file under `spill_dir`. Parts holding
    none of their rows are not read: tokenized_documents writes one directory of parts per set, so a
    pass reads its own sets only."""
    has_mask = survey.has_loss_mask
    held = {}
    for i in members:
        s = survey.sets[i]
        store = (HeldTokens(s.tokens, has_mask) if s.tokens <= max_tokens
                 else SpilledTokens(spill_dir, f"set-{i:05d}", has_mask))
        held[i] = _Held(store)
    columns = ["input_ids"] + (["loss_mask"] if has_mask else [])
    row = 0
    for part, part_rows in _parts(storage, rel):
        part_sets = survey.row_set[row : row + part_rows]  # read once from the survey's file, for every batch
        if not np.isin(part_sets, members).any():
            row += part_rows
            continue
        part_start = row
        # batches bounded by tokens, a row group at a time (token_batches.py)
        for batch in part_token_batches(storage, part, columns, batch_rows):
            in_batch = part_sets[row - part_start : row - part_start + batch.num_rows]
            for i in members:
                rows = np.flatnonzero(in_batch == i)
                if not rows.size:
                    continue
                s, h = survey.sets[i], held[i]
                d0, d1 = h.next_doc, h.next_doc + rows.size
                ids, masks = batch.column("input_ids"), batch.column("loss_mask") if has_mask else None
                if rows.size < batch.num_rows:  # a batch of one set (a part per set) is used as it is, not copied
                    take = pa.array(rows)
                    ids, masks = ids.take(take), masks.take(take) if masks is not None else None
                flat, flat_mask = flatten(ids, masks, s.lengths[d0:d1], s.loss_tokens[d0:d1], vocab_size,
                                          lambda j, s=s, d0=d0: describe(s, d0 + j))
                h.store.put(h.next_token, flat, flat_mask)
                h.next_doc, h.next_token = d1, h.next_token + flat.size
            row += batch.num_rows
    if row != len(survey.row_set):
        raise TokenizedInputError(f"{rel} changed while being packed: {row} rows now, {len(survey.row_set)} before")
    for h in held.values():
        h.store.seal()
    return held


def pack_offline(storage: Storage, rel: str, survey: Survey, settings: PackingSettings, header: ShardSetHeader,
                  writer: ShardSetWriter, provenance: ProvenanceSink, batch_rows: int, max_tokens: int,
                  spill_dir: Path) -> Packed:
    """Every set packed by `settings.strategy`, at most `settings.max_pieces_in_memory` pieces at once
    (windows.py); a set of more than `max_tokens` tokens is spilled to `spill_dir` (the caller's,
    removed by it)."""
    stats, exclusions = [], []
    strategy_window = settings.window if settings.strategy == "window" else None
    for members in plan_passes(survey.sets, max_tokens):
        held = _read_sets(storage, rel, survey, members, batch_rows, header.vocab_size, max_tokens, spill_dir)
        for i in members:
            s = survey.sets[i]
            h = held.pop(i)
            emitter = Emitter(writer.group(s.split, s.source, s.documents), header, settings.samples_per_shard,
                              partial(provenance.add, i))
            parts = []
            window_token = 0  # the store's token where the window's first document starts
            try:
                for d0, d1 in placement_windows(s.lengths, settings.seq_len, settings.overlong,
                                                settings.max_pieces_in_memory, strategy_window):
                    part = s.rows(d0, d1)
                    packing = pack(part.lengths, settings.seq_len, settings.strategy, settings.overlong,
                                   settings.window, settings.max_open_sequences)
                    verify_set(part, packing)
                    starts = window_token + np.cumsum(part.lengths) - part.lengths
                    emitter.emit(packing.seq_ptr, starts[packing.piece_doc] + packing.piece_start,
                                 packing.piece_len, packing.piece_start, h.store, part.ids,
                                 part.chunks[packing.piece_doc], packing.piece_doc)
                    window_token += part.tokens
                    d = packing.dropped
                    exclusions.append(exclusion_rows(part, part.ids.take(pa.array(d)).to_pylist() if d.size else [],
                                                     part.chunks[d].tolist(), part.lengths[d].tolist(),
                                                     settings.seq_len))
                    parts.append(set_stats(part, packing, int(part.loss_tokens.sum() - part.loss_tokens[d].sum()),
                                           int(part.lengths[d].sum())))
                    del packing, starts  # the next window's layout is made without this one's
            finally:
                h.store.close()
            stats.append(summed_stats(s.split, s.source, settings.seq_len, parts))
    return stats, exclusions
