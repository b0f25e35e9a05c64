"""The images room: one image file's bytes -> the normalised RGB image a document stores, and what was measured.

Work per file is bounded before any pixel is decoded: the byte count is checked before Pillow sees the
file, and width x height from the header against `max_pixels` (Pillow's own bomb check, a warning at
89.5 MP and an error at 179 MP in its global `MAX_IMAGE_PIXELS`, is neither relied on nor changed; its
error stays a hard limit above 179 MP, reported as the same `decompression_bomb`). Then every file is
decoded in full with `LOAD_TRUNCATED_IMAGES` off, so a truncated file is `corrupt_image`, never a half-grey image.

Bytes that need no change (JPEG/PNG/WebP, 8-bit RGB, one frame, no EXIF rotation, no resize) are kept as
they are: no re-encode, no generation loss. Everything else is re-encoded, JPEG sources as JPEG at
`jpeg_quality`, the rest as PNG (lossless). Encoders run without timestamps or metadata: the same input
gives the same bytes (for a given Pillow/zlib/libjpeg build).
"""

from __future__ import annotations

import io
import math
import struct

import imagehash
import numpy as np
from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

from platform_assets.media.errors import MediaRejected
from platform_assets.media.png import rgb_png
from platform_assets.media.prepared import PreparedMedia
from platform_assets.media.settings import DEFAULT_MEDIA, ImageSettings
from platform_assets.schema import QuarantineReason

# Sources whose bytes can be stored as they are (when already normalised) and their mime types. MPO is a
# camera JPEG with extra embedded images (a preview, a depth map): stored and re-encoded as a JPEG.
_KEPT_MIME = {"JPEG": "image/jpeg", "MPO": "image/jpeg", "PNG": "image/png", "WEBP": "image/webp"}
_JPEG_SOURCES = frozenset({"JPEG", "MPO"})
# What Image.open may identify. Left out: formats that hand the file to an interpreter (EPS runs
# Ghostscript) and formats without a real signature (TGA, PCD, ...) that would "identify" random bytes.
# (JPEG covers MPO; AVIF only where Pillow was built with libavif.)
Image.init()
FORMATS = tuple(f for f in ("PNG", "JPEG", "GIF", "WEBP", "TIFF", "BMP", "ICO", "PPM", "AVIF") if f in Image.OPEN)
# MPO's extra images are not frames of an animation: `animated = quarantine` does not reject phone photos.
_STILL_MULTI_IMAGE = frozenset({"MPO"})
_ALPHA_MODES = frozenset({"RGBA", "LA", "La", "PA", "RGBa"})
_DEEP_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N", "I", "F"})
# What Pillow's plugins raise on damaged or hostile data (beyond its own OSError/SyntaxError convention).
_DAMAGED = (OSError, SyntaxError, ValueError, EOFError, struct.error, IndexError, KeyError, TypeError,
            ZeroDivisionError)
_SIGNATURES = ((b"\x89PNG\r\n\x1a\n", "PNG"), (b"\xff\xd8\xff", "JPEG"), (b"GIF87a", "GIF"), (b"GIF89a", "GIF"),
               (b"II*\x00", "TIFF"), (b"MM\x00*", "TIFF"))
_ORIENTATION_TAG = 0x0112  # EXIF Orientation: 1 = upright, 2..8 = flips and rotations

# PNG bytes come from media/png.py (filter None, zlib level 1): 0.115 ms and 3.9 KiB per 64 px emoji, 117 ms
# and 2.8 MB per sprite sheet, against Pillow's encoder at level 1 + Z_RLE (0.206 ms; 206 ms and 4.7 MB) and
# at its default level 6 (0.49 ms; 364 ms and 2.5 MB): Pillow's adaptive row filter is most of its cost.

# phash and luma_std are measured on a copy whose longest side is 512-1023 px (a box-filter reduce() by an
# integer factor, or a JPEG decoded at 1/2-1/8 scale). On a 4092 px sprite sheet: 14 ms instead of 110 ms,
# phash identical (it resizes to 32 x 32 anyway), luma_std 40.0 instead of 47.1 (a sheet of 64 px sprites is
# all fine detail; a 256 px copy gave 34.3); on a 2400 px photo-like image luma_std 56.1 instead of 56.3.
MEASURE_SIDE = 512
_LEVELS = np.arange(256, dtype=np.float64)
_LEVELS_SQUARED = _LEVELS * _LEVELS


def prepare_image(data: bytes, settings: ImageSettings = DEFAULT_MEDIA.images) -> PreparedMedia:
    """The stored image and its measurements, or MediaRejected with a quarantine reason and what was found."""
    if len(data) > settings.max_file_bytes:
        raise MediaRejected(QuarantineReason.MEDIA_TOO_LARGE,
                            f"{len(data)} bytes > images.max_file_bytes {settings.max_file_bytes}")
    if ImageFile.LOAD_TRUNCATED_IMAGES:
        # Set process-wide by some other code: Pillow would then fill a truncated file with grey silently.
        raise RuntimeError("PIL.ImageFile.LOAD_TRUNCATED_IMAGES is True: truncated images would be accepted")
    # Pillow's DecompressionBombWarning (> 89.5 MP) is not turned into an error: `max_pixels` is checked
    # from the header first (64 MP by default, so the warning never fires), and `warnings.catch_warnings`
    # changes process-wide state, which is not safe while ingest reads two groups on two threads. Pillow's
    # error (> 179 MP) stays a hard limit whatever `max_pixels` says.
    try:
        return _prepare(data, settings)
    except Image.DecompressionBombError as e:
        raise MediaRejected(QuarantineReason.DECOMPRESSION_BOMB, f"Pillow's own limit: {e}") from e
    except UnidentifiedImageError as e:
        signature = _signature(data)
        if signature:  # the start of a known format whose header Pillow could not parse: cut short or damaged
            raise MediaRejected(QuarantineReason.CORRUPT_IMAGE,
                                f"{len(data)} bytes with a {signature} signature: unreadable header") from e
        raise MediaRejected(QuarantineReason.UNSUPPORTED_MEDIA,
                            f"{len(data)} bytes starting {data[:8]!r}: not an image format Pillow reads") from e


def _prepare(data: bytes, settings: ImageSettings) -> PreparedMedia:
    where = f"{len(data)} bytes"
    try:
        im = Image.open(io.BytesIO(data), formats=FORMATS)
        fmt, mode, (width, height) = im.format or "", im.mode, im.size
        where = f"{fmt} {mode} {width} x {height}"
        if width * height == 0:
            raise MediaRejected(QuarantineReason.CORRUPT_IMAGE, f"{where}: no pixels")
        if width * height > settings.max_pixels:
            raise MediaRejected(QuarantineReason.DECOMPRESSION_BOMB, f"{fmt} header says {width} x {height} = "
                                f"{width * height} pixels > images.max_pixels {settings.max_pixels}")
        if type(im).verify is not ImageFile.ImageFile.verify:
            # A real check only where a plugin implements it (PNG: the CRC of every chunk through IEND,
            # which decoding skips); elsewhere verify() only closes the file and the reopen would cost
            # ~15 us per image for nothing. verify() leaves the image unusable: open it again.
            im.verify()
            im = Image.open(io.BytesIO(data), formats=FORMATS)
        frames = getattr(im, "n_frames", 1)  # GIF: walks the frame headers without decoding them
        if frames > 1 and settings.animated == "quarantine" and fmt not in _STILL_MULTI_IMAGE:
            raise MediaRejected(QuarantineReason.ANIMATED_IMAGE,
                                f"{where}: {frames} frames, images.animated = quarantine")
        target = _fit((width, height), settings.resize_longest)  # in the file's orientation
        keepable = (fmt in _KEPT_MIME and mode == "RGB" and (frames == 1 or fmt in _STILL_MULTI_IMAGE)
                    and target is None and "transparency" not in im.info
                    and (fmt != "PNG" or im.tile[0][3] == "RGB"))  # tile rawmode: not 16-bit ("RGB;16B")
        # JPEG's EXIF is in the header; PNG's eXIf chunk may follow the pixels, so it is read after load().
        orientation = _orientation(im) if fmt in _JPEG_SOURCES else 1
        draft = _fit((width, height), MEASURE_SIDE) if keepable and orientation == 1 else target
        if fmt in _JPEG_SOURCES and draft is not None:
            # Decode at the smallest 1/2-1/8 scale still at least this size: to measure bytes that are kept,
            # or because the image is downscaled anyway. libjpeg still entropy-decodes every scan, so a
            # truncated or broken stream fails as it would at full size, 3-4x faster.
            im.draft(None, draft)
        im.load()
        if fmt not in _JPEG_SOURCES:
            orientation = _orientation(im)
    except (MediaRejected, UnidentifiedImageError):
        raise
    except _DAMAGED as e:
        # "image file is truncated", "broken PNG file (bad CRC)", "decoder error -2", "no more images" ...
        raise MediaRejected(QuarantineReason.CORRUPT_IMAGE, f"{where}: {type(e).__name__}: {e}") from e

    if keepable and orientation == 1:
        luma_std, phash = _measure(im, settings.phash)
        measured = _measured(width, height, fmt, mode, frames, luma_std, phash)
        return PreparedMedia(kind="image", mime=_KEPT_MIME[fmt], data=data, measured=measured)

    if orientation != 1:
        im = ImageOps.exif_transpose(im)  # 5-8 swap width and height
    try:
        im = _to_rgb(im, settings.background)
    except ValueError as e:  # a mode Pillow has no conversion for (premultiplied La)
        raise MediaRejected(QuarantineReason.UNSUPPORTED_MEDIA, f"{where}: {e}") from e
    if target is not None:
        size = target if orientation < 5 else target[::-1]
        if im.size != size:
            # reducing_gap=3: a box reduce() by an integer factor first, then Lanczos over the last >= 3x;
            # Pillow's docs: "indistinguishable from fair resampling in most cases", several times faster.
            im = im.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)
    # No metadata in re-encoded bytes: EXIF (its orientation is applied), ICC (CMYK/grey profiles do not
    # describe the RGB result; PNG would copy it from info), text chunks.
    im.info = {}
    buf = io.BytesIO()
    if fmt in _JPEG_SOURCES:
        # Baseline, non-optimised Huffman tables, Pillow's default 4:2:0 subsampling: deterministic and fast.
        im.save(buf, "JPEG", quality=settings.jpeg_quality)
        mime = "image/jpeg"
    else:
        buf.write(rgb_png(np.asarray(im)))
        mime = "image/png"
    luma_std, phash = _measure(im, settings.phash)
    measured = _measured(im.width, im.height, fmt, mode, frames, luma_std, phash)
    return PreparedMedia(kind="image", mime=mime, data=buf.getvalue(), measured=measured)


def _signature(data: bytes) -> str | None:
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    return next((fmt for magic, fmt in _SIGNATURES if data.startswith(magic)), None)


def _fit(size: tuple[int, int], longest: int | None) -> tuple[int, int] | None:
    """The size whose longest side is `longest` (aspect kept), or None when the image already fits."""
    if longest is None or max(size) <= longest:
        return None
    scale = longest / max(size)
    return max(1, round(size[0] * scale)), max(1, round(size[1] * scale))


def _orientation(im: Image.Image) -> int:
    """EXIF orientation 1-8; 1 for none, out-of-range values or unreadable EXIF (the pixels are still fine)."""
    try:
        value = im.getexif().get(_ORIENTATION_TAG, 1)
    except _DAMAGED:
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def _to_rgb(im: Image.Image, background: tuple[int, int, int]) -> Image.Image:
    """8-bit RGB: alpha and transparent palette entries composited on `background`, deep modes scaled."""
    if im.mode in _DEEP_MODES:
        im = _to_8bit(im)
    if im.mode == "P" and ("transparency" in im.info or (im.palette and im.palette.mode == "RGBA")):
        return _flatten_palette(im, background)
    transparent = im.mode in _ALPHA_MODES or "transparency" in im.info
    if im.mode == "RGB" and not transparent:
        return im
    if not transparent:
        return im.convert("RGB")  # P, L, 1, CMYK (Pillow's plain inversion; ICC profiles are not applied), YCbCr
    if im.mode != "RGBA":
        im = im.convert("RGBA")  # P/L/RGB + tRNS, LA, PA, premultiplied RGBa
    out = Image.new("RGB", im.size, background)
    out.paste(im, mask=im.getchannel("A"))  # out = rgb * a + background * (1 - a), rounded
    return out


def _flatten_palette(im: Image.Image, background: tuple[int, int, int]) -> Image.Image:
    """P with transparent entries: each of the <= 256 palette colours composited on the background once, then
    one P -> RGB pass. Alpha depends on the index only, so this is per-pixel compositing without an RGBA copy
    and a masked paste (a 4092 x 4092 sprite sheet: 36 ms instead of 115 ms)."""
    rgba = np.array(im.getpalette("RGBA"), dtype=np.uint32).reshape(-1, 4)
    key = im.info.pop("transparency", None)
    if isinstance(key, int) and key < len(rgba):
        rgba[key, 3] = 0  # GIF, and PNG's single transparent index
    elif isinstance(key, bytes):
        alphas = np.frombuffer(key, dtype=np.uint8)[: len(rgba)]  # PNG tRNS: one alpha per index
        rgba[: len(alphas), 3] = alphas
    alpha = rgba[:, 3:]
    rgb = (rgba[:, :3] * alpha + np.array(background, dtype=np.uint32) * (255 - alpha) + 127) // 255
    im.putpalette(rgb.astype(np.uint8).tobytes(), "RGB")
    return im.convert("RGB")


def _to_8bit(im: Image.Image) -> Image.Image:
    """L (or LA for a 16-bit grey tRNS key) from I;16*, I or F, scaled over the range, not clipped at 255."""
    a = np.asarray(im)
    if a.dtype.kind == "u" or (a.dtype.kind == "i" and a.size and a.min() >= 0 and a.max() <= 65535):
        # 16-bit samples (I;16, or "I" as Pillow decodes some 16-bit files): 65535 -> 255, 32768 -> 128
        luma = ((a.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)
    elif a.dtype.kind == "f" and a.size and np.nanmin(a) >= 0 and np.nanmax(a) <= 1:
        luma = np.rint(np.nan_to_num(a) * 255).astype(np.uint8)  # float images in [0, 1]
    else:
        # Anything else (32-bit ints, floats out of [0, 1]) has no nominal range: stretch min..max to 0..255.
        f = np.nan_to_num(a.astype(np.float64))
        lo, hi = (float(f.min()), float(f.max())) if f.size else (0.0, 0.0)
        luma = np.rint((f - lo) * (255 / (hi - lo)) if hi > lo else np.zeros_like(f)).astype(np.uint8)
    out = Image.fromarray(luma, "L")
    key = im.info.get("transparency")
    if isinstance(key, int) and a.dtype.kind in "ui":
        alpha = Image.fromarray(np.where(a == key, 0, 255).astype(np.uint8), "L")
        out = Image.merge("LA", (out, alpha))
    return out


def _measure(im: Image.Image, with_phash: bool) -> tuple[float, int | None]:
    """(luma_std, phash) of the stored image, from a copy reduced to a longest side of 512-1023 px."""
    factor = max(im.size) // MEASURE_SIDE
    small = im.reduce(factor) if factor > 1 else im
    luma = small.convert("L")  # ITU-R 601-2 luma, as imagehash uses
    # Standard deviation from the 256-bin histogram (counted in C): 15 us on a 64 px image, ImageStat 56 us.
    hist = np.asarray(luma.histogram(), dtype=np.float64)
    n = hist.sum()
    mean = hist @ _LEVELS / n
    luma_std = math.sqrt(max(hist @ _LEVELS_SQUARED / n - mean * mean, 0.0))
    if not with_phash:
        return luma_std, None
    bits = imagehash.phash(luma).hash.ravel()
    # == int(str(hash), 16): the first bit is the most significant; packbits avoids str()'s Python loop.
    return luma_std, int.from_bytes(np.packbits(bits).tobytes(), "big")


def _measured(width: int, height: int, fmt: str, mode: str, frames: int, luma_std: float,
              phash: int | None) -> dict[str, object]:
    return {"width": width, "height": height, "format": fmt, "mode": mode, "frames": frames,
            "luma_std": luma_std, "phash": phash}
