"""The set of remaining capacities that some open sequence has, for best-fit packing.

Best fit asks "the smallest remaining capacity >= this piece's length" once per piece. Capacities are
integers in 0..seq_len, so the set is a 64-ary hierarchy of bitsets (a van Emde Boas layout flattened
to words): level 0 has bit r set iff r is in the set, level k+1 has bit w set iff word w of level k
is non-zero. Depth = ceil(log64(seq_len + 1)): 2 for seq_len 2048, 3 up to 262,143, 4 up to 16.7 M.
`ceiling` reads one word per level going up and one per level coming down, so every operation is
O(log64 seq_len) Python steps; the words are Python ints of <= 64 bits in lists (a list item reads in
~11 ns from the interpreter, a numpy array element in ~60 ns).
"""

from __future__ import annotations

_BITS = 6  # 64 bits per word
_MASK = (1 << _BITS) - 1


class CapacitySet:
    """A set of integers in [0, size) with O(log64 size) insert, remove and successor queries."""

    __slots__ = ("_levels", "size")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"CapacitySet size must be >= 1, got {size}")
        self.size = size
        self._levels: list[list[int]] = []
        n = size
        while True:
            words = (n + _MASK) >> _BITS
            self._levels.append([0] * words)
            if words == 1:
                break
            n = words

    def add(self, value: int) -> None:
        for words in self._levels:
            w = value >> _BITS
            x = words[w]
            words[w] = x | (1 << (value & _MASK))
            if x:  # the word was already non-empty: its ancestors already have their bits
                return
            value = w

    def discard(self, value: int) -> None:
        """Remove `value` (which must be present)."""
        for words in self._levels:
            w = value >> _BITS
            x = words[w] & ~(1 << (value & _MASK))
            words[w] = x
            if x:  # the word still has members: its ancestors keep their bits
                return
            value = w

    def __contains__(self, value: int) -> bool:
        return 0 <= value < self.size and bool(self._levels[0][value >> _BITS] >> (value & _MASK) & 1)

    def ceiling(self, value: int) -> int:
        """The smallest member >= value, or -1 if there is none."""
        levels = self._levels
        k = 0
        while k < len(levels):
            words = levels[k]
            w = value >> _BITS
            if w >= len(words):
                return -1
            x = words[w] >> (value & _MASK)
            if x:
                value += (x & -x).bit_length() - 1
                while k:  # down again: the lowest set bit of each word on the way
                    k -= 1
                    x = levels[k][value]
                    value = (value << _BITS) + (x & -x).bit_length() - 1
                return value
            value = w + 1  # nothing left in this word: the next non-empty word, one level up
            k += 1
        return -1

    def minimum(self) -> int:
        """The smallest member, or -1 if the set is empty."""
        return self.ceiling(0)
