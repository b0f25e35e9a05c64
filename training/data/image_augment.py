"""Seeded image augmentation on PIL images: random resized crop, horizontal flip, colour jitter.

Written here instead of taken from torchvision because torchvision cannot be installed on this
platform's CPU machines (no wheel matching the pinned CPU torch), and the training job must run there.
The crop follows torchvision.transforms.RandomResizedCrop.get_params (10 tries of area / log-ratio
sampling, then a centre crop clamped to the ratio range) and the jitter follows ColorJitter (factors
uniform in [max(0, 1 - x), 1 + x], applied in a random order), with PIL.ImageEnhance doing the blending
(the same blends as torchvision's PIL backend: against black, the grayscale mean, and the grayscale).

Every random draw comes from a numpy Generator seeded by (seed, epoch, sample id) (`sample_rng`), never
from a global or per-worker stream: a resumed run, or a run with another number of loader workers or
ranks, gets the same augmented pixels for the same sample in the same epoch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageEnhance

_JITTERS = ("brightness", "contrast", "saturation")
_ENHANCERS = {"brightness": ImageEnhance.Brightness, "contrast": ImageEnhance.Contrast,
              "saturation": ImageEnhance.Color}
_CROP_TRIES = 10  # torchvision's RandomResizedCrop.get_params


@dataclass(frozen=True)
class AugmentSettings:
    """All off by default: augment() then returns the image unchanged (and draws nothing)."""
    random_resized_crop_scale: tuple[float, float] | None = None
    """Crop area as a fraction of the image's, e.g. (0.08, 1.0) as torchvision; None: no crop."""
    random_resized_crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    """Crop width / height range, sampled log-uniformly (torchvision's default)."""
    hflip_probability: float = 0.0
    brightness: float = 0.0
    contrast: float = 0.0
    saturation: float = 0.0

    def __post_init__(self) -> None:
        if self.random_resized_crop_scale is not None:
            lo, hi = self.random_resized_crop_scale
            if not 0.0 < lo <= hi <= 1.0:
                raise ValueError(f"random_resized_crop_scale must satisfy 0 < low <= high <= 1, "
                                 f"got {self.random_resized_crop_scale}")
        lo, hi = self.random_resized_crop_ratio
        if not (0.0 < lo <= hi and math.isfinite(hi)):
            raise ValueError(f"random_resized_crop_ratio must satisfy 0 < low <= high < inf, "
                             f"got {self.random_resized_crop_ratio}")
        if not 0.0 <= self.hflip_probability <= 1.0:
            raise ValueError(f"hflip_probability must be in [0, 1], got {self.hflip_probability}")
        for name in _JITTERS:
            value = getattr(self, name)
            if not (0.0 <= value and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number >= 0, got {value}")

    @property
    def enabled(self) -> bool:
        return (self.random_resized_crop_scale is not None or self.hflip_probability > 0
                or any(getattr(self, name) > 0 for name in _JITTERS))


def sample_rng(seed: int, epoch: int, sample_id: str) -> np.random.Generator:
    """The generator for one sample's augmentation in one epoch: a function of (seed, epoch, id) only.

    The 128-bit id (32 hex digits) enters as four 32-bit words, all of its bits: SeedSequence hashes the
    whole entropy list, so nearby ids or epochs give unrelated streams."""
    if seed < 0 or epoch < 0:
        raise ValueError(f"seed and epoch must be >= 0, got seed={seed}, epoch={epoch}")
    if len(sample_id) != 32:
        raise ValueError(f"sample id must be 32 hex digits, got {sample_id!r}")
    value = int(sample_id, 16)  # ValueError on a non-hex id
    words = [(value >> shift) & 0xFFFF_FFFF for shift in (96, 64, 32, 0)]
    return np.random.default_rng([seed, epoch, *words])


def crop_box(width: int, height: int, scale: tuple[float, float], ratio: tuple[float, float],
             rng: np.random.Generator) -> tuple[int, int, int, int]:
    """(left, top, crop width, crop height): torchvision's RandomResizedCrop.get_params with numpy draws."""
    area = width * height
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(_CROP_TRIES):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            top = int(rng.integers(0, height - h + 1))
            left = int(rng.integers(0, width - w + 1))
            return left, top, w, h
    # fallback: the largest centred crop whose ratio is within range
    in_ratio = width / height
    if in_ratio < ratio[0]:
        w, h = width, int(round(width / ratio[0]))
    elif in_ratio > ratio[1]:
        w, h = int(round(height * ratio[1])), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


def augment(image: Image.Image, settings: AugmentSettings, rng: np.random.Generator,
            size: int | None = None) -> Image.Image:
    """The augmented image. Draw order (fixed, so the pixels are a function of the rng's seed): crop,
    flip, jitter order, jitter factors.

    Like torchvision, the crop is resized to a square, which stretches it by up to its ratio (part of
    the augmentation): to size x size when given (the model's input: the image processor's resize is
    then a no-op), else to the square of the crop's own area."""
    if settings.random_resized_crop_scale is not None:
        left, top, w, h = crop_box(image.width, image.height, settings.random_resized_crop_scale,
                                   settings.random_resized_crop_ratio, rng)
        side = size if size is not None else max(1, int(round(math.sqrt(w * h))))
        image = image.resize((side, side), Image.Resampling.BICUBIC, box=(left, top, left + w, top + h))
    if settings.hflip_probability > 0 and rng.random() < settings.hflip_probability:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    jitters = [name for name in _JITTERS if getattr(settings, name) > 0]
    if jitters:
        order = rng.permutation(len(jitters))
        for k in order:
            name = jitters[int(k)]
            x = getattr(settings, name)
            factor = rng.uniform(max(0.0, 1.0 - x), 1.0 + x)
            image = _ENHANCERS[name](image).enhance(factor)
    return image
