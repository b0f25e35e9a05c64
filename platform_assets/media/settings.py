"""The `media:` config section: how ingest decodes, normalises and measures images, PDF pages and audio.

These bound the work per file (pixels, pages, seconds) and say what is stored. Filters that are a
matter of taste (minimum side, aspect ratio, blank images, silence, clipping, duration bounds) are
cleaning steps (`image_filter`, `audio_filter` in a source's recipe): they read what ingest measured,
so changing them never decodes a file again.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from platform_assets.contracts import StrictModel


class ImageSettings(StrictModel):
    max_file_bytes: Annotated[int, Field(gt=0)] = 64 * 2**20
    """Files above this are quarantined (`media_too_large`) before decoding."""
    max_pixels: Annotated[int, Field(gt=0)] = 64_000_000
    """Width x height above this is a decompression bomb: quarantined from the header alone, before
    any pixel is decoded (an 8000 x 8000 RGB image decodes to 192 MB). Pillow refuses anything over
    179 MP (twice its MAX_IMAGE_PIXELS) whatever this says, and warns above 89.5 MP."""
    background: tuple[
        Annotated[int, Field(ge=0, le=255)], Annotated[int, Field(ge=0, le=255)], Annotated[int, Field(ge=0, le=255)]
    ] = (255, 255, 255)
    """Transparent pixels are composited on this colour when converting to RGB."""
    animated: Literal["first_frame", "quarantine"] = "first_frame"
    """Several frames (animated GIF/PNG/WebP, multi-page TIFF): keep the first, or quarantine."""
    resize_longest: Annotated[int, Field(gt=0)] | None = None
    """Downscale (never upscale) so the longest side is at most this many pixels (Lanczos)."""
    jpeg_quality: Annotated[int, Field(ge=1, le=100)] = 90
    """A JPEG that had to be re-encoded (rotated, converted, resized) is written at this quality; every
    other format is re-encoded as PNG (lossless). Already-normalised JPEG/PNG/WebP bytes are kept as they are."""
    phash: bool = True
    """Compute the 64-bit perceptual hash used by near-duplicate image removal."""


class PdfSettings(StrictModel):
    max_file_bytes: Annotated[int, Field(gt=0)] = 256 * 2**20
    max_pages: Annotated[int, Field(gt=0)] = 500
    """Pages after the first `max_pages` are not read; one quarantine row (`pdf_page_limit`) names the file."""
    dpi: Annotated[int, Field(ge=18, le=600)] = 96
    """Resolution of the rendered page PNG (96 dpi: an A4 page is 794 x 1123 px)."""
    max_page_pixels: Annotated[int, Field(gt=0)] = 25_000_000
    """A page whose rendering would exceed this (a huge page size) is quarantined instead."""
    ocr: bool = True
    """Pages whose text layer has fewer than `ocr_min_chars` characters are OCR'd with Tesseract."""
    ocr_min_chars: Annotated[int, Field(ge=0)] = 32
    ocr_dpi: Annotated[int, Field(ge=72, le=600)] = 200
    """Tesseract reads best at 200-300 dpi; the page is rendered again at this resolution for OCR only."""
    ocr_language: str = "eng"
    ocr_timeout_s: Annotated[float, Field(gt=0)] = 60.0


class AudioSettings(StrictModel):
    max_file_bytes: Annotated[int, Field(gt=0)] = 256 * 2**20
    sample_rate: Annotated[int, Field(ge=8000, le=48000)] = 16_000
    """Clips are down-mixed to mono and resampled (soxr, high quality) to this rate: Whisper's 16 kHz."""
    max_duration_s: Annotated[float, Field(gt=0)] = 600.0
    """Longer clips are quarantined from the header alone (`audio_too_long`), before decoding."""
    silence_dbfs: float = -50.0
    """A 20 ms frame quieter than this (RMS) counts as silent for `silent_fraction`."""
    clip_level: Annotated[float, Field(gt=0, le=1)] = 0.999
    """A sample at or above this magnitude (full scale = 1) counts as clipped."""
    output: Literal["flac", "wav"] = "flac"
    """Stored encoding of the prepared clip: 16-bit FLAC (lossless, ~half of WAV) or 16-bit WAV."""


class MediaSettings(StrictModel):
    """The `media:` section."""

    images: ImageSettings = ImageSettings()
    pdf: PdfSettings = PdfSettings()
    audio: AudioSettings = AudioSettings()


DEFAULT_MEDIA = MediaSettings()
