"""Mixed precision: which autocast dtype, and whether gradients need loss scaling."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PrecisionPlan:
    name: str
    """The resolved mode: bf16, fp16 or fp32."""
    autocast_dtype: torch.dtype | None
    """None: no autocast, everything in fp32."""
    loss_scaling: bool
    """fp16's 5 exponent bits underflow small gradients; bf16 has fp32's 8 and needs no scaler."""

    def autocast(self, device: torch.device) -> contextlib.AbstractContextManager:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=self.autocast_dtype)

    def grad_scaler(self, device: torch.device) -> torch.amp.GradScaler:
        # A disabled scaler is a no-op whose state_dict still round-trips through checkpoints.
        return torch.amp.GradScaler(device.type, enabled=self.loss_scaling)


def resolve_precision(requested: str, device: torch.device) -> PrecisionPlan:
    """`auto`: bf16 on a CUDA device that supports it (Ampere+), fp16 with loss scaling on older CUDA
    devices, fp32 on CPU (the reference mode: bit-identical reruns, used by the tests)."""
    cuda = device.type == "cuda"
    if requested == "auto":
        if not cuda:
            requested = "fp32"
        else:
            requested = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if requested == "fp32":
        return PrecisionPlan("fp32", None, False)
    if requested == "bf16":
        if cuda and not torch.cuda.is_bf16_supported():
            raise ValueError(f"precision bf16: {torch.cuda.get_device_name(device)} does not support bf16; use fp16")
        return PrecisionPlan("bf16", torch.bfloat16, False)
    if requested == "fp16":
        if not cuda:
            raise ValueError("precision fp16 needs a CUDA device (fp16 autocast with loss scaling); use fp32 or bf16")
        return PrecisionPlan("fp16", torch.float16, True)
    raise ValueError(f"unknown precision {requested!r}; expected auto, bf16, fp16 or fp32")
