"""Collecting and comparing loader runs in the loader tests."""

from __future__ import annotations

import itertools
from typing import Any

import torch

from training.data import PackedLoader


def take(loader: PackedLoader, n: int | None = None) -> list[dict[str, Any]]:
    """The next n micro-batches of the current epoch (all that remain when n is None)."""
    return list(itertools.islice(loader, n))


def epochs(loader: PackedLoader, count: int) -> list[dict[str, Any]]:
    return [b for _ in range(count) for b in take(loader)]


def sample_ids(batches: list[dict[str, Any]]) -> list[int]:
    return [i for b in batches for i in b["sample_ids"].tolist()]


def assert_same_batches(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    assert len(got) == len(want), (len(got), len(want))
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert list(g) == list(w), (i, list(g), list(w))
        for k in w:
            if isinstance(w[k], torch.Tensor):
                assert g[k].dtype == w[k].dtype and torch.equal(g[k], w[k]), (i, k)
            else:
                assert g[k] == w[k], (i, k)
