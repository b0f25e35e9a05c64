"""Streaming best-fit packing: bounded memory, documents one batch at a time.

At most `max_open_sequences` sequences are open. A piece goes into the open sequence with the least
room that still fits it (ties: the lowest sequence index, i.e. the one opened first). If none fits, a
new sequence opens; when that would make one more than the bound, the fullest open sequence (least
room left; ties: opened first) is closed first. A sequence that becomes exactly full is closed at
once, and a full seq_len piece of a split document is a closed sequence by itself, so neither ever
takes a slot. Memory is O(max_open_sequences + seq_len) whatever the corpus size. `finish` re-packs
the pieces still held (best-fit decreasing) when that needs fewer sequences.

The result depends only on the sequence of documents, not on how they are cut into batches.
"""

from __future__ import annotations

from heapq import heappop, heappush

import numpy as np

from platform_assets.packing.capacity_set import CapacitySet
from platform_assets.packing.pieces import check_lengths, check_overlong, check_positive_int
from platform_assets.packing.placement import best_fit

Piece = tuple[int, int, int]  # (document, token start within it, length)


class StreamingBestFit:
    """Bounded memory: at most max_open_sequences sequences open; when one more would open, the fullest
    open one is closed (emitted). Documents arrive one batch at a time."""

    def __init__(self, seq_len: int, max_open_sequences: int = 1000, overlong: str = "split") -> None:
        self.seq_len = check_positive_int("seq_len", seq_len)
        self.max_open_sequences = check_positive_int("max_open_sequences", max_open_sequences)
        self.overlong = check_overlong(overlong)
        self.dropped: list[int] = []
        """Documents dropped by overlong="filter", ascending."""
        self._open: dict[int, list[Piece]] = {}  # sequence index (opening order) -> its pieces
        self._room = CapacitySet(self.seq_len)  # remaining capacities 1..seq_len-1 of open sequences
        self._by_room: dict[int, list[int]] = {}  # remaining capacity -> heap of sequence indexes
        self._next_seq = 0
        self._next_doc = 0

    @property
    def n_open(self) -> int:
        """Sequences open now (never more than max_open_sequences)."""
        return len(self._open)

    def add(self, lengths: np.ndarray, first_doc: int) -> list[list[Piece]]:
        """Documents first_doc, first_doc+1, ... with these lengths; returns the sequences closed by
        this call, each a list of (doc, start, length) pieces in sequence order."""
        closed: list[list[Piece]] = []
        self._add(lengths, first_doc, closed, None)
        return closed

    def _add(self, lengths: np.ndarray, first_doc: int, closed: list[list[Piece]],
             closed_at: list[int] | None) -> None:
        """`add`, appending to `closed`. With `closed_at` (a list), the full seq_len pieces of split
        documents are left out (pack() lays them out with numpy: a Python list per full piece was ~57%
        of the time on 1 M documents of the corpus's distribution, 70% of whose pieces are full) and
        closed_at gets, per sequence closed, the document being placed when it closed, so the caller
        can put everything back in `add`'s order."""
        if isinstance(first_doc, bool) or not isinstance(first_doc, int | np.integer):
            raise TypeError(f"first_doc must be an int, got {type(first_doc).__name__}")
        if first_doc < self._next_doc:
            raise ValueError(f"first_doc {first_doc} is before the end of the previous batch ({self._next_doc}): "
                             "documents must arrive in increasing index order")
        lens = check_lengths(lengths).tolist()
        self._next_doc = int(first_doc) + len(lens)
        # one loop with the state in locals: no method call or attribute lookup per document
        seq_len, max_open, filtering = self.seq_len, self.max_open_sequences, self.overlong == "filter"
        open_, by_room, rooms, take = self._open, self._by_room, self._room, self._take
        ceiling, add_room, discard_room = rooms.ceiling, rooms.add, rooms.discard
        next_seq = self._next_seq
        full_pieces = closed_at is None
        for doc, length in enumerate(lens, int(first_doc)):
            start = 0
            if length >= seq_len:
                if length > seq_len and filtering:
                    self.dropped.append(doc)
                    continue
                full, length = divmod(length, seq_len)
                if full_pieces:  # sequences by themselves
                    closed += [[(doc, s, seq_len)] for s in range(0, full * seq_len, seq_len)]
                if not length:
                    continue
                start = full * seq_len
            room = ceiling(length)
            if room >= 0:  # the open sequence with the least room that fits (ties: opened first)
                heap = by_room[room]
                seq = heappop(heap)
                if not heap:
                    del by_room[room]
                    discard_room(room)
                pieces = open_[seq]
            else:
                if len(open_) >= max_open:  # make way: close the fullest open sequence
                    closed.append(open_.pop(take(rooms.minimum())))
                    if closed_at is not None:
                        closed_at.append(doc)
                seq, room = next_seq, seq_len
                next_seq += 1
                open_[seq] = pieces = []
            pieces.append((doc, start, length))
            room -= length
            if not room:  # exactly full: nothing more fits, so it leaves at once
                closed.append(open_.pop(seq))
                if closed_at is not None:
                    closed_at.append(doc)
                continue
            heap = by_room.get(room)
            if heap is None:
                by_room[room] = [seq]
                add_room(room)
            else:
                heappush(heap, seq)
        self._next_seq = next_seq

    def finish(self) -> list[list[Piece]]:
        """The sequences still open; the packer is empty afterwards. Their pieces were never emitted, so
        they are re-packed best-fit decreasing (longest first, ties in opening then placement order)
        and that layout is returned, sequences in the order it opened them, when it needs fewer
        sequences; else the open sequences as they are, in opening order. On the real corpus with 1000
        open this saves 32-37 of the last 1000 sequences; a set that never reaches the bound comes out
        as its exactly-full sequences plus best-fit decreasing of everything else, which is what small
        (split, source) sets, e.g. a validation split, get."""
        held = [self._open[s] for s in sorted(self._open)]
        self._open.clear()
        self._by_room.clear()
        self._room = CapacitySet(self.seq_len)
        pieces = [p for seq in held for p in seq]
        order = sorted(range(len(pieces)), key=lambda i: -pieces[i][2])  # stable: ties keep held order
        seq_of, n_seq = best_fit([pieces[i][2] for i in order], self.seq_len, 0)
        if n_seq >= len(held):
            return held
        repacked: list[list[Piece]] = [[] for _ in range(n_seq)]
        for i, s in zip(order, seq_of, strict=True):
            repacked[s].append(pieces[i])
        return repacked

    def _take(self, room: int) -> int:
        """Remove and return the lowest-index open sequence with exactly `room` left."""
        heap = self._by_room[room]
        seq = heappop(heap)
        if not heap:
            del self._by_room[room]
            self._room.discard(room)
        return seq
