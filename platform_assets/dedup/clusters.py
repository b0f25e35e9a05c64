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
    """Per source: documents in, removed as exact / near duplicates, and the removal rate. Image
    and SimHash near duplicates get their own columns, only when there are some: a MinHash text
    corpus's table is the one it always was."""
    rules = {"exact": "exact_duplicate", "near": "near_duplicate", "near_image": "near_duplicate_image",
             "near_simhash": "near_duplicate_simhash"}
    for optional in ("near_image", "near_simhash"):
        if not pc.any(pc.equal(decisions["rule"], rules[optional])).as_py():
            del rules[optional]
    t = pa.table(
        {"source": decisions["source"]}
        | {k: pc.equal(decisions["rule"], rule).fill_null(False).cast(pa.int64()) for k, rule in rules.items()}
    )
    g = t.group_by("source", use_threads=False).aggregate([("source", "count"), *((k, "sum") for k in rules)])
    removed = g["exact_sum"]
    for k in list(rules)[1:]:
        removed = pc.add(removed, g[f"{k}_sum"])
    out = pa.table(
        {"source": g["source"], "documents": g["source_count"]}
        | {f"removed_{k}": g[f"{k}_sum"] for k in rules}
        | {
            "removed": removed,
            "removal_rate": pc.divide(removed.cast(pa.float64()), g["source_count"].cast(pa.float64())),
        }
    )
    return out.sort_by("source")
