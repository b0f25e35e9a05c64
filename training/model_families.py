"""The model families the training job trains, and what differs between them: which batch keys go to
the device, how the forward pass and the loss are computed, and how a fresh model is configured.

- causal_lm: any transformers causal LM on packed token shards (training/model.py);
- speech_seq2seq: Whisper (`WhisperForConditionalGeneration`) on log-Mel `input_features` + transcripts;
- vision_language: LLaVA (`LlavaForConditionalGeneration`: a CLIP vision tower, a projector, a causal
  LM) on `pixel_values` + chat text with image placeholder tokens.

The family follows from the model type (`whisper`, `llava`); nothing is downloaded: configs come from
`AutoConfig.for_model(model_type, **overrides)` or a local config.json, weights are random under the
run's seed. Every family returns the *sum* of its token losses (loss.py), so the step normalises by the
global batch's loss tokens as for text.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AutoConfig, PretrainedConfig, PreTrainedModel

from training.config import ModelSettings
from training.loss import IGNORE_INDEX, token_loss_sum
from training.model import ModelConfigError, _base_fields
from training.packed_attention import attention_inputs

CAUSAL_LM, SPEECH, VISION_LANGUAGE = "causal_lm", "speech_seq2seq", "vision_language"
FAMILY_OF_MODEL_TYPE = {"whisper": SPEECH, "llava": VISION_LANGUAGE}
DEFAULT_MODALITIES = {SPEECH: ("audio",), VISION_LANGUAGE: ("image", "pdf")}
DEVICE_KEYS = {
    CAUSAL_LM: ("input_ids", "labels", "position_ids", "segment_ids"),
    SPEECH: ("input_features", "decoder_input_ids", "decoder_attention_mask", "labels"),
    VISION_LANGUAGE: ("input_ids", "attention_mask", "pixel_values", "labels"),
}


def model_family(settings: ModelSettings) -> str:
    model_type, _ = _base_fields(settings)
    return FAMILY_OF_MODEL_TYPE.get(model_type, CAUSAL_LM)


def loss_sum(family: str, module: torch.nn.Module, batch: Mapping[str, torch.Tensor],
             attn_implementation: str) -> torch.Tensor:
    """The batch's summed token loss (0-d fp32); the caller wraps it in autocast."""
    if family == CAUSAL_LM:
        logits = module(input_ids=batch["input_ids"], position_ids=batch["position_ids"],
                        **attention_inputs(batch["segment_ids"], attn_implementation)).logits
        return token_loss_sum(logits, batch["labels"])
    if family == SPEECH:
        # labels[t] is the token decoder_input_ids[t] predicts (the collator shifted them): no shift here
        logits = module(input_features=batch["input_features"], decoder_input_ids=batch["decoder_input_ids"],
                        decoder_attention_mask=batch["decoder_attention_mask"]).logits
        return token_loss_sum(logits, batch["labels"])
    if family == VISION_LANGUAGE:
        # labels are aligned with input_ids (transformers' convention): position t predicts labels[t+1]
        logits = module(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                        pixel_values=batch["pixel_values"]).logits
        return token_loss_sum(logits[:, :-1], batch["labels"][:, 1:])
    raise ValueError(f"unknown model family {family!r}")


@dataclass(frozen=True)
class TextSideInfo:
    """What the tokenizer fixes about a media model: its vocabulary and special ids."""

    vocab_size: int
    pad_id: int
    eos_id: int
    bos_id: int | None
    image_token_id: int | None
    """vision_language: the placeholder the collator expands to image_seq_length copies."""
    image_size: int | None
    """vision_language: the processor's crop size, the vision tower's image_size."""
    max_text_tokens: int


def _check_known(config: PretrainedConfig, default: PretrainedConfig, where: str, given: Mapping[str, Any]) -> None:
    """transformers keeps any keyword as an attribute: a key the config class does not serialise is a typo."""
    known = set(default.to_dict())
    unknown = sorted(set(given) - known)
    if unknown:
        hints = [f"{k} (did you mean {', '.join(difflib.get_close_matches(k, sorted(known), n=2))}?)"
                 if difflib.get_close_matches(k, sorted(known), n=1) else k for k in unknown]
        raise ModelConfigError(f"{where}: not fields of {type(config).__name__}: {'; '.join(hints)}")


def media_model_config(settings: ModelSettings, info: TextSideInfo) -> PretrainedConfig:
    """Defaults of the model type < saved config.json < overrides; the tokenizer's vocabulary and ids,
    and (LLaVA) the image size and placeholder, are filled in where not given."""
    model_type, fields = _base_fields(settings)
    family = FAMILY_OF_MODEL_TYPE.get(model_type)
    if family is None:
        raise ModelConfigError(f"model.model_type {model_type!r} is not a media model type "
                               f"({sorted(FAMILY_OF_MODEL_TYPE)})")
    default = AutoConfig.for_model(model_type)
    fields.update(settings.overrides)
    if family == SPEECH:
        fields.setdefault("vocab_size", info.vocab_size)
        fields.setdefault("pad_token_id", info.pad_id)
        fields.setdefault("eos_token_id", info.eos_id)
        fields.setdefault("bos_token_id", info.bos_id if info.bos_id is not None else info.eos_id)
        fields.setdefault("decoder_start_token_id", info.bos_id if info.bos_id is not None else info.eos_id)
        # the decoder sees the start token + max_text_tokens - 1 targets
        fields.setdefault("max_target_positions", max(info.max_text_tokens, 8))
        config = AutoConfig.for_model(model_type, **fields)
        _check_known(config, default, "model.overrides", fields)
        if config.vocab_size < info.vocab_size:
            raise ModelConfigError(f"model vocab_size {config.vocab_size} < the tokenizer's {info.vocab_size}")
        if config.max_target_positions < info.max_text_tokens:
            raise ModelConfigError(f"model max_target_positions {config.max_target_positions} < "
                                   f"data.media.max_text_tokens {info.max_text_tokens}")
    else:
        text = dict(fields.pop("text_config", None) or {"model_type": "llama"})
        vision = dict(fields.pop("vision_config", None) or {"model_type": "clip_vision_model"})
        text.setdefault("vocab_size", info.vocab_size)
        text.setdefault("pad_token_id", info.pad_id)
        text.setdefault("eos_token_id", info.eos_id)
        text.setdefault("bos_token_id", info.bos_id)
        text.setdefault("max_position_embeddings", info.max_text_tokens)
        if info.image_size is not None:
            vision.setdefault("image_size", info.image_size)
        fields.setdefault("image_token_index", info.image_token_id)
        fields.setdefault("vision_feature_select_strategy", "default")
        fields.setdefault("vision_feature_layer", -1)
        for name, sub in (("text_config", text), ("vision_config", vision)):
            if "model_type" not in sub:
                raise ModelConfigError(f"model.overrides.{name}: give its model_type (e.g. llama, clip_vision_model)")
            sub_default = AutoConfig.for_model(sub["model_type"])
            _check_known(AutoConfig.for_model(**sub), sub_default, f"model.overrides.{name}",
                         {k: v for k, v in sub.items() if k != "model_type"})
        config = AutoConfig.for_model(model_type, text_config=text, vision_config=vision, **fields)
        _check_known(config, default, "model.overrides", fields)
        v = config.vision_config
        if info.image_size is not None and v.image_size != info.image_size:
            raise ModelConfigError(f"vision_config.image_size {v.image_size} != data.media.image.size "
                                   f"{info.image_size}: the processor's crops would not fit the tower")
        config.image_seq_length = image_seq_length(config)
        if config.text_config.vocab_size < info.vocab_size:
            raise ModelConfigError(f"text_config vocab_size {config.text_config.vocab_size} < the tokenizer's "
                                   f"{info.vocab_size} (the image token included)")
        if config.text_config.max_position_embeddings < info.max_text_tokens:
            raise ModelConfigError(f"text_config max_position_embeddings {config.text_config.max_position_embeddings}"
                                   f" < data.media.max_text_tokens {info.max_text_tokens}")
    config.use_cache = False
    return config


def image_seq_length(config: PretrainedConfig) -> int:
    """Image features LLaVA puts in place of the placeholders: one per patch, plus the CLS token when
    vision_feature_select_strategy is "full" ("default" drops it)."""
    v = config.vision_config
    patches = (v.image_size // v.patch_size) ** 2
    return patches + (1 if config.vision_feature_select_strategy == "full" else 0)


def build_media_model(settings: ModelSettings, config: PretrainedConfig, *, seed: int,
                      gradient_checkpointing: bool = False) -> PreTrainedModel:
    """Fresh fp32 weights from `config` (media_model_config), deterministic for a seed."""
    from transformers import AutoModelForImageTextToText, AutoModelForSpeechSeq2Seq

    auto = AutoModelForSpeechSeq2Seq if config.model_type == "whisper" else AutoModelForImageTextToText
    torch.manual_seed(seed)
    try:
        model = auto.from_config(config, attn_implementation=settings.attn_implementation, dtype=torch.float32)
    except (ImportError, ValueError) as err:
        raise ModelConfigError(f"model.attn_implementation {settings.attn_implementation!r}: {err}") from None
    if gradient_checkpointing:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    return model


__all__ = ["CAUSAL_LM", "DEFAULT_MODALITIES", "DEVICE_KEYS", "IGNORE_INDEX", "SPEECH", "VISION_LANGUAGE",
           "TextSideInfo", "build_media_model", "image_seq_length", "loss_sum", "media_model_config",
           "model_family"]
