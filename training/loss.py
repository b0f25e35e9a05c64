"""The causal-LM loss over already shifted labels.

The loader shifts labels itself (`labels[t] = input_ids[t+1]` within a segment, -100 elsewhere), so
the model's own `labels=` path, which shifts again, cannot be used. The loss is returned as a *sum*
over loss tokens: the training step divides by the loss-token count of the whole global batch, so the
mean does not depend on how samples are split across ranks and micro-batches.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


def token_losses(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-position cross entropy `[B, S]` in fp32 (0 where the label is IGNORE_INDEX)."""
    if logits.shape[:-1] != labels.shape:
        raise ValueError(f"logits {tuple(logits.shape)} do not match labels {tuple(labels.shape)}")
    # fp32 log-softmax: bf16 logits have ~3 significant digits, too few for a stable loss.
    return F.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE_INDEX, reduction="none"
    ).reshape(labels.shape)


def token_loss_sum(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Sum of the cross entropy over the positions whose label is not IGNORE_INDEX (0-d, fp32)."""
    return F.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum"
    )
