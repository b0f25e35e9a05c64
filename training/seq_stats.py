"""Packed-sequence length statistics of an optimizer step, over all ranks (logged with each train record).

A *sequence* is one document (segment) of a packed row: the lengths are the differences of each
micro-batch's `cu_seqlens`, read on the host (the loader's batches live there, so computing them costs
no device sync). Each rank reduces its micro-batches of the step to five numbers, and one all_gather
of those per logged step (never per micro-batch, nor on steps that are not logged) gives rank 0:

- `seq_count`: sequences in the global batch;
- `seq_len_avg`, `seq_len_min`, `seq_len_max`: their length in tokens (mean, shortest, longest);
- `rank_tokens_min`, `rank_tokens_max`: non-padding tokens of the step on the least and the most loaded
  rank (their ratio is the load imbalance that the slowest rank makes every other wait for).

Media batches carry no `cu_seqlens`: no figures, no collective.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from training.distributed import DistEnv, all_gather_tensor


def local_seq_figures(batches: Sequence[dict[str, Any]]) -> list[float] | None:
    """[sequences, summed length, shortest, longest, non-padding tokens] over this rank's micro-batches
    (shortest/longest 0 when there is no sequence); None for batches without `cu_seqlens`."""
    if not batches or "cu_seqlens" not in batches[0]:
        return None
    lens = np.concatenate([np.diff(np.asarray(b["cu_seqlens"], dtype=np.int64)) for b in batches])
    tokens = sum(int(b["num_tokens"]) for b in batches)
    if not len(lens):
        return [0.0, 0.0, 0.0, 0.0, float(tokens)]
    return [float(len(lens)), float(lens.sum()), float(lens.min()), float(lens.max()), float(tokens)]


def combine_seq_figures(per_rank: Sequence[Sequence[float]]) -> dict[str, Any]:
    """The metric fields from every rank's `local_seq_figures`."""
    with_seqs = [r for r in per_rank if r[0] > 0]
    count = int(sum(r[0] for r in per_rank))
    return {
        "seq_count": count,
        "seq_len_avg": sum(r[1] for r in per_rank) / count if count else 0.0,
        "seq_len_min": int(min(r[2] for r in with_seqs)) if with_seqs else 0,
        "seq_len_max": int(max(r[3] for r in with_seqs)) if with_seqs else 0,
        "rank_tokens_min": int(min(r[4] for r in per_rank)),
        "rank_tokens_max": int(max(r[4] for r in per_rank)),
    }


def step_seq_stats(batches: Sequence[dict[str, Any]], env: DistEnv, device: torch.device) -> dict[str, Any] | None:
    """Every rank calls this for the same steps (a collective); returns the step's global figures (on
    every rank), or None for media batches. `device`: where the collective runs (NCCL needs CUDA)."""
    local = local_seq_figures(batches)
    if local is None:
        return None
    gathered = all_gather_tensor(torch.tensor(local, dtype=torch.float64, device=device), env)
    return combine_seq_figures(gathered.tolist())
