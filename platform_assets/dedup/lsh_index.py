"""The MinHash-LSH index: datasketch's MinHashLSH over our precomputed signatures.

Band/row shape (lsh_shape.py, re-exported here; the default `disk` storage imports only that):
datasketch's criterion (minimise the weighted false-positive and false-negative areas under the
S-curve 1 - (1 - s^r)^b) for the LSH threshold. Tuned for 0.8 itself at 128 slots
it picks b=9 x r=13, which finds a pair at J=0.8 with probability 0.40 and at J=0.85 with 0.69: far
too few for recall >= 0.95. So, when candidates are verified, the index is tuned 0.2 below the
similarity threshold (b=18 x r=7: 0.986 at J=0.8, 0.13 at J=0.5) and verification removes the extra
candidates it lets through.

Storage: in memory (a dict per band), or datasketch's Redis backend so several workers share one
index (`storage.type: redis`).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

import numpy as np
from datasketch import LeanMinHash, MinHashLSH

from platform_assets.dedup.lsh_shape import collision_probability, lsh_shape, optimal_shape
from platform_assets.dedup.minhash import MinHasher
from platform_assets.dedup.settings import NearSettings

__all__ = ["LshIndex", "collision_probability", "lsh_shape", "optimal_shape"]


class LshIndex:
    """Insert/query signatures by string key (document id)."""

    def __init__(self, settings: NearSettings, minhasher: MinHasher):
        self.minhasher = minhasher
        self.bands, self.rows = lsh_shape(settings)
        storage: dict[str, object] = {"type": "dict"}
        if settings.storage.type == "redis":
            storage = {"type": "redis", "redis": dict(settings.storage.redis)}
            if settings.storage.basename:
                storage["basename"] = settings.storage.basename.encode()
        self.lsh = MinHashLSH(
            threshold=settings.effective_lsh_threshold(),
            num_perm=settings.num_perm,
            params=(self.bands, self.rows),
            storage_config=storage,
        )
        self.size = 0

    def insert(self, key: Hashable, signature: np.ndarray | LeanMinHash) -> None:
        # check_duplication=False: the caller inserts each accepted document once; the check would
        # cost a lookup per insert (a round trip with Redis)
        self.lsh.insert(key, self._minhash(signature), check_duplication=False)
        self.size += 1

    def insert_many(self, keys: Iterable[Hashable], signatures: np.ndarray) -> None:
        """Bulk insert (buffered into pipelines with Redis)."""
        with self.lsh.insertion_session() as session:
            for key, sig in zip(keys, signatures, strict=True):
                session.insert(key, self.minhasher.lean_minhash(sig), check_duplication=False)
                self.size += 1

    def query(self, signature: np.ndarray | LeanMinHash) -> list[Hashable]:
        return self.lsh.query(self._minhash(signature))

    def _minhash(self, signature: np.ndarray | LeanMinHash) -> LeanMinHash:
        """Callers that query then insert pass the LeanMinHash built once (~10 us each)."""
        if isinstance(signature, LeanMinHash):
            return signature
        return self.minhasher.lean_minhash(signature)
