"""The causal LM: a `transformers` config built from the run config and the shard index, fresh weights.

Nothing is downloaded: the config comes from `AutoConfig.for_model(model_type, ...)` or a local
`config.json`, and the weights from `AutoModelForCausalLM.from_config` (random init under the run's
seed). Weights are fp32 in every precision mode (autocast does the low-precision math), so AdamW's
updates are not lost to bf16 rounding.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

from training.config import ModelSettings
from training.data.shard_index import FlatIndex


class ModelConfigError(ValueError):
    """The `model:` section does not describe a buildable transformers model; the message says why."""


@dataclass(frozen=True)
class ShardSetInfo:
    """The shard index fields the model depends on (platform_assets/packing/SHARD_FORMAT.md)."""

    seq_len: int
    vocab_size: int
    pad_id: int
    eos_id: int | None
    bos_id: int | None = None

    @classmethod
    def from_index(cls, index: FlatIndex) -> ShardSetInfo:
        # FlatIndex does not carry bos_id; the model only uses it for generation, never in training.
        return cls(seq_len=index.seq_len, vocab_size=index.vocab_size, pad_id=index.pad_id, eos_id=index.eos_id)


def _base_fields(settings: ModelSettings) -> tuple[str, dict[str, Any]]:
    """model_type and the saved fields of `model_path`'s config.json (empty for a bare model_type)."""
    if settings.model_type is not None:
        return settings.model_type, {}
    path = Path(settings.model_path or "") / "config.json"
    try:
        saved = json.loads(path.read_text())
    except OSError as err:
        raise ModelConfigError(f"model.model_path: cannot read {path}: {err.strerror}") from None
    if "model_type" not in saved:
        raise ModelConfigError(f"model.model_path: {path} has no model_type")
    model_type = saved.pop("model_type")
    for key in ("transformers_version", "architectures", "_name_or_path"):
        saved.pop(key, None)
    return model_type, saved


def build_model_config(settings: ModelSettings, shards: ShardSetInfo) -> PretrainedConfig:
    """The transformers config: defaults of the model type < saved config.json < overrides; the
    vocabulary, special ids and context length default to the shard index's."""
    model_type, fields = _base_fields(settings)
    try:
        default = AutoConfig.for_model(model_type)
    except ValueError:
        raise ModelConfigError(f"model.model_type: unknown transformers model type {model_type!r}") from None
    fields.update(settings.overrides)

    fields.setdefault("vocab_size", shards.vocab_size)
    # The shards' ids, None included: a model type's defaults (gpt2: 50256) may lie outside this vocab.
    fields.setdefault("pad_token_id", shards.pad_id)
    fields.setdefault("eos_token_id", shards.eos_id)
    fields.setdefault("bos_token_id", shards.bos_id)
    config = AutoConfig.for_model(model_type, **fields)

    # transformers keeps any keyword as an attribute, so a typo (`hidden_sise`) would be silently
    # ignored: a key the model type's own config does not serialise is an error.
    unknown = sorted(set(config.to_dict()) - set(default.to_dict()))
    if unknown:
        known = sorted(default.to_dict())
        hints = [f"{k} (did you mean {', '.join(difflib.get_close_matches(k, known, n=2))}?)"
                 if difflib.get_close_matches(k, known, n=1) else k for k in unknown]
        raise ModelConfigError(f"model.overrides: not fields of {type(config).__name__}: {'; '.join(hints)}")

    if config.vocab_size < shards.vocab_size:
        raise ModelConfigError(
            f"model vocab_size {config.vocab_size} is smaller than the shards' vocab_size {shards.vocab_size}: "
            "token ids would index past the embedding"
        )
    max_positions = getattr(config, "max_position_embeddings", None)
    if max_positions is not None and max_positions < shards.seq_len:
        user_set = {"max_position_embeddings", "n_positions"} & set(fields)
        if user_set:
            raise ModelConfigError(
                f"model {sorted(user_set)[0]} = {max_positions} is shorter than the shards' seq_len {shards.seq_len}"
            )
        config.max_position_embeddings = shards.seq_len
    # Training never reads a KV cache; building one per forward only costs memory.
    config.use_cache = False
    return config


def build_model(
    settings: ModelSettings, shards: ShardSetInfo, *, seed: int, gradient_checkpointing: bool = False
) -> PreTrainedModel:
    """Fresh fp32 weights, deterministic for a seed."""
    config = build_model_config(settings, shards)
    torch.manual_seed(seed)
    try:
        model = AutoModelForCausalLM.from_config(
            config, attn_implementation=settings.attn_implementation, dtype=torch.float32
        )
    except (ImportError, ValueError) as err:
        # e.g. flash_attention_2 without the flash-attn package, or on CPU
        raise ModelConfigError(f"model.attn_implementation {settings.attn_implementation!r}: {err}") from None
    if gradient_checkpointing:
        # (transformers 5's name for gradient checkpointing.) Non-reentrant checkpointing works with
        # DDP's no_sync and with inputs that need no grad.
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    return model


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: decay on matrices (>= 2-D: projections, embeddings), none on norms and biases,
    whose shrinking towards 0 only hurts (GPT-2/nanoGPT practice). Order follows named_parameters,
    so the optimizer state of a checkpoint maps back to the same tensors."""
    decay, no_decay = [], []
    for _, param in model.named_parameters():
        if param.requires_grad:
            (decay if param.ndim >= 2 else no_decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
