"""What a speech or vision-language run needs besides the model: the tokenizer (with the image
placeholder), the model config that fits it, and the collators the media loader runs in its workers.

Built in one place because they depend on each other: the tokenizer fixes the vocabulary and the image
token id, the model config fixes how many image features replace the placeholder (image_seq_length),
and the collator must expand the placeholder to exactly that many tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from transformers import AutoTokenizer, PretrainedConfig, PreTrainedTokenizerBase

from training.config import RunConfig, RunConfigError
from training.data.image_augment import AugmentSettings
from training.data.loader import LoaderConfig
from training.data.media_collate import (
    ImageSettings,
    SpeechCollator,
    VisionLanguageCollator,
    build_feature_extractor,
    build_image_processor,
    ensure_image_token,
)
from training.data.media_loader import MediaLoaderConfig
from training.model_families import DEFAULT_MODALITIES, SPEECH, TextSideInfo, image_seq_length, media_model_config

IMAGE_TOKEN = "<image>"


@dataclass
class MediaInputs:
    family: str
    tokenizer: PreTrainedTokenizerBase
    model_config: PretrainedConfig
    modalities: tuple[str, ...]
    batching: str
    train_collate: Any
    """Training batches: images augmented as configured."""
    eval_collate: Any
    """Validation batches: the same processors, no augmentation (comparable losses across steps)."""


def load_tokenizer(path: str) -> PreTrainedTokenizerBase:
    """A local tokenizer directory, never the hub (local_files_only)."""
    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as err:
        raise RunConfigError(f"data.media.tokenizer_path: cannot load a tokenizer from {path}: {err}") from None


def media_inputs(cfg: RunConfig, family: str) -> MediaInputs:
    media = cfg.data.media
    if media is None:
        raise RunConfigError(f"data.media: a {family} model (model_type {cfg.model.model_type or 'from model_path'}) "
                             f"reads media shards and needs this section (tokenizer_path at least)")
    tokenizer = load_tokenizer(media.tokenizer_path)
    if tokenizer.pad_token_id is None or tokenizer.eos_token_id is None:
        raise RunConfigError(f"data.media.tokenizer_path: the tokenizer at {media.tokenizer_path} needs a pad and an "
                             f"eos token")
    image_token_id = None if family == SPEECH else ensure_image_token(tokenizer, IMAGE_TOKEN)
    info = TextSideInfo(vocab_size=len(tokenizer), pad_id=tokenizer.pad_token_id, eos_id=tokenizer.eos_token_id,
                        bos_id=tokenizer.bos_token_id, image_token_id=image_token_id,
                        image_size=None if family == SPEECH else media.image.size,
                        max_text_tokens=media.max_text_tokens)
    config = media_model_config(cfg.model, info)
    modalities = tuple(media.modalities) if media.modalities else DEFAULT_MODALITIES[family]
    if family == SPEECH:
        if set(modalities) != {"audio"}:
            raise RunConfigError(f"data.media.modalities: a speech model takes audio only, got {list(modalities)}")
        collate = SpeechCollator(tokenizer, build_feature_extractor(), media.max_text_tokens,
                                 config.decoder_start_token_id)
        return MediaInputs(family, tokenizer, config, modalities, media.batching, collate, collate)
    if "audio" in modalities:
        raise RunConfigError(f"data.media.modalities: a vision-language model takes image and pdf, got "
                             f"{list(modalities)}")
    image = media.image
    aug = image.augment

    def collator(augment: AugmentSettings) -> VisionLanguageCollator:
        settings = ImageSettings(size=image.size, mean=image.mean, std=image.std, augment=augment)
        return VisionLanguageCollator(
            tokenizer, build_image_processor(settings), augment, cfg.data.seed, image_token=IMAGE_TOKEN,
            image_seq_length=image_seq_length(config), max_text_tokens=media.max_text_tokens,
            caption_prompt=media.caption_prompt, page_prompt=media.page_prompt)

    train = collator(AugmentSettings(**aug.model_dump()))  # the same fields, validated by both
    return MediaInputs(family, tokenizer, config, modalities, media.batching, train, collator(AugmentSettings()))


def media_loader_config(loader: LoaderConfig, media: MediaInputs) -> MediaLoaderConfig:
    """The run's loader fields for the media loader (the text-only `collate` has no meaning there)."""
    return MediaLoaderConfig(
        data_dir=loader.data_dir, split=loader.split, global_batch_size=loader.global_batch_size,
        micro_batch_size=loader.micro_batch_size, seed=loader.seed, weights=loader.weights,
        samples_per_epoch=loader.samples_per_epoch, num_workers=loader.num_workers, verify=loader.verify,
        on_corrupt=loader.on_corrupt, modalities=media.modalities, batching=media.batching)
