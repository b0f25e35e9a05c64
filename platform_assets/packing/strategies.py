"""Packing documents into sequences of at most seq_len tokens: the layout only, from token counts.

`pack(lengths, seq_len, strategy, overlong)` takes each document's token count (EOS included), cuts
overlong documents into pieces (pieces.py) and assigns every piece to a sequence. Tokens are never
touched here: the shard writers copy `tokens[piece_start : piece_start + piece_len]` of `piece_doc`
into sequence j, pieces in order, then pad to seq_len.

Strategies, with their non-padding fraction on the real corpus at seq_len 2048 (34,483 documents,
199 M GPT-2 tokens; overlong="split" / "filter"; benchmarks/packing_efficiency.py):
- `best_fit_decreasing` (default; 99.999% / 99.992%): pieces longest first, each into the sequence
  with the least room that still fits it. O(n log n) for the sort plus O(log64 seq_len) per piece
  (capacity_set.py): 1.3 CPU-seconds per million documents of this distribution (window 1.9,
  streaming 3.4, first fit 3.7).
- `first_fit_decreasing` (99.999% / 99.992%): longest first, each into the lowest-index sequence it
  fits. O(n log n) (a max-tree over sequences), 3.0 CPU-seconds per million: no better layout here.
- `first_fit` (99.79% / 98.68%): document order, lowest-index sequence it fits (the online classic).
- `window` (99.95% / 99.38%): best-fit decreasing within consecutive windows of `window` documents;
  every sequence of a window is closed at its end, so a window's sequences depend on that window only.
- `streaming_best_fit` (99.89% / 99.43%): streaming.StreamingBestFit over the documents in order
  (bounded memory; 99.1% in the steady state of a long stream of documents that fit, see settings.py).
- `none` (82.6% / 37.1%): one piece per sequence (no packing; the padding baseline).

Ties are broken by piece order ((document, start), so by document index) and by sequence index; no
result depends on hashing or set order. Sequences are numbered in the order they were opened
(streaming: the order they were closed, then what `finish` returns); pieces within a sequence are in
the order they were placed.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Literal, get_args

import numpy as np

from platform_assets.contracts import DEFAULT_IO
from platform_assets.packing.pieces import (
    Pieces,
    check_lengths,
    check_overlong,
    check_positive_int,
    document_pieces,
)
from platform_assets.packing.placement import best_fit, first_fit
from platform_assets.packing.streaming import StreamingBestFit

Strategy = Literal["best_fit_decreasing", "first_fit_decreasing", "first_fit", "window", "streaming_best_fit", "none"]
STRATEGIES: tuple[str, ...] = get_args(Strategy)

STREAM_BATCH_DOCS = DEFAULT_IO.batch_rows  # documents per StreamingBestFit.add call in pack(): a stage batch

__all__ = ["STRATEGIES", "Packing", "StreamingBestFit", "Strategy", "pack", "verify_packing"]


@dataclass(frozen=True, eq=False)
class Packing:
    """Pieces of sequence j are pieces[seq_ptr[j]:seq_ptr[j+1]], in sequence order. Arrays are int64
    and read-only (an int64 array given here is frozen in place, not copied). `==` is identity (arrays
    have no single truth value): compare the fields instead."""

    seq_len: int
    seq_ptr: np.ndarray
    """[n_sequences + 1], seq_ptr[0] = 0, strictly increasing (no sequence is empty)."""
    piece_doc: np.ndarray
    """[n_pieces]: index into the input `lengths`."""
    piece_start: np.ndarray
    """[n_pieces]: token offset of the piece within its document."""
    piece_len: np.ndarray
    """[n_pieces]: 1..seq_len."""
    dropped: np.ndarray
    """Documents dropped by overlong="filter" (longer than seq_len), ascending."""

    def __post_init__(self) -> None:
        for name in ("seq_ptr", "piece_doc", "piece_start", "piece_len", "dropped"):
            arr = np.ascontiguousarray(getattr(self, name), dtype=np.int64)
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)

    @property
    def n_sequences(self) -> int:
        return len(self.seq_ptr) - 1

    @property
    def tokens(self) -> int:
        """Non-padding tokens over all sequences."""
        return int(self.piece_len.sum())

    @property
    def efficiency(self) -> float:
        """tokens / (n_sequences * seq_len): the non-padding fraction; 0.0 when there is no sequence."""
        return self.tokens / (self.n_sequences * self.seq_len) if self.n_sequences else 0.0

    @property
    def documents_split(self) -> int:
        """Documents in more than one piece (for strategies other than `none`: exactly the documents
        longer than seq_len under overlong="split"; packing itself never splits a document)."""
        if not self.piece_doc.size:
            return 0
        return int(np.count_nonzero(np.bincount(self.piece_doc) > 1))


def pack(lengths: np.ndarray, seq_len: int, strategy: str = "best_fit_decreasing", overlong: str = "split",
         window: int = 1000, max_open_sequences: int = 1000) -> Packing:
    """Assign every piece of every document (token counts `lengths`, EOS included) to a sequence of at
    most `seq_len` tokens. `window`: documents per window of the `window` strategy;
    `max_open_sequences`: the bound of `streaming_best_fit`."""
    seq_len = check_positive_int("seq_len", seq_len)
    check_overlong(overlong)
    window = check_positive_int("window", window)
    max_open_sequences = check_positive_int("max_open_sequences", max_open_sequences)
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown packing strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    lengths = check_lengths(lengths)
    if strategy == "streaming_best_fit":
        return _streaming(lengths, seq_len, overlong, max_open_sequences)
    pieces = document_pieces(lengths, seq_len, overlong)
    n = pieces.length.size
    if strategy == "none":
        return Packing(seq_len, np.arange(n + 1, dtype=np.int64), pieces.doc, pieces.start, pieces.length,
                       pieces.dropped)
    if strategy == "first_fit":
        order = np.arange(n, dtype=np.int64)
        bins = first_fit(pieces.length.tolist(), seq_len)
    elif strategy == "first_fit_decreasing":
        order = np.argsort(-pieces.length, kind="stable")  # ties: piece order
        bins = first_fit(pieces.length[order].tolist(), seq_len)
    elif strategy == "best_fit_decreasing":
        order = np.argsort(-pieces.length, kind="stable")
        bins = _best_fit_decreasing(pieces.length[order], seq_len)
    else:  # window
        order, bins = _windowed_best_fit(pieces, seq_len, window)
    return _assemble(seq_len, pieces, order, np.asarray(bins, dtype=np.int64))


def _assemble(seq_len: int, pieces: Pieces, order: np.ndarray, bins: np.ndarray) -> Packing:
    """`order[k]` is the k-th piece placed and `bins[k]` its sequence (numbered as opened): group the
    pieces by sequence, keeping placement order within each."""
    by_seq = order[np.argsort(bins, kind="stable")]
    counts = np.bincount(bins, minlength=int(bins.max()) + 1 if bins.size else 0)
    seq_ptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    return Packing(seq_len, seq_ptr, pieces.doc[by_seq], pieces.start[by_seq], pieces.length[by_seq],
                   pieces.dropped)


def _best_fit_decreasing(sizes: np.ndarray, seq_len: int) -> np.ndarray:
    """Sequence of each piece of `sizes` (sorted longest first). Full seq_len pieces come first and
    each opens its own sequence, so they are assigned without the loop (on the real corpus at 2048,
    ~75% of the pieces of split documents)."""
    full = int(np.count_nonzero(sizes == seq_len))
    rest, _ = best_fit(sizes[full:].tolist(), seq_len, full)
    return np.concatenate((np.arange(full, dtype=np.int64), np.asarray(rest, dtype=np.int64)))


def _windowed_best_fit(pieces: Pieces, seq_len: int, window: int) -> tuple[np.ndarray, list[int]]:
    """Best-fit decreasing per window of `window` consecutive documents; sequences numbered window
    by window, so the windows' sequences come out in document order."""
    n = pieces.length.size
    win = pieces.doc // window
    order = np.lexsort((np.arange(n), -pieces.length, win))  # by window, longest first, then piece order
    sizes = pieces.length[order].tolist()
    bounds = np.flatnonzero(np.diff(win[order])) + 1
    bins: list[int] = []
    next_seq = 0
    for a, b in zip(chain([0], bounds.tolist()), chain(bounds.tolist(), [n]), strict=True):
        part, next_seq = best_fit(sizes[a:b], seq_len, next_seq)
        bins += part
    return order, bins


def _streaming(lengths: np.ndarray, seq_len: int, overlong: str, max_open_sequences: int) -> Packing:
    """StreamingBestFit over the documents, batch by batch, in exactly `add`'s order: the full seq_len
    pieces (each a sequence, emitted when its document arrives, before the document's remainder is
    placed) are laid out here with numpy and merged back by (document, then full pieces first)."""
    packer = StreamingBestFit(seq_len, max_open_sequences, overlong)
    seqs: list[list[tuple[int, int, int]]] = []
    closed_at: list[int] = []
    for a in range(0, lengths.size, STREAM_BATCH_DOCS):
        packer._add(lengths[a : a + STREAM_BATCH_DOCS], a, seqs, closed_at)
    seqs += packer.finish()
    counts = np.fromiter(map(len, seqs), np.int64, len(seqs))
    n = int(counts.sum())
    flat = np.fromiter(chain.from_iterable(chain.from_iterable(seqs)), np.int64, 3 * n).reshape(n, 3)
    if overlong == "split":
        full = lengths // seq_len
    else:  # filter: only a document of exactly seq_len is a full piece; longer ones are dropped
        full = (lengths == seq_len).astype(np.int64)
    n_full = int(full.sum())
    full_doc = np.repeat(np.arange(lengths.size, dtype=np.int64), full)
    full_start = (np.arange(n_full, dtype=np.int64) - np.repeat(np.cumsum(full) - full, full)) * seq_len
    # every sequence's place in add()'s output: the document being handled when it was emitted; the
    # full pieces of that document before what closed while placing its remainder; finish() last
    seq_doc = np.concatenate((full_doc, np.asarray(closed_at, np.int64),
                              np.full(len(seqs) - len(closed_at), lengths.size, np.int64)))
    phase = np.concatenate((np.zeros(n_full, np.int64), np.ones(len(seqs), np.int64)))
    order = np.lexsort((np.arange(seq_doc.size), phase, seq_doc))
    doc = np.concatenate((full_doc, flat[:, 0]))
    start = np.concatenate((full_start, flat[:, 1]))
    length = np.concatenate((np.full(n_full, seq_len, np.int64), flat[:, 2]))
    seq_count = np.concatenate((np.ones(n_full, np.int64), counts))[order]
    seq_first = np.concatenate((np.arange(n_full, dtype=np.int64), n_full + np.cumsum(counts) - counts))[order]
    seq_ptr = np.concatenate(([0], np.cumsum(seq_count))).astype(np.int64)
    take = np.repeat(seq_first - seq_ptr[:-1], seq_count) + np.arange(seq_ptr[-1], dtype=np.int64)
    return Packing(seq_len, seq_ptr, doc[take], start[take], length[take], np.asarray(packer.dropped, np.int64))


def verify_packing(packing: Packing, lengths: np.ndarray) -> None:
    """Raise ValueError naming the first violation of the packing contract for these `lengths`: every
    token of every non-dropped document in exactly one piece, a document's pieces contiguous and
    covering it, no empty sequence, no sequence over seq_len, dropped documents longer than seq_len."""
    lengths = check_lengths(lengths)
    p, seq_len, n_docs = packing, packing.seq_len, lengths.size
    n = p.piece_len.size
    if not (p.piece_doc.size == p.piece_start.size == n):
        raise ValueError(f"piece arrays differ in length: doc {p.piece_doc.size}, start {p.piece_start.size}, "
                         f"len {n}")
    if p.seq_ptr.size < 1 or p.seq_ptr[0] != 0 or p.seq_ptr[-1] != n:
        raise ValueError(f"seq_ptr must run from 0 to the number of pieces ({n})")
    empty = np.flatnonzero(np.diff(p.seq_ptr) < 1)
    if empty.size:
        raise ValueError(f"sequence {int(empty[0])} has no piece (seq_ptr must be strictly increasing)")
    bad = np.flatnonzero((p.piece_len < 1) | (p.piece_len > seq_len))
    if bad.size:
        raise ValueError(f"piece {int(bad[0])} has length {int(p.piece_len[bad[0]])}, not in 1..{seq_len}")
    if n:
        per_seq = np.add.reduceat(p.piece_len, p.seq_ptr[:-1])
        over = np.flatnonzero(per_seq > seq_len)
        if over.size:
            raise ValueError(f"sequence {int(over[0])} holds {int(per_seq[over[0]])} tokens > seq_len {seq_len}")
    bad = np.flatnonzero((p.piece_doc < 0) | (p.piece_doc >= n_docs))
    if bad.size:
        raise ValueError(f"piece {int(bad[0])} names document {int(p.piece_doc[bad[0]])} of {n_docs}")
    d = p.dropped
    if d.size and (np.any(np.diff(d) <= 0) or d[0] < 0 or d[-1] >= n_docs):
        raise ValueError("dropped must be ascending, distinct document indexes")
    short = d[lengths[d] <= seq_len]
    if short.size:
        raise ValueError(f"document {int(short[0])} was dropped but fits in seq_len {seq_len}")
    covered = np.zeros(n_docs, bool)
    covered[p.piece_doc] = True
    both = np.flatnonzero(covered[d])
    if both.size:
        raise ValueError(f"document {int(d[both[0]])} is dropped and also has pieces")
    covered[d] = True
    missing = np.flatnonzero(~covered)
    if missing.size:
        raise ValueError(f"document {int(missing[0])} is neither packed nor dropped")
    order = np.lexsort((p.piece_start, p.piece_doc))
    doc, start, ln = p.piece_doc[order], p.piece_start[order], p.piece_len[order]
    first = np.ones(n, bool)
    first[1:] = doc[1:] != doc[:-1]
    expected = np.where(first, 0, np.concatenate(([0], start[:-1] + ln[:-1])))
    gap = np.flatnonzero(start != expected)
    if gap.size:
        i = int(gap[0])
        raise ValueError(f"document {int(doc[i])}: a piece starts at token {int(start[i])}, expected "
                         f"{int(expected[i])} (pieces must be contiguous, non-overlapping, from 0)")
    last = np.ones(n, bool)
    last[:-1] = doc[1:] != doc[:-1]
    short_cover = np.flatnonzero((start + ln)[last] != lengths[doc[last]])
    if short_cover.size:
        i = int(doc[last][short_cover[0]])
        raise ValueError(f"document {i}: pieces cover {int((start + ln)[last][short_cover[0]])} of its "
                         f"{int(lengths[i])} tokens")
