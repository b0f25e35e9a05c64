"""Collation of multimodal samples (images, PDF pages, audio) into LLaVA and Whisper inputs.

Samples are duck-typed against the shard reader's MediaSample (`MediaSampleLike` below): this module
reads only the attributes listed there, so hand-made samples work in tests and the reader stays free
to add fields.

Labels follow transformers' convention for these models, not collate.py's: labels[t] is the token AT
t (or IGNORE_INDEX), and LlavaForConditionalGeneration / WhisperForConditionalGeneration shift them
inside their loss (collate.py's packed rows hold the already shifted tokens[t + 1]).

VisionLanguageCollator (LLaVA: CLIP vision tower + Llama text) gives:
- input_ids [B,L] int64: the chat template's tokens, the image token expanded to image_seq_length
  copies, pad_id on the right (L = the longest row, at most max_text_tokens);
- attention_mask [B,L] int64: 1 = token (image tokens included), 0 = padding;
- labels [B,L] int64: the token on assistant tokens (the template's generation blocks, i.e. the reply
  and its end token), IGNORE_INDEX (-100) elsewhere: prompts, the image tokens, padding;
- pixel_values [B,3,S,S] float32: decoded, augmented and CLIP-normalised images (bit-identical to the
  image processor's output; `FastImagePath` below does the processor's steps on uint8 images);
- sample_ids int64 [B], num_tokens, num_loss_tokens (0-d int64), decode_s (float), modalities (dict).

SpeechCollator (Whisper) gives:
- input_features [B,80,3000] float32: Whisper log-Mel, the shard's precomputed array when present;
- labels [B,T] int64: transcript tokens + eos, IGNORE_INDEX after;
- decoder_input_ids [B,T] int64: decoder_start_token_id, then labels shifted right (pad_id where the
  label before is ignored), as WhisperForConditionalGeneration builds them from labels itself;
- decoder_attention_mask [B,T] int64: 1 on the row's len(labels) positions;
- sample_ids, num_tokens (decoder tokens), num_loss_tokens, decode_s, modalities.

sample_ids: the low 63 bits of the 128-bit sample id (int(id, 16)): an int64 that is never negative.
Two ids collide only if they agree on 63 random bits (~1e-19 per pair): good enough to log and to
tell samples apart in a batch; the full id stays in the shard.
"""

from __future__ import annotations

import io
import time
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from training.data.collate import IGNORE_INDEX
from training.data.image_augment import AugmentSettings, augment, sample_rng
from training.data.image_pixels import (  # noqa: F401 - re-exported: callers build the image side from here
    CLIP_MEAN,
    CLIP_STD,
    FastImagePath,
    ImageSettings,
    build_image_processor,
    decode_image,
    empty_float32,
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase, WhisperFeatureExtractor
    from transformers.image_processing_utils import BaseImageProcessor

VISION_MODALITIES = ("image", "pdf")
SPEECH_MODALITIES = ("audio",)
_ID_MASK = (1 << 63) - 1


class MediaSampleLike(Protocol):
    """What the collators read of training.data.media_reader.MediaSample."""
    id: str  # 32 hex digits
    source: str
    modality: str  # "image" | "pdf" | "audio"
    kind: str
    mime: str
    ext: str  # "png", "jpg", "webp", "flac", "wav"
    media: bytes
    text: str  # caption / page text / transcript
    record: dict  # the sample's JSON; chat documents have record["messages"]
    input_features: np.ndarray | None  # float32 (80, 3000), precomputed by the platform


def sample_id_int(sample_id: str) -> int:
    """The low 63 bits of the 128-bit hex id: fits int64 and is never negative."""
    return int(sample_id, 16) & _ID_MASK


def _check_modality(samples: Sequence[MediaSampleLike], accepted: tuple[str, ...], collator: str) -> None:
    if not samples:
        raise ValueError(f"{collator}: empty batch")
    for s in samples:
        if s.modality not in accepted:
            raise ValueError(f"{collator} takes modalities {accepted}: sample {s.id} has modality {s.modality!r}")


def _common(samples: Sequence[MediaSampleLike], num_tokens: int, num_loss_tokens: int,
            decode_s: float) -> dict[str, Any]:
    return {
        "sample_ids": torch.tensor([sample_id_int(s.id) for s in samples], dtype=torch.int64),
        "num_tokens": torch.from_numpy(np.array(num_tokens, dtype=np.int64)),  # 0-d
        "num_loss_tokens": torch.from_numpy(np.array(num_loss_tokens, dtype=np.int64)),
        "decode_s": decode_s,
        "modalities": dict(Counter(s.modality for s in samples)),
    }


# ---------------------------------------------------------------------------------------------- images


def ensure_image_token(tokenizer: PreTrainedTokenizerBase, image_token: str = "<image>") -> int:
    """The id of `image_token`, added as a special token when missing (so no merge can split it and no
    text can produce it by accident). After an addition the model's vocab_size must be len(tokenizer)."""
    ids = tokenizer.convert_tokens_to_ids([image_token])
    if ids[0] is None or ids[0] == tokenizer.unk_token_id or image_token not in tokenizer.all_special_tokens:
        tokenizer.add_special_tokens({"additional_special_tokens": [image_token]},
                                     replace_extra_special_tokens=False)
    token_id = tokenizer.convert_tokens_to_ids(image_token)
    if tokenizer.encode(image_token, add_special_tokens=False) != [token_id]:
        raise ValueError(f"tokenizer does not encode {image_token!r} as the single token {token_id}")
    return token_id


class VisionLanguageCollator:
    """Image / PDF-page samples -> LLaVA inputs (see the module docstring for the keys)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, image_processor: BaseImageProcessor,
                 augment: AugmentSettings, seed: int, *, image_token: str = "<image>", image_seq_length: int,
                 max_text_tokens: int, caption_prompt: str = "Describe the image.",
                 page_prompt: str = "Read the page.") -> None:
        """max_text_tokens: the longest row, in tokens after the image expansion (image tokens count:
        they occupy the language model's positions). image_seq_length: the vision tower's patch count
        the projector hands to the LM, e.g. (224 / 14) ** 2 = 256 for CLIP ViT-L/14 without CLS."""
        if image_seq_length < 1 or max_text_tokens < 1:
            raise ValueError(f"image_seq_length and max_text_tokens must be >= 1, "
                             f"got {image_seq_length}, {max_text_tokens}")
        if tokenizer.pad_token_id is None:
            raise ValueError("the tokenizer has no pad token")
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.augment = augment
        self.seed = seed
        self.image_token = image_token
        self.image_seq_length = image_seq_length
        self.max_text_tokens = max_text_tokens
        self.caption_prompt = caption_prompt
        self.page_prompt = page_prompt
        ids = tokenizer.convert_tokens_to_ids([image_token])
        if ids[0] is None or image_token not in tokenizer.all_special_tokens:
            raise ValueError(f"{image_token!r} is not a special token of the tokenizer: call ensure_image_token "
                             f"first (and size the model's vocab to len(tokenizer))")
        self.image_token_id = int(ids[0])
        crop = getattr(image_processor, "crop_size", None) or {}
        self._size = crop.get("height") if crop.get("height") == crop.get("width") else None
        self._fast = FastImagePath(image_processor)

    def messages(self, sample: MediaSampleLike) -> list[dict[str, str]]:
        """The sample's conversation with the image placeholder at the start of the first user turn.
        A chat record that already holds the placeholder (LLaVA-style data) keeps it where it is."""
        chat = sample.record.get("messages") if isinstance(sample.record, dict) else None
        if chat:
            messages = [{"role": m["role"], "content": m["content"]} for m in chat]
        else:
            prompt = self.page_prompt if sample.modality == "pdf" else self.caption_prompt
            messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": sample.text}]
        present = sum(m["content"].count(self.image_token) for m in messages)
        if present == 0:
            first_user = next((m for m in messages if m["role"] == "user"), None)
            if first_user is None:
                raise ValueError(f"sample {sample.id}: no user message to hold the image")
            first_user["content"] = f"{self.image_token}\n{first_user['content']}"
        elif present > 1 or not any(self.image_token in m["content"] for m in messages if m["role"] == "user"):
            raise ValueError(f"sample {sample.id}: {present} {self.image_token!r} placeholders in its messages; "
                             f"one image takes exactly one, in a user message")
        return messages

    def tokens(self, sample: MediaSampleLike) -> tuple[np.ndarray, np.ndarray]:
        """(input_ids, labels) of one sample, image expanded and truncated to max_text_tokens.

        The image token is expanded at token level, after the chat template, where LlavaProcessor
        repeats it in the text before tokenising: the template's assistant mask comes back one entry per
        token, and repeating the placeholder's entry with the token (as zeros) keeps it aligned with
        input_ids by construction. The count is then exactly image_seq_length whatever the tokenizer does
        with adjacent placeholders, and the template, tokenizer and offset mapping run on the short text
        (256 placeholders as text are ~1.8 kB more to render and map for every sample)."""
        return self.rows([sample])[0]

    def rows(self, samples: Sequence[MediaSampleLike]) -> list[tuple[np.ndarray, np.ndarray]]:
        """tokens() of each sample, the chat template applied to the batch in one call: the template
        renders each conversation and the assistant mask is computed per conversation as in single calls,
        while the tokenizer encodes the batch at once (one call instead of one per sample)."""
        enc = self.tokenizer.apply_chat_template([self.messages(s) for s in samples], tokenize=True,
                                                 return_dict=True, return_assistant_tokens_mask=True)
        return [self._expand(s, np.asarray(ids, dtype=np.int64), np.asarray(mask, dtype=bool))
                for s, ids, mask in zip(samples, enc["input_ids"], enc["assistant_masks"], strict=True)]

    def _expand(self, sample: MediaSampleLike, ids: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        where = np.flatnonzero(ids == self.image_token_id)
        if len(where) != 1:
            raise ValueError(f"sample {sample.id}: the chat template gave {len(where)} image tokens, expected 1")
        at = int(where[0])
        reps = np.ones(len(ids), dtype=np.int64)
        reps[at] = self.image_seq_length
        ids = np.repeat(ids, reps)
        mask = np.repeat(mask, reps)
        mask[at: at + self.image_seq_length] = False
        labels = np.where(mask, ids, IGNORE_INDEX)
        if len(ids) > self.max_text_tokens:
            # the prompt (everything before the first assistant token, the image tokens included) must fit
            # with at least one assistant token after it, or the sample trains nothing
            first_loss = int(np.argmax(mask)) if mask.any() else len(ids)
            if first_loss >= self.max_text_tokens:
                raise ValueError(f"sample {sample.id}: the prompt with its {self.image_seq_length} image tokens "
                                 f"takes {first_loss} tokens, leaving none of max_text_tokens="
                                 f"{self.max_text_tokens} for the reply")
            ids, labels = ids[:self.max_text_tokens], labels[:self.max_text_tokens]
        return ids, labels

    def pixels(self, samples: Sequence[MediaSampleLike], epoch: int) -> np.ndarray:
        """[B,3,S,S] float32: each image decoded, augmented with its (seed, epoch, id) generator, and run
        through the image processor's steps: by FastImagePath (the same values) where it covers the
        processor's configuration, else by one processor call for the batch."""
        return self.pixel_values(samples, epoch).numpy()

    def pixel_values(self, samples: Sequence[MediaSampleLike], epoch: int) -> torch.Tensor:
        """pixels() as a tensor; in a DataLoader worker the fast path writes it straight into shared
        memory (as torch's default_collate stacks there), so handing the batch to the main process does
        not copy its 19 MB (B=32, 224 px) once more."""
        images = []
        on = self.augment.enabled
        for s in samples:
            image = decode_image(s.media)
            if on:
                image = augment(image, self.augment, sample_rng(self.seed, epoch, s.id), self._size)
            images.append(image)
        made: list[torch.Tensor] = []

        def empty(shape: tuple[int, ...]) -> np.ndarray:
            made.append(empty_float32(shape))
            return made[-1].numpy()

        if self._fast(images, empty) is not None:
            return made[-1]
        return torch.from_numpy(np.asarray(self.image_processor(images=images, return_tensors="np")["pixel_values"],
                                           dtype=np.float32))

    def __call__(self, samples: Sequence[MediaSampleLike], epoch: int) -> dict[str, Any]:
        _check_modality(samples, VISION_MODALITIES, "VisionLanguageCollator")
        rows = self.rows(samples)
        start = time.perf_counter()
        pixel_values = self.pixel_values(samples, epoch)
        decode_s = time.perf_counter() - start
        width = max(len(ids) for ids, _ in rows)
        input_ids = np.full((len(rows), width), self.tokenizer.pad_token_id, dtype=np.int64)
        labels = np.full((len(rows), width), IGNORE_INDEX, dtype=np.int64)
        attention_mask = np.zeros((len(rows), width), dtype=np.int64)
        for r, (ids, lab) in enumerate(rows):
            input_ids[r, :len(ids)] = ids
            labels[r, :len(lab)] = lab
            attention_mask[r, :len(ids)] = 1
        return {
            "input_ids": torch.from_numpy(input_ids),
            "attention_mask": torch.from_numpy(attention_mask),
            "labels": torch.from_numpy(labels),
            "pixel_values": pixel_values,
            **_common(samples, sum(len(ids) for ids, _ in rows), int(np.count_nonzero(labels != IGNORE_INDEX)),
                      decode_s),
        }


# ----------------------------------------------------------------------------------------------- audio


def build_feature_extractor() -> WhisperFeatureExtractor:
    """WhisperFeatureExtractor from its constructor defaults (80 mel bins, 16 kHz, 30 s chunks, n_fft 400,
    hop 160): the platform's precomputed input_features use the same, and nothing is fetched."""
    from transformers import WhisperFeatureExtractor

    return WhisperFeatureExtractor()


def decode_audio(data: bytes, sampling_rate: int) -> np.ndarray:
    """The clip as float32 mono at `sampling_rate`: channels averaged, resampled with soxr (HQ)."""
    import soundfile as sf
    import soxr

    samples, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    mono = samples[:, 0] if samples.shape[1] == 1 else samples.mean(axis=1, dtype=np.float32)
    if rate != sampling_rate:
        mono = soxr.resample(mono, rate, sampling_rate).astype(np.float32, copy=False)
    return np.ascontiguousarray(mono)


class SpeechCollator:
    """Audio samples -> Whisper inputs (see the module docstring for the keys)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, feature_extractor: WhisperFeatureExtractor,
                 max_target_tokens: int, decoder_start_token_id: int) -> None:
        """max_target_tokens: the longest labels row (transcript + eos), at most the decoder's
        max_target_positions. A transcript cut by it loses its eos: the model is not taught to stop
        where the speech goes on."""
        if max_target_tokens < 1:
            raise ValueError(f"max_target_tokens must be >= 1, got {max_target_tokens}")
        if tokenizer.pad_token_id is None or tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer needs a pad token and an eos token")
        self.tokenizer = tokenizer
        self.feature_extractor = feature_extractor
        self.max_target_tokens = max_target_tokens
        self.decoder_start_token_id = decoder_start_token_id
        self._shape = (feature_extractor.feature_size, feature_extractor.nb_max_frames)  # (80, 3000)

    def features(self, samples: Sequence[MediaSampleLike]) -> torch.Tensor:
        """[B,80,3000] float32: the precomputed arrays where present, the rest computed in one
        extractor call (~10 ms a clip on 2 cores: it transforms the full 30 s padding)."""
        features = empty_float32((len(samples), *self._shape))  # in a worker: shared memory, sent by handle
        out = features.numpy()
        missing: list[int] = []
        for r, s in enumerate(samples):
            if s.input_features is None:
                missing.append(r)
                continue
            if s.input_features.shape != self._shape:
                raise ValueError(f"sample {s.id}: input_features of shape {s.input_features.shape}, "
                                 f"expected {self._shape}")
            out[r] = s.input_features
        if missing:
            rate = self.feature_extractor.sampling_rate
            clips = [decode_audio(samples[r].media, rate) for r in missing]
            computed = self.feature_extractor(clips, sampling_rate=rate, return_tensors="np")["input_features"]
            out[missing] = computed
        return features

    def targets(self, sample: MediaSampleLike) -> np.ndarray:
        ids = self.tokenizer(sample.text, add_special_tokens=False)["input_ids"]
        return np.asarray([*ids, self.tokenizer.eos_token_id][:self.max_target_tokens], dtype=np.int64)

    def __call__(self, samples: Sequence[MediaSampleLike], epoch: int) -> dict[str, Any]:
        """`epoch` is unused (no audio augmentation yet); taken so both collators are called alike."""
        _check_modality(samples, SPEECH_MODALITIES, "SpeechCollator")
        start = time.perf_counter()
        input_features = self.features(samples)
        decode_s = time.perf_counter() - start
        rows = [self.targets(s) for s in samples]
        width = max(len(t) for t in rows)
        labels = np.full((len(rows), width), IGNORE_INDEX, dtype=np.int64)
        decoder_input_ids = np.full((len(rows), width), self.tokenizer.pad_token_id, dtype=np.int64)
        decoder_attention_mask = np.zeros((len(rows), width), dtype=np.int64)
        for r, t in enumerate(rows):
            labels[r, :len(t)] = t
            decoder_input_ids[r, 0] = self.decoder_start_token_id
            decoder_input_ids[r, 1:len(t)] = t[:-1]
            decoder_attention_mask[r, :len(t)] = 1
        n = sum(len(t) for t in rows)
        return {
            "input_features": input_features,
            "labels": torch.from_numpy(labels),
            "decoder_input_ids": torch.from_numpy(decoder_input_ids),
            "decoder_attention_mask": torch.from_numpy(decoder_attention_mask),
            **_common(samples, n, n, decode_s),
        }
