"""Attention inputs that keep the documents of a packed sample apart.

A packed sample lays several documents end to end (`segment_ids` 1..n, 0 on padding). Plain causal
attention would let a token attend to the end of the previous document; these inputs stop that.

- sdpa / eager: a 4-D block-diagonal causal mask `[B, 1, S, S]`. transformers 5 passes any 4-D
  `attention_mask` through untouched (masking_utils._preprocess_mask_arguments: "If the mask is
  already 4D, simply return as-is"), so the mask must already be in the attention function's
  convention: sdpa takes a bool mask (True = may attend); eager *adds* the mask to the scores, so it
  gets 0 / -inf-like floats.
- flash attention: no mask (O(S) memory instead of O(S^2)); `cu_seq_lens_q/k` and `max_length_q/k`
  over the flattened `[B*S]` tokens, which transformers forwards to `flash_attn_varlen_func`.

Padding (segment 0) forms its own blocks: it attends only to earlier padding, never to a document and
is never attended to, and its rows are never empty (a fully masked row would make sdpa return NaN,
which would then leak into the gradients through 0 * NaN).
"""

from __future__ import annotations

import torch

SDPA_LIKE = ("sdpa", "eager")
FLASH = ("flash_attention_2", "flash_attention_3")


def block_causal_mask(segment_ids: torch.Tensor) -> torch.Tensor:
    """Bool `[B, 1, S, S]`: query q may attend key k iff k <= q and both are in the same segment."""
    if segment_ids.ndim != 2:
        raise ValueError(f"segment_ids must be [batch, seq_len], got shape {tuple(segment_ids.shape)}")
    seq_len = segment_ids.shape[1]
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=segment_ids.device).tril()
    same_segment = segment_ids[:, :, None] == segment_ids[:, None, :]
    return (same_segment & causal)[:, None, :, :]


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The eager implementation's form: 0 where allowed, the dtype's minimum elsewhere (not -inf:
    min + score stays finite, so softmax never sees inf - inf)."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(
        ~allowed, torch.finfo(dtype).min
    )


def varlen_kwargs(segment_ids: torch.Tensor) -> dict[str, torch.Tensor | int]:
    """cu_seqlens over the flattened `[B*S]` tokens: a run starts at every row start and wherever the
    segment id changes; the padding at the end of a row is one run of its own."""
    batch, seq_len = segment_ids.shape
    starts = torch.ones_like(segment_ids, dtype=torch.bool)
    starts[:, 1:] = segment_ids[:, 1:] != segment_ids[:, :-1]
    offsets = starts.reshape(-1).nonzero().reshape(-1).to(torch.int32)
    total = torch.tensor([batch * seq_len], dtype=torch.int32, device=segment_ids.device)
    cu_seqlens = torch.cat([offsets, total])
    # flash_attn_varlen_func takes max_seqlen as a python int: one host sync per micro-batch.
    max_len = int((cu_seqlens[1:] - cu_seqlens[:-1]).max().item())
    return {"cu_seq_lens_q": cu_seqlens, "cu_seq_lens_k": cu_seqlens, "max_length_q": max_len, "max_length_k": max_len}


def attention_inputs(
    segment_ids: torch.Tensor, attn_implementation: str, eager_dtype: torch.dtype = torch.float32
) -> dict[str, object]:
    """Keyword arguments for a transformers causal LM's forward that isolate the packed segments.

    `eager_dtype`: dtype of the additive mask for eager attention; fp32 is right for fp32 weights
    with or without autocast (bf16 scores + fp32 mask promote to fp32 before the fp32 softmax).
    """
    if attn_implementation in SDPA_LIKE:
        allowed = block_causal_mask(segment_ids)
        if attn_implementation == "eager":
            return {"attention_mask": additive_mask(allowed, eager_dtype)}
        return {"attention_mask": allowed}
    if attn_implementation in FLASH:
        return varlen_kwargs(segment_ids)
    raise ValueError(
        f"attn_implementation {attn_implementation!r} cannot isolate packed documents; use one of "
        f"{', '.join(SDPA_LIKE + FLASH)}"
    )
