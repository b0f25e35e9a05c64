"""The optimizer of a run (`optimizer.name`), built over the weight-decay groups of `model.parameter_groups`.

- `adamw`: torch's AdamW, fused (one kernel for all parameters) on CUDA.
- `adafactor`: transformers' Adafactor with an explicit lr: `relative_step=False` (otherwise it ignores
  the group's lr and applies its own 1/sqrt(step) schedule, so the run's warm-up + cosine would do
  nothing), `scale_parameter=False` (otherwise each update is multiplied by the parameter's RMS and
  `optimizer.lr` is no longer the step size) and `warmup_init=False` (only valid with a relative step).
  Its second moment is factored (row and column means of a matrix) and it keeps no first moment
  (`beta1=None`): the optimizer state is a fraction of AdamW's. `betas` and `eps` do not apply to it
  (its eps pair and decay rate are Adafactor's defaults); `weight_decay` does, per group.
- `adamw_8bit` / `paged_adamw_8bit`: bitsandbytes' `AdamW8bit` / `PagedAdamW8bit` (block-wise 8-bit
  moments; the paged one keeps them in CUDA unified memory, evicted to the host under memory pressure).
  CUDA only: on another device, or without bitsandbytes (`pip install 'platform-assets[gpu]'`), the run
  stops before its first step with an error naming `optimizer.name`.

Every optimizer keeps the two groups (decay on matrices, none on norms and biases).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import torch

from training.config import OptimizerSettings, RunConfigError

BITSANDBYTES_OPTIMIZERS = {"adamw_8bit": "AdamW8bit", "paged_adamw_8bit": "PagedAdamW8bit"}


def _bitsandbytes(name: str) -> Any:
    try:
        return importlib.import_module("bitsandbytes.optim")
    except ImportError as err:
        raise RunConfigError(
            f"optimizer.name {name!r} needs bitsandbytes, which is not installed ({err}): "
            "pip install 'platform-assets[gpu]' on the CUDA machine, or use optimizer.name adamw or adafactor"
        ) from err


def check_optimizer_device(settings: OptimizerSettings, device: torch.device) -> None:
    """Raise (RunConfigError naming `optimizer.name`) when the optimizer cannot run on `device`; called
    before the model is built, so a misconfigured run stops before any step."""
    if settings.name in BITSANDBYTES_OPTIMIZERS:
        if device.type != "cuda":
            raise RunConfigError(
                f"optimizer.name {settings.name!r} needs a CUDA device (bitsandbytes' 8-bit optimizers have CUDA "
                f"kernels only) and this run is on {device.type}: use optimizer.name adamw or adafactor"
            )
        _bitsandbytes(settings.name)


def group_hyperparameters(settings: OptimizerSettings) -> dict[str, Any]:
    """The per-group keys the config sets besides lr and weight_decay: `betas`/`eps` for the AdamW
    family, nothing for Adafactor (whose `eps` is a pair with another meaning, and which has no betas)."""
    if settings.name == "adafactor":
        return {}
    return {"betas": settings.betas, "eps": settings.eps}


def build_optimizer(settings: OptimizerSettings, param_groups: Sequence[dict[str, Any]],
                    device: torch.device) -> torch.optim.Optimizer:
    """`settings.name` over `param_groups` (each with its own weight_decay), lr = `settings.lr`."""
    check_optimizer_device(settings, device)
    groups = [dict(g) for g in param_groups]
    if settings.name == "adamw":
        return torch.optim.AdamW(groups, lr=settings.lr, betas=settings.betas, eps=settings.eps,
                                 fused=device.type == "cuda")
    if settings.name == "adafactor":
        from transformers.optimization import Adafactor

        return Adafactor(groups, lr=settings.lr, scale_parameter=False, relative_step=False, warmup_init=False)
    cls = getattr(_bitsandbytes(settings.name), BITSANDBYTES_OPTIMIZERS[settings.name])
    return cls(groups, lr=settings.lr, betas=settings.betas, eps=settings.eps)
