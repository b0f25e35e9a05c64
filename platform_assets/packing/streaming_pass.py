"""The streaming strategy (`streaming_best_fit`): the input is read once; memory is the tokens of the
documents still in open sequences (at most max_open_sequences x seq_len per set: 8 MiB at the
defaults) plus one record batch. The layout emitted so far is kept (32 B per piece) for the same
conservation check as the offline strategies, which reads the set's lengths back from the survey's
spill files at the end: 8 B per document beside the layout's 32 B per piece."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from itertools import chain

import numpy as np
import pyarrow as pa

from platform_assets.packing.emission import Emitter, exclusion_rows, set_stats, verify_set
from platform_assets.packing.offline_pass import Packed
from platform_assets.packing.provenance_sink import ProvenanceSink
from platform_assets.packing.samples import ROWS_PER_ROW_GROUP
from platform_assets.packing.settings import PackingSettings
from platform_assets.packing.shard_writers import ShardSetHeader, ShardSetWriter
from platform_assets.packing.strategies import Packing, StreamingBestFit
from platform_assets.packing.survey import ConservationError, PackSet, Survey, TokenizedInputError, flatten
from platform_assets.packing.token_batches import token_batches
from platform_assets.packing.token_store import ArrayTokens
from platform_assets.progress import tracked_batches
from platform_assets.storage import Storage


@dataclass
class _OpenDoc:
    id: str
    chunk: int
    tokens: np.ndarray
    mask: np.ndarray | None
    remaining: int
    loss_tokens: int


@dataclass
class StreamSet:
    s: PackSet
    packer: StreamingBestFit
    emitter: Emitter
    docs: dict[int, _OpenDoc] = field(default_factory=dict)  # documents with tokens not yet emitted
    next_doc: int = 0
    dropped_seen: int = 0
    # The layout emitted so far, for the conservation check at the end: 32 B per piece, like the
    # provenance rows (the set's tokens are never held, only these).
    counts: list[np.ndarray] = field(default_factory=list)  # per emitted run: pieces per sequence
    pieces: list[np.ndarray] = field(default_factory=list)  # per emitted run: [n, 3] (doc, start, len)
    excluded: list[_OpenDoc] = field(default_factory=list)

    def emit(self, closed: list[list[tuple[int, int, int]]]) -> None:
        """Gather the closed sequences' tokens from the open documents, write them, free finished ones."""
        for a in range(0, len(closed), ROWS_PER_ROW_GROUP):
            part = closed[a : a + ROWS_PER_ROW_GROUP]
            counts = np.fromiter(map(len, part), np.int64, len(part))
            n = int(counts.sum())
            flat = np.fromiter(chain.from_iterable(chain.from_iterable(part)), np.int64, 3 * n).reshape(n, 3)
            doc, start, length = flat[:, 0], flat[:, 1], flat[:, 2]
            used = np.unique(doc)
            open_docs = [self.docs[int(d)] for d in used]
            values = np.concatenate([o.tokens for o in open_docs])
            masks = None if open_docs[0].mask is None else np.concatenate([o.mask for o in open_docs])
            doc_len = np.fromiter((o.tokens.size for o in open_docs), np.int64, len(open_docs))
            doc_start = np.cumsum(doc_len) - doc_len
            at = np.searchsorted(used, doc)
            seq_ptr = np.concatenate(([0], np.cumsum(counts)))
            ids = pa.array([open_docs[k].id for k in at.tolist()], pa.string())
            chunks = np.fromiter((open_docs[k].chunk for k in at.tolist()), np.int32, n)
            self.emitter.emit(seq_ptr, doc_start[at] + start, length, start, ArrayTokens(values, masks), ids, chunks)
            self.counts.append(counts)
            self.pieces.append(flat)
            for d, ln in zip(doc.tolist(), length.tolist(), strict=True):
                o = self.docs[d]
                o.remaining -= ln
                if o.remaining == 0:
                    del self.docs[d]

    def take_dropped(self) -> None:
        for d in self.packer.dropped[self.dropped_seen :]:
            self.excluded.append(self.docs.pop(d))
        self.dropped_seen = len(self.packer.dropped)

    def packing(self) -> Packing:
        counts = np.concatenate(self.counts) if self.counts else np.zeros(0, np.int64)
        flat = np.concatenate(self.pieces) if self.pieces else np.zeros((0, 3), np.int64)
        return Packing(self.packer.seq_len, np.concatenate(([0], np.cumsum(counts))), flat[:, 0], flat[:, 1],
                       flat[:, 2], np.asarray(self.packer.dropped, np.int64))


def pack_streaming(storage: Storage, rel: str, survey: Survey, settings: PackingSettings, header: ShardSetHeader,
                    writer: ShardSetWriter, provenance: ProvenanceSink, batch_rows: int) -> Packed:
    has_mask = survey.has_loss_mask
    states = [
        StreamSet(s, StreamingBestFit(settings.seq_len, settings.max_open_sequences, settings.overlong),
                   Emitter(writer.group(s.split, s.source, s.documents), header, settings.samples_per_shard,
                           partial(provenance.add, i)))
        for i, s in enumerate(survey.sets)
    ]
    columns = ["id", "chunk", "input_ids"] + (["loss_mask"] if has_mask else [])
    row = 0
    batches = token_batches(storage, rel, columns, batch_rows)  # bounded by tokens, as offline_pass
    for batch in tracked_batches(batches, "pack", len(survey.row_set), "rows"):
        in_batch = survey.row_set[row : row + batch.num_rows]
        for i in np.unique(in_batch).tolist():
            st = states[i]
            rows = np.flatnonzero(in_batch == i)
            take = pa.array(rows)
            ids = batch.column("id").take(take).cast(pa.string()).to_pylist()
            chunks = batch.column("chunk").take(take).to_numpy().astype(np.int32).tolist()
            lengths = st.s.lengths[st.next_doc : st.next_doc + rows.size]
            loss_tokens = st.s.loss_tokens[st.next_doc : st.next_doc + rows.size]

            def describe(j, ids=ids, chunks=chunks, st=st):
                return f"document {ids[j]} chunk {chunks[j]} ({st.s.name})"

            flat, flat_mask = flatten(batch.column("input_ids").take(take),
                                       batch.column("loss_mask").take(take) if has_mask else None, lengths,
                                       loss_tokens, header.vocab_size, describe)
            starts = np.cumsum(lengths) - lengths
            for j, (a, ln, loss) in enumerate(zip(starts.tolist(), lengths.tolist(), loss_tokens.tolist(),
                                                  strict=True)):
                # copies: a view would keep the whole batch alive while the document waits in the packer
                st.docs[st.next_doc + j] = _OpenDoc(
                    ids[j], chunks[j], flat[a : a + ln].astype(np.int32),
                    None if flat_mask is None else flat_mask[a : a + ln].copy(), ln, loss)
            closed = st.packer.add(lengths, st.next_doc)
            st.take_dropped()
            st.emit(closed)
            st.next_doc += rows.size
        row += batch.num_rows
    if row != len(survey.row_set):
        raise TokenizedInputError(f"{rel} changed while being packed: {row} rows now, {len(survey.row_set)} before")
    stats, exclusions = [], []
    for st in states:
        st.emit(st.packer.finish())
        if st.docs:
            raise ConservationError(f"{st.s.name}: {len(st.docs)} document(s) still hold unpacked tokens")
        packing = st.packing()
        verify_set(st.s, packing)
        ex = st.excluded
        exclusions.append(exclusion_rows(st.s, [o.id for o in ex], [o.chunk for o in ex],
                                          [o.tokens.size for o in ex], settings.seq_len))
        stats.append(set_stats(st.s, packing, int(st.s.loss_tokens.sum()) - sum(o.loss_tokens for o in ex),
                               sum(o.tokens.size for o in ex)))
    return stats, exclusions


