"""Duplicate clusters: union-find over links, and the reports an asset shows about them."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


class UnionFind:
    """Disjoint sets over 0..n-1 whose root is always the member with the smallest priority.

    `priority[i]` orders members (lower wins: the keep policy's rank), so after any sequence of
    unions `find(i)` is the document its cluster keeps. Path halving keeps finds near O(1); the
    number of unions is the number of links (at most one per removed document), never pairs
    within a cluster, so thousands of identical documents cost thousands of steps, not millions.
    """

    def __init__(self, priority: np.ndarray):
        self.parent = np.arange(len(priority), dtype=np.int64)
        self.priority = np.asarray(priority)

    def find(self, x: int) -> int:
        parent = self.parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = int(parent[x])
        return x

    def union(self, a: int, b: int) -> int:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return ra
        if self.priority[rb] < self.priority[ra] or (self.priority[rb] == self.priority[ra] and rb < ra):
            ra, rb = rb, ra
        self.parent[rb] = ra
        return ra

    def union_many(self, a: np.ndarray, b: np.ndarray) -> None:
        for x, y in zip(a.tolist(), b.tolist(), strict=True):
            self.union(x, y)

    def roots(self) -> np.ndarray:
        """The root of every element, vectorised pointer jumping (log depth passes)."""
        p = self.parent.copy()
        while True:
            nxt = p[p]
            if np.array_equal(nxt, p):
                return p
            p = nxt


def cluster_size_histogram(duplicates: pa.Table) -> pa.Table:
    """(cluster_size, clusters): how many clusters have each size (kept document included)."""
    if duplicates.num_rows == 0:
        return pa.table({"cluster_size": pa.array([], pa.int64()), "clusters": pa.array([], pa.int64())})
    per_cluster = duplicates.group_by("cluster_id", use_threads=False).aggregate([("removed_id", "count")])
    sizes = pc.add(per_cluster["removed_id_count"], 1)
    hist = (
        pa.table({"cluster_size": sizes})
        .group_by("cluster_size", use_threads=False)
        .aggregate([("cluster_size", "count")])
    )
    hist = pa.table({"cluster_size": hist["cluster_size"], "clusters": hist["cluster_size_count"]})
    return hist.sort_by("cluster_size")


def removed_per_source(decisions: pa.Table) -> pa.Table:
    """Per source: documents in, removed as exact / near duplicates, and the removal rate."""
    t = pa.table(
        {
            "source": decisions["source"],
            "exact": pc.equal(decisions["rule"], "exact_duplicate").fill_null(False).cast(pa.int64()),
            "near": pc.equal(decisions["rule"], "near_duplicate").fill_null(False).cast(pa.int64()),
        }
    )
    g = t.group_by("source", use_threads=False).aggregate(
        [("source", "count"), ("exact", "sum"), ("near", "sum")]
    )
    removed = pc.add(g["exact_sum"], g["near_sum"])
    out = pa.table(
        {
            "source": g["source"],
            "documents": g["source_count"],
            "removed_exact": g["exact_sum"],
            "removed_near": g["near_sum"],
            "removed": removed,
            "removal_rate": pc.divide(removed.cast(pa.float64()), g["source_count"].cast(pa.float64())),
        }
    )
    return out.sort_by("source")
