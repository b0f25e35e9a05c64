"""What both packing passes share once a set is packed: emitting its sequences (gather, shard writer,
provenance), its statistics, its exclusions and the conservation check of its layout."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

import numpy as np
import pyarrow as pa

from platform_assets.contracts import exclusions_schema
from platform_assets.packing.provenance import provenance_rows
from platform_assets.packing.shard_writers import ShardGroupWriter, ShardSetHeader, gather_samples
from platform_assets.packing.strategies import Packing, verify_packing
from platform_assets.packing.survey import ConservationError, PackSet
from platform_assets.packing.token_store import RunTokens

OVERLONG_RULE = "overlong"

# Documents packing dropped: the shared exclusion columns (value "5000 > 2048": the chunk's tokens
# against seq_len; bytes null: tokenized_documents no longer carries the text, `tokens` says the
# size), plus where the chunk was.
EXCLUSIONS_SCHEMA = exclusions_schema("packing", (
    pa.field("split", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("chunk", pa.int32(), nullable=False),
    pa.field("tokens", pa.int64(), nullable=False),
))


@dataclass(frozen=True)
class SetStats:
    """One (split, source); `documents` are input rows, i.e. (document, chunk) pairs."""

    split: str
    source: str
    seq_len: int
    documents: int
    pieces: int
    sequences: int
    tokens: int  # packed (non-padding) tokens
    loss_tokens: int
    documents_split: int  # in more than one piece
    documents_dropped: int  # overlong="filter"
    tokens_dropped: int

    @property
    def efficiency(self) -> float:
        """Non-padding fraction of the sequences' positions."""
        return self.tokens / (self.sequences * self.seq_len) if self.sequences else 0.0

    def as_dict(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__} | {"efficiency": round(self.efficiency, 6)}


@dataclass
class Emitter:
    """Writes runs of a set's sequences to the shard writer and their provenance rows to `provenance`
    (the set's `ProvenanceSink.add`)."""

    writer: ShardGroupWriter
    header: ShardSetHeader
    samples_per_shard: int
    provenance: Callable[[pa.Table], None]
    sequences: int = 0

    def emit(self, seq_ptr: np.ndarray, piece_src: np.ndarray, piece_len: np.ndarray, piece_start: np.ndarray,
             tokens: RunTokens, ids: pa.Array | pa.ChunkedArray, chunks: np.ndarray,
             piece_doc: np.ndarray | None = None) -> None:
        """Sequences j (pieces seq_ptr[j]:seq_ptr[j+1]); piece p is tokens piece_src[p]:+piece_len[p] of
        the store (token_store.py), which gives each run (at most ROWS_PER_ROW_GROUP samples) its pieces.

        `ids`: each piece's document id, or with `piece_doc` each document's (piece p's is
        ids[piece_doc[p]]). Ids and provenance rows are made a run at a time: for a whole set at once
        they were ~120 B a piece (packed_shards' peak grew with the corpus's largest set).

        Runs end where the writer's row groups and shards do (`samples_to_boundary`), so the writer
        never joins two runs into a copy: a set packed in several placement windows (windows.py) put
        every run after its first window across a row-group boundary."""
        h = self.header
        seq_ptr = np.asarray(seq_ptr, np.int64)
        n = len(seq_ptr) - 1
        a = 0
        while a < n:
            b = min(a + self.writer.samples_to_boundary(), n)
            p0, p1 = int(seq_ptr[a]), int(seq_ptr[b])
            run_ids = ids.slice(p0, p1 - p0) if piece_doc is None else ids.take(pa.array(piece_doc[p0:p1], pa.int64()))
            if isinstance(run_ids, pa.ChunkedArray):
                run_ids = run_ids.combine_chunks()
            src, values, mask_values = tokens.run(piece_src[p0:p1], piece_len[p0:p1])
            run = gather_samples(h.seq_len, h.pad_id, h.token_dtype, seq_ptr[a : b + 1] - p0, src,
                                 piece_len[p0:p1], values, mask_values)
            self.writer.add(run, run_ids)
            self.provenance(provenance_rows(
                self.writer.split, self.writer.source, self.samples_per_shard, self.sequences + a,
                seq_ptr[a : b + 1], run_ids, chunks[p0:p1], piece_start[p0:p1], piece_len[p0:p1]))
            a = b
        self.sequences += n


def exclusion_rows(s: PackSet, ids: list[str], chunks: list[int], lengths: list[int], seq_len: int) -> pa.Table:
    n = len(ids)
    return pa.table({
        "id": pa.array(ids, pa.string()),
        "rule": pa.array([OVERLONG_RULE] * n, pa.string()),
        "value": pa.array([f"{t} > {seq_len}" for t in lengths], pa.string()),
        "bytes": pa.nulls(n, pa.int64()),
        "split": pa.array([s.split] * n, pa.string()),
        "source": pa.array([s.source] * n, pa.string()),
        "chunk": pa.array(chunks, pa.int32()),
        "tokens": pa.array(lengths, pa.int64()),
    }, schema=EXCLUSIONS_SCHEMA)


def set_stats(s: PackSet, packing: Packing, loss_tokens: int, dropped_tokens: int) -> SetStats:
    return SetStats(
        s.split, s.source, packing.seq_len, s.documents, len(packing.piece_len), packing.n_sequences,
        packing.tokens, loss_tokens, packing.documents_split, len(packing.dropped), dropped_tokens)


# SetStats' fields after split, source and seq_len: what adds up over windows and sets
_COUNTS = tuple(f.name for f in fields(SetStats))[3:]


def summed_stats(split: str, source: str, seq_len: int, parts: list[SetStats]) -> SetStats:
    """The counts of `parts` added up: a set's from its placement windows (windows.py), the stage's
    totals from its sets."""
    return SetStats(split, source, seq_len, *(sum(getattr(p, f) for p in parts) for f in _COUNTS))


def verify_set(s: PackSet, packing: Packing) -> None:
    """The conservation check of `packing` against the lengths of `s` (read whole: a window's, or the
    streaming strategy's set, whose layout it holds anyway)."""
    try:
        verify_packing(packing, s.lengths[: s.documents])
    except ValueError as e:
        raise ConservationError(f"{s.name}: {e}") from e


