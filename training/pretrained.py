"""Causal LMs that start from local pretrained weights, and LoRA adapters (peft) on any causal LM.

`model.init: pretrained` loads `model.model_path` (a `save_pretrained` directory: config.json plus
safetensors or .bin weights, sharded or not) with `AutoModelForCausalLM.from_pretrained(...,
local_files_only=True)`: nothing is downloaded, and a weight the checkpoint lacks is an error rather
than a silent random init. Before the weights are read, the config is checked against the shard index
(`ShardSetInfo`): the model's vocabulary must hold every token id of the shards (its vocab_size >= the
index's, pad and eos ids inside it) and its context (max_position_embeddings) must hold a packed sample
(the index's seq_len); the embedding's rows are checked again once loaded. A pretrained model's shapes
are fixed by its weights, so `model.overrides` may only set fields that change no shape: dropout rates
(`*dropout*`, `*pdrop`, e.g. attention_dropout, resid_pdrop); any other key is refused by name.

`model.lora` wraps the model (random or pretrained) in a peft `PeftModelForCausalLM`: the base weights
are frozen (requires_grad False, so `model.parameter_groups` hands the optimizer only the adapters),
adapters are initialised under the run's seed (B = 0: the first step's loss is the base model's).
Checkpoints keep the whole state_dict of the wrapped model (its keys are the wrapper's, so resume
loads them into the same wrapping); `save_adapter` also writes the adapters alone, as peft's
`save_pretrained` does, for serving or merging elsewhere.

`model.py`'s random path is unchanged: `build_causal_lm` picks it for `init: random`.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

from training.config import LoraSettings, ModelSettings
from training.model import ModelConfigError, ShardSetInfo, build_model

log = logging.getLogger("training")


def shape_neutral(key: str) -> bool:
    """Config fields a pretrained model may override: dropout rates, which change no weight's shape."""
    return "dropout" in key or key.endswith("pdrop")


def pretrained_config(settings: ModelSettings, shards: ShardSetInfo) -> PretrainedConfig:
    """`model_path`'s saved config with the allowed overrides, checked against the shard index."""
    path = Path(settings.model_path or "")
    if not path.is_dir():
        raise ModelConfigError(f"model.model_path: {path} is not a directory (init: pretrained needs a local "
                               "save_pretrained directory; nothing is downloaded)")
    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as err:
        raise ModelConfigError(f"model.model_path: cannot read the config of {path}: {err}") from None

    known = set(config.to_dict())
    unknown = sorted(k for k in settings.overrides if k not in known)
    if unknown:
        raise ModelConfigError(f"model.overrides: not fields of {type(config).__name__}: {', '.join(unknown)}")
    refused = sorted(k for k in settings.overrides if not shape_neutral(k))
    if refused:
        raise ModelConfigError(
            f"model.overrides: {', '.join(refused)} cannot be overridden with init: pretrained (the weights fix "
            "the model's shapes); only dropout fields (*dropout*, *pdrop) may be"
        )
    for key, value in settings.overrides.items():
        setattr(config, key, value)
    check_against_shards(config.vocab_size, config, shards, where=f"model.model_path {path}")
    # Training never reads a KV cache; building one per forward only costs memory.
    config.use_cache = False
    return config


def check_against_shards(vocab_rows: int, config: PretrainedConfig, shards: ShardSetInfo, *, where: str) -> None:
    """The shards' token ids must index the model's embedding and a packed sample must fit its context."""
    if vocab_rows < shards.vocab_size:
        raise ModelConfigError(
            f"{where}: the model's vocab_size {vocab_rows} is smaller than the shard index's vocab_size "
            f"{shards.vocab_size}: token ids would index past the embedding (was this model's tokenizer the one "
            "that packed the shards?)"
        )
    for name, token_id in (("pad_id", shards.pad_id), ("eos_id", shards.eos_id)):
        if token_id is not None and not 0 <= token_id < vocab_rows:
            raise ModelConfigError(f"{where}: the shard index's {name} {token_id} is outside the model's "
                                   f"vocabulary of {vocab_rows}")
    max_positions = getattr(config, "max_position_embeddings", None)
    if max_positions is not None and shards.seq_len > max_positions:
        raise ModelConfigError(f"{where}: the shard index's seq_len {shards.seq_len} exceeds the model's "
                               f"max_position_embeddings {max_positions}")
    model_eos = getattr(config, "eos_token_id", None)
    eos_ids = model_eos if isinstance(model_eos, list) else [model_eos]
    if shards.eos_id is not None and model_eos is not None and shards.eos_id not in eos_ids:
        log.warning("%s: the model's eos_token_id %s differs from the shard index's eos_id %d: the model was "
                    "pretrained with another end-of-document token", where, model_eos, shards.eos_id)


def load_pretrained(settings: ModelSettings, shards: ShardSetInfo, *, gradient_checkpointing: bool = False
                    ) -> PreTrainedModel:
    """The fp32 weights of `model_path`; every weight of the model must be in the checkpoint."""
    config = pretrained_config(settings, shards)
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            settings.model_path, config=config, local_files_only=True, dtype=torch.float32,
            attn_implementation=settings.attn_implementation, output_loading_info=True,
        )
    except ImportError as err:  # e.g. flash_attention_2 without the flash-attn package
        raise ModelConfigError(f"model.attn_implementation {settings.attn_implementation!r}: {err}") from None
    except (OSError, ValueError) as err:
        raise ModelConfigError(f"model.model_path: cannot load the weights of {settings.model_path}: {err}") from None
    missing = sorted(info.get("missing_keys") or [])
    mismatched = sorted(str(m) for m in info.get("mismatched_keys") or [])
    if missing or mismatched:
        what = [f"{name} {keys[:5]}{' ...' if len(keys) > 5 else ''}"
                for name, keys in (("missing", missing), ("of another shape", mismatched)) if keys]
        raise ModelConfigError(f"model.model_path: {settings.model_path} does not hold every weight of "
                               f"{type(model).__name__}: {'; '.join(what)}")
    rows = model.get_input_embeddings().weight.shape[0]
    check_against_shards(rows, config, shards, where=f"model.model_path {settings.model_path}")
    if gradient_checkpointing:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    return model


def apply_lora(model: PreTrainedModel, lora: LoraSettings, *, seed: int) -> torch.nn.Module:
    """A peft LoRA wrapping of `model`: adapters trainable (initialised under `seed`), everything else frozen."""
    from peft import LoraConfig, TaskType, get_peft_model

    config = LoraConfig(
        r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, bias=lora.bias,
        target_modules=lora.target_modules if isinstance(lora.target_modules, str) else list(lora.target_modules),
        task_type=TaskType.CAUSAL_LM,
    )
    torch.manual_seed(seed)
    try:
        return get_peft_model(model, config)
    except ValueError as err:  # e.g. "Target modules {...} not found in the base model"
        raise ModelConfigError(f"model.lora.target_modules {lora.target_modules!r}: {err}") from None


def build_causal_lm(settings: ModelSettings, shards: ShardSetInfo, *, seed: int,
                    gradient_checkpointing: bool = False) -> torch.nn.Module:
    """The run's causal LM: fresh (model.build_model) or pretrained weights, LoRA-wrapped if configured."""
    if settings.init == "pretrained":
        torch.manual_seed(seed)
        model: torch.nn.Module = load_pretrained(settings, shards, gradient_checkpointing=gradient_checkpointing)
    else:
        model = build_model(settings, shards, seed=seed, gradient_checkpointing=gradient_checkpointing)
    if settings.lora is not None:
        model = apply_lora(model, settings.lora, seed=seed)
    return model


def check_media_settings(settings: ModelSettings) -> None:
    """Speech and vision-language models are built fresh and trained whole (model_families.py)."""
    if settings.init != "random" or settings.lora is not None:
        raise ModelConfigError("model.init: pretrained and model.lora are supported for causal LMs only, "
                               "not for speech or vision-language models")


def parameter_counts(model: torch.nn.Module) -> tuple[int, int]:
    """(all parameters, those that train)."""
    total = trainable = 0
    for param in model.parameters():
        total += param.numel()
        trainable += param.numel() if param.requires_grad else 0
    return total, trainable


def save_adapter(model: torch.nn.Module, directory: str | os.PathLike[str]) -> bool:
    """The adapters alone (peft save_pretrained: adapter_config.json + adapter_model.safetensors), replacing
    `directory` whole: written beside it, then renamed. False (nothing written) for a model without adapters."""
    from peft import PeftModel

    if not isinstance(model, PeftModel):
        return False
    target = Path(directory)
    partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
    old = target.with_name(f"{target.name}.old-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    if target.exists():
        target.rename(old)
    partial.rename(target)
    shutil.rmtree(old, ignore_errors=True)
    return True
