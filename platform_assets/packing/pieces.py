"""Documents -> pieces of at most seq_len tokens, and the checks on what packing is given.

A document of length L <= seq_len is one piece. A longer one is `overlong`:
- `split`: L // seq_len full pieces of seq_len tokens (each becomes a sequence by itself) and, if
  L % seq_len > 0, a remainder piece packed like any document. The remainder is the document's tail,
  so it ends with the document's EOS.
- `filter`: the document is dropped (reported by index), none of it is packed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

Overlong = Literal["split", "filter"]
OVERLONG_MODES: tuple[str, ...] = get_args(Overlong)


def check_positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return int(value)


def check_overlong(overlong: str) -> str:
    if overlong not in OVERLONG_MODES:
        raise ValueError(f"overlong must be one of {OVERLONG_MODES}, got {overlong!r}")
    return overlong


def check_lengths(lengths: object) -> np.ndarray:
    """`lengths` as a 1-D int64 array of document token counts, each >= 1 (EOS included)."""
    arr = np.asarray(lengths)
    if arr.ndim != 1:
        raise ValueError(f"lengths must be a 1-D array of token counts, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, np.int64)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"lengths must be integers, got dtype {arr.dtype}")
    if arr.dtype.kind == "u" and arr.dtype.itemsize == 8 and int(arr.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"lengths[{int(arr.argmax())}] = {int(arr.max())} does not fit int64")
    arr = arr.astype(np.int64, copy=False)
    bad = np.flatnonzero(arr < 1)
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"lengths[{i}] = {int(arr[i])}: every document has at least one token (its EOS); "
                         f"{bad.size} document(s) have fewer")
    return arr


@dataclass(frozen=True)
class Pieces:
    """Pieces in (document, start) order; `dropped`: documents removed by overlong="filter", ascending."""

    doc: np.ndarray  # int64
    start: np.ndarray  # int64, token offset within the document
    length: np.ndarray  # int64, 1..seq_len
    dropped: np.ndarray  # int64


def document_pieces(lengths: np.ndarray, seq_len: int, overlong: str) -> Pieces:
    """Every non-dropped document cut into pieces of at most seq_len tokens (see the module doc)."""
    n = lengths.size
    docs = np.arange(n, dtype=np.int64)
    if overlong == "filter":
        keep = lengths <= seq_len
        return Pieces(docs[keep], np.zeros(int(keep.sum()), np.int64), lengths[keep].copy(), docs[~keep])
    per_doc = lengths // seq_len + (lengths % seq_len > 0)  # full pieces + the remainder, if any
    total = int(per_doc.sum())
    doc = np.repeat(docs, per_doc)
    first = np.cumsum(per_doc) - per_doc  # index of each document's first piece
    start = (np.arange(total, dtype=np.int64) - np.repeat(first, per_doc)) * seq_len
    length = np.minimum(lengths[doc] - start, seq_len)
    return Pieces(doc, start, length, np.zeros(0, np.int64))
