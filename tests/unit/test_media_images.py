"""The images room: normalisation to RGB, bytes kept when nothing changes, quarantine reasons, measurements.

Every fixture is drawn by Pillow here, in memory, so the tests say exactly what each file contains."""

import io
import struct
import zlib

import imagehash
import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFile

from platform_assets.media.errors import MediaRejected
from platform_assets.media.images import prepare_image
from platform_assets.media.settings import ImageSettings
from platform_assets.schema import QuarantineReason

MIME_OF_FORMAT = {"PNG": "image/png", "JPEG": "image/jpeg", "MPO": "image/jpeg", "WEBP": "image/webp"}


def encode(im: Image.Image, fmt: str, **options) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **options)
    return buf.getvalue()


def scene(size: tuple[int, int] = (320, 240), seed: int = 0) -> Image.Image:
    """Photo-like: a smooth gradient, a few filled shapes and mild sensor noise (deterministic)."""
    w, h = size
    y, x = np.mgrid[0:h, 0:w]
    rng = np.random.default_rng(seed)
    base = np.stack([x * 200 / w, y * 200 / h, (x + y) * 100 / (w + h)], axis=-1) + rng.normal(0, 4, (h, w, 3))
    im = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(im)
    for _ in range(6):
        x0, y0 = int(rng.integers(0, w * 3 // 4)), int(rng.integers(0, h * 3 // 4))
        box = (x0, y0, x0 + int(rng.integers(w // 8, w // 3)), y0 + int(rng.integers(h // 8, h // 3)))
        fill = tuple(int(v) for v in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)(box, fill=fill)
    return im


def reject(data: bytes, settings: ImageSettings | None = None) -> MediaRejected:
    with pytest.raises(MediaRejected) as info:
        prepare_image(data, settings or ImageSettings())
    return info.value


def stored(prepared) -> Image.Image:
    """The stored bytes decoded back; checks the mime against what Pillow sniffs and the measured size."""
    im = Image.open(io.BytesIO(prepared.data))
    assert MIME_OF_FORMAT[im.format] == prepared.mime
    assert im.size == (prepared.measured["width"], prepared.measured["height"])
    return im


def pixels(im: Image.Image) -> list:
    return [im.getpixel((x, y)) for y in range(im.height) for x in range(im.width)]


def hamming(a: int, b: int) -> int:
    return (a ^ b).bit_count()


# ---- bytes kept as they are ---------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP"])
def test_normalised_rgb_sources_keep_their_exact_bytes(fmt):
    data = encode(scene(), fmt)
    out = prepare_image(data)
    assert out.data == data  # no re-encode: no generation loss, no time spent
    assert out.kind == "image" and out.mime == MIME_OF_FORMAT[fmt]
    assert out.measured | {"luma_std": None, "phash": None} == {
        "width": 320, "height": 240, "format": fmt, "mode": "RGB", "frames": 1, "luma_std": None, "phash": None}
    assert stored(out).mode == "RGB"


def test_large_kept_jpeg_is_measured_on_a_reduced_decode_like_the_full_image():
    # 2400 x 1800: decoded at 1/4 scale (600 x 450) only to measure; phash and luma_std match the full image.
    full = scene((2400, 1800), seed=3)
    out = prepare_image(encode(full, "JPEG", quality=95))
    assert (out.measured["width"], out.measured["height"]) == (2400, 1800)
    reference = Image.open(io.BytesIO(out.data)).convert("L")
    assert hamming(out.measured["phash"], int(str(imagehash.phash(reference)), 16)) <= 4
    assert out.measured["luma_std"] == pytest.approx(float(np.asarray(reference).std()), rel=0.05)


# ---- normalised to RGB ---------------------------------------------------------------------------------


def test_rgba_png_is_composited_on_the_background():
    im = Image.new("RGBA", (4, 1))
    im.putdata([(200, 0, 0, 255), (200, 0, 0, 0), (200, 0, 0, 128), (0, 0, 0, 0)])
    out = prepare_image(encode(im, "PNG"), ImageSettings(background=(0, 0, 250)))
    assert out.mime == "image/png" and out.measured["mode"] == "RGBA"
    # opaque: its own colour; transparent: the background (whatever colour the hidden pixel had); half: a blend
    assert pixels(stored(out)) == [(200, 0, 0), (0, 0, 250), (100, 0, 125), (0, 0, 250)]


def test_palette_gif_with_a_transparent_index():
    im = Image.new("P", (2, 1))
    im.putpalette([255, 0, 0, 0, 255, 0] + [0] * 762)
    im.putdata([0, 1])
    out = prepare_image(encode(im, "GIF", transparency=1))
    assert out.measured["format"] == "GIF" and out.measured["mode"] == "P"
    assert pixels(stored(out)) == [(255, 0, 0), (255, 255, 255)]  # index 1 shows the white background


def test_palette_png_with_partial_alpha_per_index():
    im = Image.new("P", (3, 1))
    im.putpalette([255, 0, 0, 0, 255, 0, 0, 0, 0] + [0] * 759)
    im.putdata([0, 1, 2])
    out = prepare_image(encode(im, "PNG", transparency=bytes([128, 255, 0])), ImageSettings(background=(0, 0, 250)))
    # red at alpha 128: 255 x 128/255 = 128 red, 250 x 127/255 = 125 blue; opaque green; index 2 fully transparent
    assert pixels(stored(out)) == [(128, 0, 125), (0, 255, 0), (0, 0, 250)]


def test_palette_shortcut_composites_like_the_rgba_path():
    # P + tRNS is composited through its palette (fast); the same pixels as RGBA must come out the same.
    rng = np.random.default_rng(5)
    im = Image.fromarray(rng.integers(0, 256, (40, 50), dtype=np.uint8), "P")
    im.putpalette(rng.integers(0, 256, 768, dtype=np.uint8).tobytes())
    alphas = rng.integers(0, 256, 256, dtype=np.uint8).tobytes()
    settings = ImageSettings(background=(30, 60, 90))
    via_palette = np.asarray(stored(prepare_image(encode(im, "PNG", transparency=alphas), settings)), dtype=int)
    im.info["transparency"] = alphas
    via_rgba = np.asarray(stored(prepare_image(encode(im.convert("RGBA"), "PNG"), settings)), dtype=int)
    assert np.abs(via_palette - via_rgba).max() <= 1  # rounding only


def test_rgb_png_with_a_transparent_colour_key_is_not_kept():
    # A tRNS colour key makes an RGB PNG partly transparent: its bytes cannot be kept as they are.
    im = Image.new("RGB", (2, 1))
    im.putdata([(10, 20, 30), (1, 2, 3)])
    data = encode(im, "PNG", transparency=(1, 2, 3))
    out = prepare_image(data, ImageSettings(background=(90, 90, 90)))
    assert out.data != data
    assert pixels(stored(out)) == [(10, 20, 30), (90, 90, 90)]


def test_cmyk_jpeg_becomes_an_rgb_jpeg():
    im = Image.new("CMYK", (32, 32), (0, 255, 255, 0))  # no cyan, full magenta and yellow: red
    out = prepare_image(encode(im, "JPEG", quality=95))
    assert out.mime == "image/jpeg" and out.measured["mode"] == "CMYK"
    back = stored(out)
    assert back.mode == "RGB"
    r, g, b = back.getpixel((16, 16))
    assert r > 240 and g < 15 and b < 15


def test_16_bit_grey_is_scaled_to_8_bits_not_clipped():
    im = Image.new("I;16", (3, 1))
    im.putdata([32768, 65535, 1000])
    out = prepare_image(encode(im, "PNG"))
    assert out.measured["mode"] == "I;16"
    # Scaled by 255/65535: mid-grey stays mid-grey; clipping would make all three 255.
    assert [p[0] for p in pixels(stored(out))] == [128, 255, 4]


@pytest.mark.parametrize(("mode", "value", "expected"), [
    ("1", 1, 255),
    ("L", 77, 77),
    ("LA", (77, 255), 77),
    ("I", 32768, 128),  # 32-bit ints within 0..65535 are 16-bit samples
    ("I", 4_000_000, 255),  # beyond 16 bits: stretched over min..max (the other pixel is 0)
    ("F", 0.5, 128),  # floats within [0, 1]
])
def test_every_tiff_mode_becomes_rgb(mode, value, expected):
    im = Image.new(mode, (2, 1))
    im.putpixel((0, 0), value)
    out = prepare_image(encode(im, "TIFF"))
    assert out.mime == "image/png" and out.measured["format"] == "TIFF" and out.measured["mode"] == mode
    assert stored(out).getpixel((0, 0)) == (expected,) * 3


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_exif_orientation_6_is_applied(fmt):
    im = Image.new("RGB", (40, 20), (0, 0, 255))
    im.paste((255, 0, 0), (0, 0, 10, 10))  # red top-left corner as stored
    exif = Image.Exif()
    exif[0x0112] = 6  # display rotated 90 degrees clockwise
    data = encode(im, fmt, exif=exif.tobytes(), **({"quality": 95} if fmt == "JPEG" else {}))
    out = prepare_image(data)
    back = stored(out)
    assert back.size == (20, 40) and out.mime == MIME_OF_FORMAT[fmt]
    r, g, b = back.getpixel((15, 5))  # the red corner is now top-right
    assert r > 200 and b < 60
    assert back.getexif().get(0x0112) is None  # nothing left to rotate it twice


# ---- frames ---------------------------------------------------------------------------------------------


def animated_gif() -> bytes:
    frames = [Image.new("RGB", (8, 8), colour) for colour in ((255, 0, 0), (0, 255, 0), (0, 0, 255))]
    return encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)


def test_animated_gif_keeps_its_first_frame():
    out = prepare_image(animated_gif(), ImageSettings(animated="first_frame"))
    assert out.measured["frames"] == 3 and out.measured["format"] == "GIF"
    assert stored(out).convert("RGB").getpixel((4, 4)) == (255, 0, 0)


def test_animated_gif_can_be_quarantined():
    e = reject(animated_gif(), ImageSettings(animated="quarantine"))
    assert e.reason == QuarantineReason.ANIMATED_IMAGE and "3 frames" in e.detail


def test_mpo_photo_is_a_still_jpeg():
    # Cameras write MPO: a JPEG with extra images (preview, depth). Not an animation: kept, not quarantined.
    main, extra = scene((64, 48), seed=1), scene((64, 48), seed=2)
    data = encode(main, "MPO", save_all=True, append_images=[extra])
    out = prepare_image(data, ImageSettings(animated="quarantine"))
    assert out.data == data and out.mime == "image/jpeg"
    assert out.measured["format"] == "MPO" and out.measured["frames"] == 2


# ---- rejected -------------------------------------------------------------------------------------------


def test_truncated_png_is_corrupt():
    data = encode(scene(), "PNG")
    e = reject(data[: len(data) * 2 // 3])
    assert e.reason == QuarantineReason.CORRUPT_IMAGE and "320 x 240" in e.detail


def test_png_cut_inside_its_header_is_corrupt_not_unsupported():
    e = reject(encode(scene(), "PNG")[:40])  # the signature says PNG; IHDR is cut short
    assert e.reason == QuarantineReason.CORRUPT_IMAGE and "PNG signature" in e.detail


def test_png_with_a_damaged_pixel_chunk_is_corrupt():
    # One flipped byte inside IDAT: its CRC no longer matches (what verify() checks and decoding skips).
    data = bytearray(encode(scene(), "PNG"))
    data[data.index(b"IDAT") + 100] ^= 0xFF
    assert reject(bytes(data)).reason == QuarantineReason.CORRUPT_IMAGE


def test_truncated_jpeg_is_corrupt_even_when_its_bytes_would_be_kept():
    # An RGB JPEG takes the kept-bytes path (decoded at reduced scale): the truncation must still be seen.
    data = encode(scene((800, 600)), "JPEG")
    e = reject(data[: len(data) // 2])
    assert e.reason == QuarantineReason.CORRUPT_IMAGE and "truncated" in e.detail


@pytest.mark.parametrize("data", [b"", b"caption: a cat on a mat\n" * 20, bytes(range(256))])
def test_bytes_that_are_no_image_are_unsupported(data):
    e = reject(data)
    assert e.reason == QuarantineReason.UNSUPPORTED_MEDIA and f"{len(data)} bytes" in e.detail


def test_file_over_the_byte_limit_is_rejected_before_opening():
    data = encode(scene(), "PNG")
    e = reject(data, ImageSettings(max_file_bytes=len(data) - 1))
    assert e.reason == QuarantineReason.MEDIA_TOO_LARGE and str(len(data)) in e.detail
    # Checked before Pillow sees the bytes: even non-image bytes over the limit are "too large".
    assert reject(b"x" * 101, ImageSettings(max_file_bytes=100)).reason == QuarantineReason.MEDIA_TOO_LARGE


def png_claiming(width: int, height: int) -> bytes:
    """A tiny valid 1 x 1 PNG whose IHDR (CRC fixed up) claims width x height: decoding it would fail."""
    data = bytearray(encode(Image.new("L", (1, 1)), "PNG"))
    ihdr = data.index(b"IHDR")
    data[ihdr + 4: ihdr + 12] = struct.pack(">II", width, height)
    data[ihdr + 17: ihdr + 21] = struct.pack(">I", zlib.crc32(bytes(data[ihdr: ihdr + 17])))
    return bytes(data)


@pytest.fixture
def no_decoding(monkeypatch):
    def refuse(self):
        raise AssertionError("pixels decoded")
    monkeypatch.setattr(ImageFile.ImageFile, "load", refuse)


def test_decompression_bomb_is_decided_from_the_header(no_decoding):
    e = reject(png_claiming(5000, 5000), ImageSettings(max_pixels=1_000_000))
    assert e.reason == QuarantineReason.DECOMPRESSION_BOMB
    assert "5000 x 5000 = 25000000 pixels" in e.detail and "1000000" in e.detail


def test_one_bit_image_that_compresses_small_is_a_bomb(no_decoding):
    data = encode(Image.new("1", (4000, 4000)), "PNG")
    assert len(data) < 10_000  # 16 MP (16 MB once decoded to 8-bit, 48 MB as RGB) in a few KB
    assert reject(data, ImageSettings(max_pixels=10_000_000)).reason == QuarantineReason.DECOMPRESSION_BOMB


def test_pillows_own_bomb_error_is_a_decompression_bomb_and_its_limit_untouched():
    limit = Image.MAX_IMAGE_PIXELS
    e = reject(png_claiming(20_000, 20_000), ImageSettings(max_pixels=10**12))  # 400 MP: Pillow's error
    assert e.reason == QuarantineReason.DECOMPRESSION_BOMB and "Pillow" in e.detail
    assert Image.MAX_IMAGE_PIXELS == limit


def test_max_pixels_above_pillows_warning_lets_such_images_through():
    """100 MP is over Pillow's warning (89.5 MP) but under a raised `max_pixels`: the setting decides,
    so this header-only file gets as far as decoding (and is corrupt: it has no pixel data)."""
    e = reject(png_claiming(10_000, 10_000), ImageSettings(max_pixels=10**12))
    assert e.reason == QuarantineReason.CORRUPT_IMAGE


def test_truncated_images_are_never_accepted_silently(monkeypatch):
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    with pytest.raises(RuntimeError, match="LOAD_TRUNCATED_IMAGES"):
        prepare_image(encode(scene(), "PNG"))


# ---- resize ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fmt", "size", "expected"), [
    ("PNG", (300, 150), (100, 50)),
    ("JPEG", (800, 600), (100, 75)),  # decoded at 1/4 scale (200 x 150), then Lanczos
    ("PNG", (60, 90), (60, 90)),  # never upscaled
])
def test_resize_longest(fmt, size, expected):
    data = encode(scene(size), fmt)
    out = prepare_image(data, ImageSettings(resize_longest=100))
    assert stored(out).size == expected and out.mime == MIME_OF_FORMAT[fmt]
    assert (out.data == data) == (expected == size)  # bytes kept when no resize was needed


def test_rotation_and_resize_together():
    exif = Image.Exif()
    exif[0x0112] = 6
    out = prepare_image(encode(scene((400, 200)), "JPEG", exif=exif.tobytes()), ImageSettings(resize_longest=100))
    assert stored(out).size == (50, 100)  # rotated to portrait, then the longest side (height) fitted


# ---- measurements ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [(300, 300), (2400, 1500)])  # measured as is / on a 4x reduced copy
def test_luma_std_separates_blank_from_busy_images(size):
    blank = prepare_image(encode(Image.new("RGB", size, (37, 140, 200)), "PNG"))
    noise = np.random.default_rng(0).integers(0, 256, (*size[::-1], 3), dtype=np.uint8)
    busy = prepare_image(encode(scene(size), "PNG"))
    assert blank.measured["luma_std"] < 1
    assert busy.measured["luma_std"] > 30
    if size == (300, 300):  # pixel noise survives only unreduced: luma of 3 uniform bands, 73.9 x 0.67 = 49
        assert prepare_image(encode(Image.fromarray(noise), "PNG")).measured["luma_std"] > 30


def test_phash_is_imagehash_phash_as_an_unsigned_int():
    out = prepare_image(encode(scene(), "PNG"))
    h = imagehash.phash(stored(out))
    assert out.measured["phash"] == int(str(h), 16) and 0 <= out.measured["phash"] < 2**64


@pytest.mark.parametrize("size", [(320, 240), (1600, 1200)])
def test_phash_is_stable_under_resizing_and_far_for_a_different_image(size):
    original = scene(size)
    copy = original.resize((size[0] // 3, size[1] // 3), Image.Resampling.LANCZOS)
    other = scene(size, seed=7)
    h_original, h_copy, h_other = (prepare_image(encode(im, "PNG")).measured["phash"] for im in (original, copy, other))
    assert hamming(h_original, h_copy) <= 4
    assert hamming(h_original, h_other) >= 16


def test_phash_can_be_switched_off():
    assert prepare_image(encode(scene(), "PNG"), ImageSettings(phash=False)).measured["phash"] is None


# ---- determinism ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fmt", "mode", "settings"), [
    ("PNG", "RGBA", ImageSettings()),
    ("JPEG", "CMYK", ImageSettings()),
    ("GIF", "P", ImageSettings()),
    ("PNG", "RGB", ImageSettings(resize_longest=97)),
    ("JPEG", "RGB", ImageSettings(resize_longest=97, jpeg_quality=80)),
])
def test_rerunning_gives_identical_bytes_and_measurements(fmt, mode, settings):
    data = encode(scene((257, 193)).convert(mode), fmt)
    first, second = prepare_image(data, settings), prepare_image(data, settings)
    assert first.data != data  # really re-encoded
    assert (first.mime, first.data, first.measured) == (second.mime, second.data, second.measured)
    assert stored(first).mode == "RGB"
