"""Where an offline pass keeps a set's tokens between reading them and writing its samples.

Offline strategies know every piece's place only once the whole set is surveyed, and best-fit
decreasing puts a set's longest pieces first, so the samples of one run draw on documents from
anywhere in the set. The tokens are therefore read once, in document order, into a store, and each
run of samples (at most 1024 x seq_len tokens) takes its pieces from it:

- `HeldTokens`: one flat int32 array (and uint8 masks) in memory, for the sets of a pass whose
  tokens fit `packing.max_tokens_in_memory` together (4 bytes a token, +1 with loss masks);
- `SpilledTokens`: the same array in a file of a private temporary directory, for a set larger than
  that. A run reads its pieces back with one `preadv` per stretch of consecutive tokens (pieces
  sorted by position, touching ones merged: the full seq_len pieces of a long document are one
  read), into a buffer of the run's own tokens: 8 MiB at 1024 x 2048, whatever the set's size. The
  file is written and read with plain syscalls, never mapped, so its pages are the kernel's cache
  and not this process's memory.

Both give a run the same tokens, so the samples are byte for byte the same whichever held them.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Protocol

import numpy as np


class RunTokens(Protocol):
    def run(self, piece_src: np.ndarray, piece_len: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """The tokens of a run's pieces: (each piece's start in the returned values, values, masks),
        piece p being values[src[p] : src[p] + piece_len[p]] (masks likewise, None without masks)."""


class ArrayTokens:
    """Tokens already in memory (a pass's held set, the streaming pass's open documents)."""

    def __init__(self, values: np.ndarray, masks: np.ndarray | None):
        self.values, self.masks = values, masks

    def run(self, piece_src: np.ndarray, piece_len: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        return piece_src, self.values, self.masks


class HeldTokens(ArrayTokens):
    """A set's tokens in memory, filled in document order by `put`."""

    def __init__(self, tokens: int, has_mask: bool):
        super().__init__(np.empty(tokens, np.int32), np.empty(tokens, np.uint8) if has_mask else None)

    def put(self, t0: int, values: np.ndarray, masks: np.ndarray | None) -> None:
        self.values[t0 : t0 + values.size] = values
        if self.masks is not None:
            self.masks[t0 : t0 + values.size] = masks

    def seal(self) -> None:
        """Filling is over (nothing to do in memory)."""

    def close(self) -> None:
        self.values = self.masks = None  # type: ignore[assignment]


class SpillDir:
    """A private temporary directory for one packing run's spill files, removed when closed."""

    def __init__(self, parent: str | None = None):
        if parent is not None:
            Path(parent).mkdir(parents=True, exist_ok=True)
        self._tmp = tempfile.TemporaryDirectory(prefix="packing-spill-", dir=parent)
        self.path = Path(self._tmp.name)

    def close(self) -> None:
        self._tmp.cleanup()


def _read_exactly(fd: int, out: np.ndarray, offset: int) -> None:
    view = memoryview(out).cast("B")
    done = 0
    while done < len(view):
        got = os.preadv(fd, [view[done:]], offset + done)
        if got <= 0:
            raise OSError(f"spill file ended at byte {offset + done}, {len(view) - done} bytes short")
        done += got


class SpilledTokens:
    """A set's tokens (int32) and masks (uint8) in files under `directory`, appended in document
    order by `put`, read back per run by `run` once `seal`ed."""

    def __init__(self, directory: Path, name: str, has_mask: bool):
        self._paths = [directory / f"{name}.ids.i32"] + ([directory / f"{name}.mask.u8"] if has_mask else [])
        self._writers = [open(p, "wb") for p in self._paths]  # noqa: SIM115 -- closed by seal()/close()
        self._fds: list[int] = []
        self.has_mask = has_mask
        self.tokens = 0

    def put(self, t0: int, values: np.ndarray, masks: np.ndarray | None) -> None:
        if t0 != self.tokens:
            raise ValueError(f"spilled tokens arrive in document order: token {t0} after {self.tokens}")
        self._writers[0].write(memoryview(np.ascontiguousarray(values, np.int32)).cast("B"))
        if self.has_mask:
            self._writers[1].write(memoryview(np.ascontiguousarray(masks, np.uint8)).cast("B"))
        self.tokens += values.size

    def seal(self) -> None:
        """Filling is over: flush the files and open them for reading."""
        for w in self._writers:
            w.close()
        self._writers = []
        self._fds = [os.open(p, os.O_RDONLY) for p in self._paths]

    def run(self, piece_src: np.ndarray, piece_len: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        n = piece_src.size
        if n == 0:
            return piece_src, np.zeros(0, np.int32), np.zeros(0, np.uint8) if self.has_mask else None
        order = np.argsort(piece_src, kind="stable")
        start, length = piece_src[order].astype(np.int64), piece_len[order].astype(np.int64)
        end = start + length
        # pieces are disjoint token ranges, so sorted by start each begins at or after the previous end;
        # one that begins exactly there continues the previous read
        first = np.ones(n, bool)
        first[1:] = start[1:] != end[:-1]
        range_of = np.cumsum(first) - 1
        range_start = start[first]
        last = np.append(np.flatnonzero(first)[1:] - 1, n - 1)
        range_len = end[last] - range_start
        range_at = np.concatenate(([0], np.cumsum(range_len)))  # each read's place in the run's buffer
        values = np.empty(int(range_at[-1]), np.int32)
        masks = np.empty(int(range_at[-1]), np.uint8) if self.has_mask else None
        for a, ln, at in zip(range_start.tolist(), range_len.tolist(), range_at[:-1].tolist(), strict=True):
            _read_exactly(self._fds[0], values[at : at + ln], 4 * a)
            if masks is not None:
                _read_exactly(self._fds[1], masks[at : at + ln], a)
        src = np.empty(n, np.int64)
        src[order] = range_at[range_of] + (start - range_start[range_of])
        return src, values, masks

    def close(self) -> None:
        for w in self._writers:
            w.close()
        for fd in self._fds:
            os.close(fd)
        self._writers, self._fds = [], []
        for p in self._paths:
            p.unlink(missing_ok=True)
