"""Images to `pixel_values`: the image settings, the CLIP/SigLIP processor built from them (nothing
downloaded), decoding, and `FastImagePath`, which computes the processor's own pixel_values on uint8
images (bit-identical, ~3x cheaper). Used by media_collate.py's VisionLanguageCollator."""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import get_worker_info

from training.data.image_augment import AugmentSettings
from training.data.shared_buffers import new_shared_float32, worker_buffers

if TYPE_CHECKING:
    from transformers.image_processing_utils import BaseImageProcessor

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)  # OpenAI CLIP's, as transformers' OPENAI_CLIP_MEAN
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass(frozen=True)
class ImageSettings:
    size: int = 224  # CLIP ViT-B/16 and ViT-L/14's input side
    mean: tuple[float, float, float] = CLIP_MEAN
    std: tuple[float, float, float] = CLIP_STD
    augment: AugmentSettings = field(default_factory=AugmentSettings)

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"image size must be >= 1, got {self.size}")
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            raise ValueError(f"mean and std need 3 channels and std > 0, got {self.mean}, {self.std}")


def build_image_processor(settings: ImageSettings) -> BaseImageProcessor:
    """CLIP's preprocessing from explicit arguments (nothing fetched): resize the shortest edge to size
    (bicubic), centre-crop size x size, scale to [0, 1], normalise by mean / std.

    The PIL backend is named (CLIPImageProcessorPil, a CLIPImageProcessor): the default class wants
    torchvision, which this platform cannot install, and falls back to it with a warning; naming it also
    keeps pixels identical between CPU machines and GPU machines where torchvision may exist."""
    from transformers import CLIPImageProcessorPil

    return CLIPImageProcessorPil(
        size={"shortest_edge": settings.size}, crop_size={"height": settings.size, "width": settings.size},
        image_mean=list(settings.mean), image_std=list(settings.std),
        do_resize=True, do_center_crop=True, do_rescale=True, do_normalize=True, do_convert_rgb=True)


def decode_image(data: bytes) -> Image.Image:
    """The stored image as RGB (a palette, grayscale or alpha image is converted; alpha is dropped)."""
    with Image.open(io.BytesIO(data)) as img:
        return img.convert("RGB")


def empty_float32(shape: tuple[int, ...]) -> torch.Tensor:
    """An uninitialised float32 tensor: in shared memory inside a DataLoader worker (torch's default_collate
    does the same, with the same storage call), so the worker sends a handle instead of copying it there;
    in one of the worker's recycled buffers where the MediaLoader set them up (shared_buffers.py)."""
    if get_worker_info() is None:
        return torch.empty(shape, dtype=torch.float32)
    buffers = worker_buffers()
    if buffers is not None:
        return buffers.empty_float32(shape)
    return new_shared_float32(math.prod(shape)).view(shape)


# The processor methods the fast path stands in for: a class that overrides any of them (a model-specific
# processor, remote code) may do something else, so it keeps the processor call.
_PIL_PIPELINE_METHODS = ("__call__", "preprocess", "_standardize_kwargs", "_validate_preprocess_kwargs",
                         "_preprocess_image_like_inputs", "_prepare_image_like_inputs", "_prepare_images_structure",
                         "fetch_images", "process_image", "convert_to_rgb", "_preprocess", "resize", "center_crop",
                         "rescale", "normalize", "pad")


@dataclass(frozen=True)
class _FastPlan:
    convert_rgb: bool
    resize: tuple[str, int, int] | None  # ("shortest_edge", size, 0) | ("fixed", height, width) | None
    resample: int
    crop: tuple[int, int] | None  # (height, width)
    lut: np.ndarray  # [3, 256] float32: the processor's rescale + normalize of every uint8 value per channel


class FastImagePath:
    """The image processor's pixel_values, computed on uint8 images: bit-identical, ~3x cheaper.

    Only for transformers' PIL backend (`CLIPImageProcessorPil`, `SiglipImageProcessorPil`, and the
    `CLIPImageProcessor` that falls back to it without torchvision) whose pipeline methods are the
    backend's own (`_PIL_PIPELINE_METHODS`). That backend, per image (transformers 5.x,
    image_processing_backends.PilBackend + image_transforms):
    1. convert_to_rgb: an image with an alpha band or a `transparency` entry is composited onto white,
       any other converted to RGB;
    2. resize: the uint8 array goes back to a PIL image (uint8: `_rescale_for_pil_conversion` is False for
       uint8) and PIL resizes it with the processor's `resample` to get_resize_output_image_size's
       (height, width): the short side becomes `shortest_edge`, the long one int(size * long / short)
       (truncated), or to (height, width) when size has both;
    3. center_crop: top = (H - h) // 2, left = (W - w) // 2, zero padding (ceil-centred) where the image
       is smaller than the crop;
    4. rescale: float64(x) * rescale_factor, then float32; 5. normalize: (x - mean) / std in float32.
    Steps 1-3 act on uint8 pixels, so doing them with the same PIL calls here gives the same bytes (PIL's
    resize to the image's own size returns a copy: skipped, e.g. after augment() already resized to
    size x size). Steps 4-5 map each uint8 value of a channel to one float32: the 3 x 256 results are
    computed once with transformers' own `rescale` / `normalize` functions, and the batch is a table
    lookup into a preallocated [B, 3, H, W] array: exactly the processor's values (max abs difference 0),
    where a fused `x * (rescale / std) - mean / std` differs from its two roundings by up to ~5e-7.

    `plan()` says why a configuration is not covered (the caller then calls the processor): another
    backend or overridden methods, do_pad, a size with longest_edge / max_height, a crop_size without
    height and width, a resample that is not a PIL filter, mean / std not of 1 or 3 values."""

    def __init__(self, processor: BaseImageProcessor) -> None:
        self.processor = processor
        self._luts: dict[tuple, np.ndarray] = {}

    def plan(self) -> tuple[_FastPlan | None, str]:
        """(the plan, "") when the fast path computes this processor's output, else (None, the reason).
        Read from the processor on every call, so a changed attribute is never missed."""
        try:
            from transformers.image_processing_backends import PilBackend
            from transformers.image_utils import PILImageResampling
        except ImportError as err:  # another transformers layout: not the pipeline described above
            return None, f"transformers has no PilBackend ({err})"
        proc = self.processor
        if not isinstance(proc, PilBackend):
            return None, f"{type(proc).__name__} is not transformers' PIL backend"
        cls = type(proc)
        for name in _PIL_PIPELINE_METHODS:
            if getattr(cls, name, None) is not getattr(PilBackend, name, None) or name in vars(proc):
                return None, f"{cls.__name__} overrides {name}"
        names = getattr(proc, "_valid_kwargs_names", None)
        if names is None:
            return None, "the processor has no _valid_kwargs_names"
        try:
            kw = proc._standardize_kwargs(**{k: getattr(proc, k, None) for k in names})  # as preprocess() does
        except Exception as err:  # noqa: BLE001 - the processor call raises it again
            return None, f"the processor's settings do not standardize ({err})"
        if kw.get("do_pad"):
            return None, "do_pad"
        resize = None
        resample = kw.get("resample")
        if kw.get("do_resize"):
            size = kw.get("size")
            if size is None:
                return None, "do_resize without size"
            if size.shortest_edge and size.longest_edge:
                return None, "size with shortest_edge and longest_edge"
            if size.shortest_edge:
                resize = ("shortest_edge", int(size.shortest_edge), 0)
            elif size.max_height and size.max_width:
                return None, "size with max_height / max_width"
            elif size.height and size.width:
                resize = ("fixed", int(size.height), int(size.width))
            else:
                return None, f"size {size}"
            if resample is None:
                resample = PILImageResampling.BILINEAR
            elif not isinstance(resample, (PILImageResampling, int)):
                return None, f"resample {resample!r} is not a PIL filter"
        crop = None
        if kw.get("do_center_crop"):
            crop_size = kw.get("crop_size")
            if crop_size is None or crop_size.height is None or crop_size.width is None:
                return None, f"crop_size {crop_size}"
            crop = (int(crop_size.height), int(crop_size.width))
        try:
            lut = self._lut(bool(kw.get("do_rescale")), kw.get("rescale_factor"), bool(kw.get("do_normalize")),
                            kw.get("image_mean"), kw.get("image_std"))
        except Exception as err:  # noqa: BLE001 - e.g. a 2-value mean: the processor call raises it again
            return None, f"rescale / normalize settings ({err})"
        return _FastPlan(bool(kw.get("do_convert_rgb")), resize, int(resample or 0), crop, lut), ""

    def _lut(self, do_rescale: bool, factor: Any, do_normalize: bool, mean: Any, std: Any) -> np.ndarray:
        key = (do_rescale, factor if do_rescale else None, do_normalize,
               repr(mean) if do_normalize else None, repr(std) if do_normalize else None)
        lut = self._luts.get(key)
        if lut is None:
            from transformers.image_transforms import normalize, rescale
            from transformers.image_utils import ChannelDimension

            values = np.broadcast_to(np.arange(256, dtype=np.uint8), (3, 1, 256)).copy()  # [C, H=1, W=256]
            x: np.ndarray = values
            if do_rescale:
                x = rescale(x, factor, data_format=ChannelDimension.FIRST, input_data_format=ChannelDimension.FIRST)
            if do_normalize:
                x = normalize(x, mean, std, data_format=ChannelDimension.FIRST,
                              input_data_format=ChannelDimension.FIRST)
            lut = np.ascontiguousarray(np.asarray(x, dtype=np.float32).reshape(3, 256))
            self._luts[key] = lut
        return lut

    @staticmethod
    def _rgb(image: Image.Image, convert: bool) -> Image.Image | None:
        """transformers.image_transforms.convert_to_rgb on a PIL image; None: not RGB and not converted."""
        if convert:
            if "A" in image.getbands() or image.info.get("transparency") is not None:
                rgba = image.convert("RGBA")
                white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
                return Image.alpha_composite(white, rgba).convert("RGB")
            return image if image.mode == "RGB" else image.convert("RGB")
        return image if image.mode == "RGB" else None

    @staticmethod
    def _crop(array: np.ndarray, height: int, width: int) -> np.ndarray:
        """transformers.image_transforms.center_crop on an [H, W, 3] uint8 array."""
        orig_h, orig_w = array.shape[:2]
        top, left = (orig_h - height) // 2, (orig_w - width) // 2
        bottom, right = top + height, left + width
        if top >= 0 and bottom <= orig_h and left >= 0 and right <= orig_w:
            return array[top:bottom, left:right]
        new_h, new_w = max(height, orig_h), max(width, orig_w)
        padded = np.zeros((new_h, new_w, array.shape[2]), dtype=array.dtype)
        top_pad, left_pad = math.ceil((new_h - orig_h) / 2), math.ceil((new_w - orig_w) / 2)
        padded[top_pad: top_pad + orig_h, left_pad: left_pad + orig_w] = array
        top, bottom, left, right = top + top_pad, bottom + top_pad, left + left_pad, right + left_pad
        return padded[max(0, top): min(new_h, bottom), max(0, left): min(new_w, right)]

    def __call__(self, images: Sequence[Image.Image],
                 empty: Callable[[tuple[int, ...]], np.ndarray] | None = None) -> np.ndarray | None:
        """[B, 3, H, W] float32 equal to `processor(images=images, return_tensors="np")["pixel_values"]`,
        or None where this batch needs the processor (see plan(); also images of unequal output shapes,
        which the processor refuses to stack, and non-RGB images with do_convert_rgb off).
        `empty(shape)`: where to write it (a C-contiguous float32 array), default np.empty."""
        plan, _ = self.plan()
        if plan is None or not images:
            return None
        arrays = []
        for image in images:
            rgb = self._rgb(image, plan.convert_rgb)
            if rgb is None:
                return None
            if plan.resize is not None:
                kind, a, b = plan.resize
                if kind == "shortest_edge":  # get_resize_output_image_size(default_to_square=False)
                    w, h = rgb.size
                    short, long = (w, h) if w <= h else (h, w)
                    new_short, new_long = a, int(a * long / short)
                    new_h, new_w = (new_long, new_short) if w <= h else (new_short, new_long)
                else:
                    new_h, new_w = a, b
                if (new_w, new_h) != rgb.size:  # PIL returns a copy for its own size
                    rgb = rgb.resize((new_w, new_h), resample=plan.resample)
            array = np.asarray(rgb)
            if plan.crop is not None:
                array = self._crop(array, *plan.crop)
            arrays.append(array)
        shape = arrays[0].shape
        if any(a.shape != shape for a in arrays) or len(shape) != 3 or shape[2] != 3:
            return None
        out_shape = (len(arrays), 3, shape[0], shape[1])
        out = np.empty(out_shape, dtype=np.float32) if empty is None else empty(out_shape)
        lut = plan.lut
        for r, array in enumerate(arrays):
            for c in range(3):
                np.take(lut[c], array[:, :, c], out=out[r, c], mode="clip")  # uint8 indices: never clipped
        return out
