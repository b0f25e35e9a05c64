"""The multimodal collators on real shards written by the platform (media_runs) and on hand-made
samples: the assistant-only loss mask, the image token expansion, seeded augmentation, the pixels
against CLIPImageProcessor, and Whisper features against the platform's precomputed ones."""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr
import torch
from media_runs import write_media_shard_set, write_tokenizer
from PIL import Image

from training.data.collate import IGNORE_INDEX
from training.data.image_augment import AugmentSettings, augment, crop_box, sample_rng
from training.data.media_collate import (
    FastImagePath,
    ImageSettings,
    SpeechCollator,
    VisionLanguageCollator,
    build_feature_extractor,
    build_image_processor,
    decode_audio,
    decode_image,
    ensure_image_token,
    sample_id_int,
)

IMAGE_SEQ = 16  # a tiny vision tower: (32 / 8) ** 2 patches
SIZE = 32
NO_AUGMENT = AugmentSettings()
AUGMENT = AugmentSettings(random_resized_crop_scale=(0.3, 1.0), hflip_probability=0.5, brightness=0.4,
                          contrast=0.4, saturation=0.4)


@dataclass(frozen=True)
class Sample:
    """The attributes of training.data.media_reader.MediaSample the collators read."""
    id: str
    source: str
    modality: str
    kind: str
    mime: str
    ext: str
    media: bytes
    text: str
    record: dict
    input_features: np.ndarray | None = None


def _read_tar(path: Path) -> list[Sample]:
    files: dict[str, dict[str, bytes]] = {}
    with tarfile.open(path) as tar:
        for m in tar.getmembers():
            key, _, ext = m.name.partition(".")
            files.setdefault(key, {})[ext] = tar.extractfile(m).read()
    out = []
    for key, parts in files.items():
        record = json.loads(parts["json"])
        media_ext = next(e for e in parts if e in ("png", "jpg", "webp", "flac", "wav"))
        features = parts.get("input_features.npy")
        out.append(Sample(id=key, source=record["source"], modality=record["modality"], kind=record["kind"],
                          mime=record["mime"], ext=media_ext, media=parts[media_ext], text=parts["txt"].decode(),
                          record=record, input_features=None if features is None else np.load(io.BytesIO(features))))
    return out


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> dict[str, list[Sample]]:
    root = tmp_path_factory.mktemp("media")
    write_media_shard_set(root)
    train = root / "media_shards/_all/webdataset/train"
    return {source: [s for tar in sorted((train / source).glob("*.tar")) for s in _read_tar(tar)]
            for source in ("photos", "scans", "speech")}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(write_tokenizer(tmp_path_factory.mktemp("tok")))
    ensure_image_token(tok)
    return tok


def _vl(tokenizer, augment_settings: AugmentSettings = NO_AUGMENT, max_text_tokens: int = 512,
        seed: int = 7) -> VisionLanguageCollator:
    processor = build_image_processor(ImageSettings(size=SIZE, augment=augment_settings))
    return VisionLanguageCollator(tokenizer, processor, augment_settings, seed, image_seq_length=IMAGE_SEQ,
                                  max_text_tokens=max_text_tokens)


def _labelled(tokenizer, batch: dict, row: int) -> str:
    labels = batch["labels"][row]
    return tokenizer.decode(labels[labels != IGNORE_INDEX].tolist())


def _chat(shards) -> Sample:
    return next(s for s in shards["photos"] if "messages" in s.record)


def _caption(shards) -> Sample:
    return next(s for s in shards["photos"] if "messages" not in s.record)


def test_ensure_image_token_adds_once(tokenizer):
    n = len(tokenizer)
    token_id = ensure_image_token(tokenizer)
    assert len(tokenizer) == n and token_id == n - 1  # added by the fixture, at the end of the vocab
    assert tokenizer.encode("<image>\nhi", add_special_tokens=False)[0] == token_id


def test_assistant_only_mask_and_image_tokens(shards, tokenizer):
    chat, caption, page = _chat(shards), _caption(shards), shards["scans"][0]
    batch = _vl(tokenizer)([chat, caption, page], epoch=0)
    assert _labelled(tokenizer, batch, 0) == chat.record["messages"][-1]["content"] + "<|im_end|>"
    assert _labelled(tokenizer, batch, 1) == caption.text + "<|im_end|>"
    assert _labelled(tokenizer, batch, 2) == page.text + "<|im_end|>"
    image_id = tokenizer.convert_tokens_to_ids("<image>")
    ids, labels, mask = batch["input_ids"], batch["labels"], batch["attention_mask"]
    for r in range(3):
        at = ids[r] == image_id
        assert int(at.sum()) == IMAGE_SEQ
        where = torch.nonzero(at).flatten()
        assert where.tolist() == list(range(int(where[0]), int(where[0]) + IMAGE_SEQ))  # one contiguous run
        assert (labels[r][at] == IGNORE_INDEX).all() and (mask[r][at] == 1).all()
        n = int(mask[r].sum())
        assert (ids[r, n:] == tokenizer.pad_token_id).all() and (labels[r, n:] == IGNORE_INDEX).all()
        # labelled tokens are the input tokens themselves (transformers' convention: the model shifts)
        keep = labels[r] != IGNORE_INDEX
        assert torch.equal(labels[r][keep], ids[r][keep])
    text = tokenizer.decode(ids[0][mask[0] == 1].tolist())
    assert text.startswith("<|im_start|>user\n" + "<image>" * IMAGE_SEQ + "\nWhat colour is the shape?")
    assert "Describe the image." in tokenizer.decode(ids[1].tolist())
    assert "Read the page." in tokenizer.decode(ids[2].tolist())
    assert batch["input_ids"].dtype == batch["attention_mask"].dtype == batch["labels"].dtype == torch.int64
    assert batch["pixel_values"].shape == (3, 3, SIZE, SIZE) and batch["pixel_values"].dtype == torch.float32
    assert batch["num_tokens"].shape == () and int(batch["num_tokens"]) == int(mask.sum())
    assert int(batch["num_loss_tokens"]) == int((labels != IGNORE_INDEX).sum())
    assert batch["sample_ids"].tolist() == [int(s.id, 16) & (2**63 - 1) for s in (chat, caption, page)]
    assert batch["modalities"] == {"image": 2, "pdf": 1}
    assert batch["decode_s"] > 0


def test_chat_with_system_and_placeholder(tokenizer):
    png = io.BytesIO()
    Image.new("RGB", (20, 30), (1, 2, 3)).save(png, "PNG")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Colour?"},
                {"role": "assistant", "content": "Red."}, {"role": "user", "content": "Shape?"},
                {"role": "assistant", "content": "Round."}]
    sample = Sample("ab" * 16, "hand", "image", "image", "image/png", "png", png.getvalue(), "", {"messages": messages})
    collator = _vl(tokenizer)
    got = collator.messages(sample)
    assert got[1]["content"] == "<image>\nColour?" and got[0]["content"] == "Be brief."
    batch = collator([sample], epoch=0)
    assert _labelled(tokenizer, batch, 0) == "Red.<|im_end|>Round.<|im_end|>"
    # LLaVA-style data that already holds the placeholder keeps it; two placeholders are refused
    moved = [dict(m) for m in messages]
    moved[3]["content"] = "<image>\nShape?"
    assert collator.messages(replace(sample, record={"messages": moved}))[3]["content"] == "<image>\nShape?"
    moved[1]["content"] = "<image> Colour?"
    with pytest.raises(ValueError, match="placeholders"):
        collator.messages(replace(sample, record={"messages": moved}))


def test_augmentation_is_seeded_per_sample(shards, tokenizer):
    photos = shards["photos"][:4]
    collator = _vl(tokenizer, AUGMENT)
    a = collator(photos, epoch=3)["pixel_values"]
    b = collator(photos[::-1], epoch=3)["pixel_values"].flip(0)  # another batch order (another worker)
    assert torch.equal(a, b)
    other = _vl(tokenizer, AUGMENT)(photos[:2], epoch=3)["pixel_values"]  # a fresh collator (a resumed run)
    assert torch.equal(a[:2], other)
    c = collator(photos, epoch=4)["pixel_values"]
    assert all(not torch.equal(a[i], c[i]) for i in range(4))
    d = _vl(tokenizer, AUGMENT, seed=8)(photos, epoch=3)["pixel_values"]
    assert not torch.equal(a, d)


def test_pixels_without_augmentation_are_clip_processor(shards, tokenizer):
    from transformers import CLIPImageProcessor

    samples = shards["photos"][:2] + shards["scans"][:1]
    processor = CLIPImageProcessor(size={"shortest_edge": SIZE}, crop_size={"height": SIZE, "width": SIZE},
                                   image_mean=[0.48145466, 0.4578275, 0.40821073],
                                   image_std=[0.26862954, 0.26130258, 0.27577711])
    images = [Image.open(io.BytesIO(s.media)).convert("RGB") for s in samples]
    expected = processor(images=images, return_tensors="np")["pixel_values"]
    got = _vl(tokenizer)(samples, epoch=0)["pixel_values"].numpy()
    np.testing.assert_array_equal(got, expected)


def test_truncation_keeps_image_tokens(shards, tokenizer):
    chat = _chat(shards)
    full = _vl(tokenizer)([chat], epoch=0)
    prompt = int(torch.nonzero(full["labels"][0] != IGNORE_INDEX)[0])  # the first assistant token
    cut = _vl(tokenizer, max_text_tokens=prompt + 2)([chat], epoch=0)
    assert cut["input_ids"].shape == (1, prompt + 2)
    assert torch.equal(cut["input_ids"][0], full["input_ids"][0, :prompt + 2])
    assert int((cut["input_ids"][0] == tokenizer.convert_tokens_to_ids("<image>")).sum()) == IMAGE_SEQ
    assert int(cut["num_loss_tokens"]) == 2
    with pytest.raises(ValueError, match="image tokens"):
        _vl(tokenizer, max_text_tokens=prompt)([chat], epoch=0)
    with pytest.raises(ValueError, match="image tokens"):
        _vl(tokenizer, max_text_tokens=IMAGE_SEQ)([chat], epoch=0)


def test_wrong_modality_raises(shards, tokenizer):
    clip, photo = shards["speech"][0], shards["photos"][0]
    with pytest.raises(ValueError, match=f"{clip.id}.*'audio'"):
        _vl(tokenizer)([photo, clip], epoch=0)
    speech = SpeechCollator(tokenizer, build_feature_extractor(), max_target_tokens=64, decoder_start_token_id=2)
    with pytest.raises(ValueError, match=f"{photo.id}.*'image'"):
        speech([clip, photo], epoch=0)


def test_whisper_features_from_flac_match_precomputed(shards, tokenizer):
    clips = shards["speech"][:3]
    assert all(c.input_features is not None for c in clips)
    fe = build_feature_extractor()
    collator = SpeechCollator(tokenizer, fe, max_target_tokens=64, decoder_start_token_id=2)
    pre = collator(clips, epoch=0)
    raw = collator([replace(c, input_features=None) for c in clips], epoch=0)
    assert raw["input_features"].shape == pre["input_features"].shape == (3, 80, 3000)
    assert raw["input_features"].dtype == torch.float32
    # Both are float32 log10-Mel spectra of the same 16 kHz samples with the same filter bank, scaled to
    # (log10 + 4) / 4: only the FFT's summation order may differ between builds (float32 eps ~1.2e-7
    # relative in power, ~1e-7 / ln 10 / 4 ~ 1e-8 absolute after the log; bit-identical here). 1e-4 is
    # 0.004 dB: room for another FFT library, and 30-100x below what a near-lossless change of the clip
    # does (test_resampled_stereo_wav's soxr round trip moves the speech bins by 3e-3 to 1e-2).
    torch.testing.assert_close(raw["input_features"], pre["input_features"], atol=1e-4, rtol=0)
    for key in ("labels", "decoder_input_ids", "decoder_attention_mask", "sample_ids", "num_tokens"):
        assert torch.equal(raw[key], pre[key])
    assert raw["decode_s"] > pre["decode_s"]


def test_resampled_stereo_wav(shards, tokenizer):
    """A 48 kHz stereo WAV of a 16 kHz clip: downmixed and resampled back, its features stay close to
    the clip's precomputed ones."""
    clip = shards["speech"][0]
    mono = decode_audio(clip.media, 16_000)
    up = soxr.resample(mono, 16_000, 48_000)
    buf = io.BytesIO()
    sf.write(buf, np.stack([up, up], axis=1), 48_000, format="WAV", subtype="FLOAT")
    wav = replace(clip, media=buf.getvalue(), ext="wav", mime="audio/wav", input_features=None)
    collator = SpeechCollator(tokenizer, build_feature_extractor(), max_target_tokens=64, decoder_start_token_id=2)
    got = collator([wav], epoch=0)["input_features"][0].numpy()
    # soxr's HQ round trip is near-lossless below its anti-alias roll-off: the median bin is unchanged
    # (~1e-7) and mel bins 0-69 (centres up to ~5.4 kHz) move by at most 3e-3 to 1e-2 (measured on three clips);
    # the top bins, at the 8 kHz band edge where the roll-off removes energy, move by up to ~0.37
    diff = np.abs(got - clip.input_features)
    assert np.median(diff) < 1e-3 and diff[:70].max() < 0.02


def test_speech_targets(shards, tokenizer):
    clips = shards["speech"][:4]
    start = 2
    batch = SpeechCollator(tokenizer, build_feature_extractor(), max_target_tokens=64,
                           decoder_start_token_id=start)(clips, epoch=5)
    labels, dec, dmask = batch["labels"], batch["decoder_input_ids"], batch["decoder_attention_mask"]
    for r, c in enumerate(clips):
        n = int(dmask[r].sum())
        expected = tokenizer(c.text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        assert labels[r, :n].tolist() == expected and (labels[r, n:] == IGNORE_INDEX).all()
        assert dec[r, 0] == start and dec[r, 1:n].tolist() == expected[:-1]
        assert (dec[r, n:] == tokenizer.pad_token_id).all()
        assert tokenizer.decode(labels[r, :n - 1].tolist()) == c.text
    assert int(batch["num_loss_tokens"]) == int(batch["num_tokens"]) == int(dmask.sum())
    assert batch["modalities"] == {"audio": 4}
    short = SpeechCollator(tokenizer, build_feature_extractor(), max_target_tokens=2, decoder_start_token_id=start)
    cut = short(clips[:1], epoch=0)
    assert cut["labels"].shape == (1, 2) and tokenizer.eos_token_id not in cut["labels"][0].tolist()


def test_augment_settings_and_crop():
    for bad in (dict(random_resized_crop_scale=(0.0, 1.0)), dict(random_resized_crop_scale=(0.8, 0.5)),
                dict(random_resized_crop_ratio=(2.0, 1.0)), dict(hflip_probability=1.5), dict(brightness=-0.1),
                dict(contrast=float("inf"))):
        with pytest.raises(ValueError):
            AugmentSettings(**bad)
    assert not AugmentSettings().enabled and AUGMENT.enabled
    # a 1000 x 10 strip: every try's crop is too tall, so the fallback centre crop at the widest ratio
    assert crop_box(1000, 10, (0.9, 1.0), (3 / 4, 4 / 3), np.random.default_rng(0)) == (493, 0, 13, 10)
    rng = np.random.default_rng(1)
    for _ in range(200):
        left, top, w, h = crop_box(64, 48, (0.08, 1.0), (3 / 4, 4 / 3), rng)
        assert 0 <= left and left + w <= 64 and 0 <= top and top + h <= 48 and w > 0 and h > 0
    image = Image.new("RGB", (40, 20), (100, 50, 25))
    assert augment(image, AugmentSettings(), sample_rng(0, 0, "0" * 32)) is image
    out = augment(image, AUGMENT, sample_rng(0, 0, "f" * 32), size=SIZE)
    assert out.size == (SIZE, SIZE)
    with pytest.raises(ValueError):
        sample_rng(0, 0, "xyz")
    assert sample_id_int("f" * 32) == 2**63 - 1


def test_decode_image_converts_to_rgb():
    buf = io.BytesIO()
    Image.new("LA", (5, 4), (128, 255)).save(buf, "PNG")
    image = decode_image(buf.getvalue())
    assert image.mode == "RGB" and image.getpixel((0, 0)) == (128, 128, 128)


# ------------------------------------------------------------------ the fast image path vs the processor
# FastImagePath does the processor's geometric steps with the same PIL calls on the same uint8 pixels and
# maps each uint8 value through a table computed by transformers' own rescale / normalize: the bound is
# exact equality (max abs difference 0), asserted with assert_array_equal below.


def _encoded(image: Image.Image, fmt: str) -> Image.Image:
    """`image` written as `fmt` and decoded again: the modes and info (transparency) a decoder gives."""
    buf = io.BytesIO()
    image.save(buf, fmt)
    return Image.open(io.BytesIO(buf.getvalue()))


def _varied_images(shards) -> list[Image.Image]:
    """Real decoded images of several sizes, aspect ratios and modes."""
    photos = [Image.open(io.BytesIO(s.media)) for s in shards["photos"][:3]]
    page = Image.open(io.BytesIO(shards["scans"][0].media))
    base = photos[0].convert("RGB")
    rgba = base.convert("RGBA")
    rgba.putalpha(Image.linear_gradient("L").resize(base.size))
    palette = base.convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    palette.info["transparency"] = 3
    return [
        *photos, page,
        _encoded(rgba, "PNG"),  # RGBA with a real alpha gradient: composited onto white
        _encoded(base.convert("L").resize((40, 70)), "PNG"),  # L, tall
        _encoded(base.convert("CMYK").resize((57, 33)), "JPEG"),  # CMYK JPEG
        _encoded(base.convert("LA"), "PNG"),
        _encoded(palette, "PNG"),  # P with a transparent index
        _encoded(base.resize((1, 1)), "PNG"),  # tiny
        _encoded(base.resize((500, 3)), "PNG"),  # very wide
        _encoded(base.resize((2, 301)), "JPEG"),  # very tall
        _encoded(base.resize((SIZE, SIZE)), "PNG"),  # already the size: no resize
        _encoded(base.resize((SIZE + 1, SIZE - 1)), "WEBP"),
    ]


def _clip_kwargs(size: int, **extra) -> dict:
    return dict(size={"shortest_edge": size}, crop_size={"height": size, "width": size},
                image_mean=[0.48145466, 0.4578275, 0.40821073], image_std=[0.26862954, 0.26130258, 0.27577711],
                **extra)


@pytest.mark.parametrize("size", [SIZE, 31, 224])
def test_fast_image_path_equals_processor(shards, size):
    from transformers import CLIPImageProcessor, CLIPImageProcessorPil

    images = _varied_images(shards)
    modes = {image.mode for image in images}
    assert {"RGB", "RGBA", "L", "CMYK", "LA", "P"} <= modes and (1, 1) in {image.size for image in images}
    ours = build_image_processor(ImageSettings(size=size))
    fast = FastImagePath(ours)
    assert fast.plan()[0] is not None, fast.plan()[1]
    got = fast(images)
    assert got.dtype == np.float32 and got.shape == (len(images), 3, size, size)
    for processor in (ours, CLIPImageProcessorPil(**_clip_kwargs(size)), CLIPImageProcessor(**_clip_kwargs(size))):
        expected = processor(images=images, return_tensors="np")["pixel_values"]
        np.testing.assert_array_equal(got, expected)  # bound: 0 (see above)
        assert fast([images[0]]).tobytes() == expected[:1].tobytes()


@pytest.mark.parametrize("settings", [
    dict(resample=0), dict(resample=2), dict(resample=1, do_center_crop=False, size={"height": 20, "width": 36}),
    dict(do_rescale=False), dict(do_normalize=False), dict(do_rescale=False, do_normalize=False),
    dict(rescale_factor=1 / 127.5, image_mean=0.5, image_std=0.5),
    dict(size={"shortest_edge": 20}),  # the crop is larger than the resized image: zero padding
    dict(crop_size={"height": 17, "width": 40}), dict(do_resize=False, crop_size={"height": 1, "width": 1}),
])
def test_fast_image_path_other_settings(shards, settings):
    from transformers import CLIPImageProcessorPil, SiglipImageProcessorPil

    images = [im for im in _varied_images(shards) if im.size != (500, 3) and im.size != (2, 301)]
    if settings.get("do_resize") is False:
        images = [im.resize((24, 24)) for im in images]
    processors = [CLIPImageProcessorPil(**{**_clip_kwargs(SIZE), **settings})]
    if "shortest_edge" not in settings.get("size", {}):  # SigLIP does not crop: a shortest edge gives ragged sizes
        processors.append(SiglipImageProcessorPil(**settings))  # size {"height", "width"}, no crop
    for processor in processors:
        fast = FastImagePath(processor)
        assert fast.plan()[0] is not None, fast.plan()[1]
        expected = np.asarray(processor(images=images, return_tensors="np")["pixel_values"], dtype=np.float32)
        np.testing.assert_array_equal(fast(images), expected)


def test_fast_image_path_falls_back(shards, tokenizer):
    from transformers import CLIPImageProcessorPil

    class Shifted(CLIPImageProcessorPil):
        def normalize(self, image, mean, std, **kwargs):
            return super().normalize(image, mean, std, **kwargs) + 1.0

    for processor, reason in ((CLIPImageProcessorPil(**_clip_kwargs(SIZE, do_pad=True)), "do_pad"),
                              (CLIPImageProcessorPil(size={"shortest_edge": SIZE, "longest_edge": 64}),
                               "longest_edge"),
                              (CLIPImageProcessorPil(size={"max_height": SIZE, "max_width": SIZE}), "max_height"),
                              (Shifted(**_clip_kwargs(SIZE)), "overrides normalize"),
                              (object(), "not transformers' PIL backend")):
        plan, why = FastImagePath(processor).plan()
        assert plan is None and reason in why
    # a setting changed after the collator was built is seen (the plan is read on every batch)
    processor = CLIPImageProcessorPil(**_clip_kwargs(SIZE))
    processor.do_pad = True
    assert FastImagePath(processor)(_varied_images(shards)[:2]) is None
    # the collator then calls the processor: its output, whatever it is
    shifted = Shifted(**_clip_kwargs(SIZE))
    samples = shards["photos"][:2]
    collator = VisionLanguageCollator(tokenizer, shifted, NO_AUGMENT, 7, image_seq_length=IMAGE_SEQ,
                                      max_text_tokens=512)
    expected = shifted(images=[decode_image(s.media) for s in samples], return_tensors="np")["pixel_values"]
    np.testing.assert_array_equal(collator(samples, epoch=0)["pixel_values"].numpy(), expected)
    # non-RGB images with do_convert_rgb off, and unequal output shapes: the processor's business
    raw = CLIPImageProcessorPil(**_clip_kwargs(SIZE, do_convert_rgb=False))
    assert FastImagePath(raw)([Image.new("L", (8, 8))]) is None
    uncropped = CLIPImageProcessorPil(**_clip_kwargs(SIZE, do_center_crop=False))
    assert FastImagePath(uncropped)([Image.new("RGB", (8, 8)), Image.new("RGB", (8, 16))]) is None


@pytest.mark.parametrize("settings", [AUGMENT, AugmentSettings(hflip_probability=0.5, contrast=0.3)])
def test_augmented_pixels_are_processor_of_augmented_images(shards, tokenizer, settings):
    """With augmentation (a crop resized to SIZE x SIZE: no resize / crop left; or flip + jitter only:
    the full resize path) the collator's pixels are the processor's output for the augmented images."""
    samples = shards["photos"][:4] + shards["scans"][:2]
    collator = _vl(tokenizer, settings, seed=3)
    got = collator(samples, epoch=2)["pixel_values"].numpy()
    processor = build_image_processor(ImageSettings(size=SIZE))
    augmented = [augment(decode_image(s.media), settings, sample_rng(3, 2, s.id),
                         SIZE if settings.random_resized_crop_scale else None) for s in samples]
    expected = processor(images=augmented, return_tensors="np")["pixel_values"]
    np.testing.assert_array_equal(got, expected)


def test_batched_chat_template_equals_single_calls(shards, tokenizer):
    """rows() renders the batch in one apply_chat_template call: the same ids and labels as one call per
    conversation (the unbatched call the collator made before)."""
    samples = shards["photos"][:6] + shards["scans"][:3]
    collator = _vl(tokenizer)
    batched = collator.rows(samples)
    for s, (ids, labels) in zip(samples, batched, strict=True):
        enc = tokenizer.apply_chat_template(collator.messages(s), tokenize=True, return_dict=True,
                                            return_assistant_tokens_mask=True)
        want_ids, want_labels = collator._expand(s, np.asarray(enc["input_ids"], dtype=np.int64),
                                                 np.asarray(enc["assistant_masks"], dtype=bool))
        np.testing.assert_array_equal(ids, want_ids)
        np.testing.assert_array_equal(labels, want_labels)
        assert int((labels != IGNORE_INDEX).sum()) > 0


class _CollateInWorker(torch.utils.data.IterableDataset):
    def __init__(self, collator, samples) -> None:
        self.collator, self.samples = collator, samples

    def __iter__(self):
        batch = self.collator(self.samples, epoch=1)
        yield {**batch, "made_shared": batch["pixel_values"].is_shared()}


def test_pixel_values_built_in_shared_memory_in_a_worker(shards, tokenizer):
    samples = shards["photos"][:3]
    collator = _vl(tokenizer)
    here = collator(samples, epoch=1)
    assert not here["pixel_values"].is_shared()
    loader = torch.utils.data.DataLoader(_CollateInWorker(collator, samples), batch_size=None, num_workers=1)
    (there,) = list(loader)
    assert there["made_shared"] and there["pixel_values"].is_shared()
    for key in ("pixel_values", "input_ids", "labels", "attention_mask"):
        assert torch.equal(there[key], here[key])
