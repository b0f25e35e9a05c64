"""The multimodal part of the sample corpus: images with sidecar captions, PDFs, speech-like audio
with transcripts, and a unified manifest, all drawn here (Pillow, PyMuPDF, numpy + soundfile) so the
sample needs no download. Deterministic: same code, same bytes (no timestamps or random ids inside
the files; the PDF writer's /ID is fixed).

Planted for the later stages to find: a truncated PNG, a `.png` that is a GIF, an animated GIF (first
frame kept), a CMYK JPEG, a 16-bit grayscale PNG, a blank image, the same image under two captions
(exact duplicate), a resized copy (perceptual near duplicate), an image-only PDF page (OCR), an
encrypted PDF, a WAV with a broken header, a silent clip, and manifest rows pointing outside the data
root or at missing files.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np

SAMPLE_DATA = Path(__file__).resolve().parent.parent / "sample_data"

SHAPES = [  # (caption, shape, fill colour, background)
    ("A red circle on a white background.", "circle", (220, 30, 30), (255, 255, 255)),
    ("A blue square on a light grey background.", "square", (30, 60, 200), (230, 230, 230)),
    ("A green triangle pointing up.", "triangle", (30, 160, 60), (250, 250, 240)),
    ("An orange diamond on a dark background.", "diamond", (250, 140, 20), (30, 30, 40)),
    ("Purple concentric rings.", "rings", (120, 40, 160), (255, 255, 255)),
    ("A yellow sun with eight rays.", "sun", (240, 200, 20), (120, 180, 250)),
    ("Black and white vertical stripes.", "stripes", (0, 0, 0), (255, 255, 255)),
    ("A checkerboard of teal and white squares.", "checker", (20, 130, 130), (255, 255, 255)),
    ("A vertical gradient from red to blue.", "gradient", (230, 20, 20), (20, 20, 230)),
    ("A pink heart shape.", "heart", (230, 80, 150), (255, 245, 250)),
]


def _draw(shape: str, fill, background, size: int = 160):
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (size, size), background)
    d = ImageDraw.Draw(img)
    s, m = size, size // 5
    if shape == "circle":
        d.ellipse([m, m, s - m, s - m], fill=fill)
    elif shape == "square":
        d.rectangle([m, m, s - m, s - m], fill=fill)
    elif shape == "triangle":
        d.polygon([(s // 2, m), (s - m, s - m), (m, s - m)], fill=fill)
    elif shape == "diamond":
        d.polygon([(s // 2, m), (s - m, s // 2), (s // 2, s - m), (m, s // 2)], fill=fill)
    elif shape == "rings":
        for r in range(s // 2 - 4, 4, -14):
            d.ellipse([s // 2 - r, s // 2 - r, s // 2 + r, s // 2 + r], outline=fill, width=6)
    elif shape == "sun":
        for k in range(8):
            a = k * math.pi / 4
            d.line([(s / 2, s / 2), (s / 2 + 0.45 * s * math.cos(a), s / 2 + 0.45 * s * math.sin(a))], fill=fill,
                   width=8)
        d.ellipse([s * 0.3, s * 0.3, s * 0.7, s * 0.7], fill=fill)
    elif shape == "stripes":  # wide: phash keeps only the lowest 8 x 8 frequencies of a 32 x 32 copy, and
        for x in range(0, s, 80):  # 20 px stripes would look to it like a blank picture
            d.rectangle([x, 0, x + 39, s], fill=fill)
    elif shape == "checker":
        for y in range(0, s, 32):
            for x in range(0, s, 32):
                if (x // 32 + y // 32) % 2 == 0:
                    d.rectangle([x, y, x + 31, y + 31], fill=fill)
    elif shape == "gradient":
        ramp = np.linspace(0, 1, s)[:, None, None]  # top to bottom
        arr = (np.array(fill) * (1 - ramp) + np.array(background) * ramp).repeat(s, axis=1)
        return Image.fromarray(arr.astype(np.uint8), "RGB")
    elif shape == "cross":
        d.rectangle([s // 2 - m // 2, m // 2, s // 2 + m // 2, s - m // 2], fill=fill)
        d.rectangle([m // 2, s // 2 - m // 2, s - m // 2, s // 2 + m // 2], fill=fill)
    elif shape == "heart":
        d.ellipse([m, m, s // 2 + 4, s // 2 + 8], fill=fill)
        d.ellipse([s // 2 - 4, m, s - m, s // 2 + 8], fill=fill)
        d.polygon([(m + 2, s // 2), (s - m - 2, s // 2), (s // 2, s - m)], fill=fill)
    return img


def _encode(img, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kw)
    return buf.getvalue()


def image_files() -> dict[str, bytes]:
    """images/: one file per shape with a .txt or .json sidecar, plus the planted cases."""
    from PIL import Image

    files: dict[str, bytes] = {}
    for i, (caption, shape, fill, bg) in enumerate(SHAPES):
        img = _draw(shape, fill, bg)
        name = f"images/{i:02d}_{shape}"
        if i % 3 == 1:
            files[f"{name}.jpg"] = _encode(img, "JPEG", quality=88)
        else:
            files[f"{name}.png"] = _encode(img, "PNG")
        if i % 2:
            files[f"{name}.json"] = json.dumps({"caption": caption, "shape": shape}).encode()
        else:
            files[f"{name}.txt"] = caption.encode()
    circle = _draw("circle", *SHAPES[0][2:])
    # the same bytes under another caption: one image, so an exact duplicate of 00_circle
    files["images/10_circle_again.png"] = files["images/00_circle.png"]
    files["images/10_circle_again.txt"] = b"A round red disc, centred."
    # a resized, re-encoded copy: other bytes, same picture (perceptual near duplicate)
    files["images/11_circle_small.png"] = _encode(circle.resize((120, 120), Image.Resampling.LANCZOS), "PNG")
    files["images/11_circle_small.txt"] = b"A small red circle."
    files["images/12_blank.png"] = _encode(Image.new("RGB", (128, 128), (255, 255, 255)), "PNG")
    files["images/12_blank.txt"] = b"An empty white picture."
    files["images/13_cmyk.jpg"] = _encode(_draw("cross", (200, 40, 40), (240, 240, 240)).convert("CMYK"), "JPEG")
    files["images/13_cmyk.txt"] = b"A red cross printed in CMYK."
    gray16 = Image.fromarray((np.linspace(0, 65535, 128 * 128).reshape(128, 128)).astype(np.uint16))
    files["images/14_gray16.png"] = _encode(gray16, "PNG")
    files["images/14_gray16.txt"] = b"A smooth grey ramp in sixteen-bit depth."
    frames = [_draw(s, f, b, 96) for _, s, f, b in SHAPES[:3]]
    anim = io.BytesIO()
    frames[0].save(anim, format="GIF", save_all=True, append_images=frames[1:], duration=200, loop=0)
    files["images/15_animated.gif"] = anim.getvalue()
    files["images/15_animated.txt"] = b"A red circle (the first frame of an animation)."
    # planted bad input
    files["images/20_truncated.png"] = files["images/00_circle.png"][:300]
    files["images/20_truncated.txt"] = b"This image file was cut short."
    files["images/21_mislabelled.png"] = _encode(_draw("diamond", (0, 0, 0), (255, 255, 255), 64), "GIF")
    files["images/21_mislabelled.txt"] = b"A GIF named like a PNG."
    return files


PDF_PAGES = [
    "Packing sequences. Documents are concatenated and cut into fixed-length samples so that no "
    "token is padding; a best-fit-decreasing packer keeps documents whole where they fit.",
    "Deduplication. Exact duplicates share a normalised hash; near duplicates share MinHash bands "
    "and are verified by their Jaccard similarity before one of them is removed.",
]


def pdf_files() -> dict[str, bytes]:
    """pdfs/: a text PDF, a PDF whose second page is a picture of text (OCR), an encrypted one."""
    import pymupdf
    from PIL import Image, ImageDraw, ImageFont

    def finish(doc) -> bytes:
        doc.set_metadata({})  # no creation/modification dates: the same bytes on every run
        return doc.tobytes(garbage=3, deflate=True, no_new_id=True)

    doc = pymupdf.open()
    for text in PDF_PAGES:
        page = doc.new_page(width=595, height=842)
        page.insert_textbox(pymupdf.Rect(72, 72, 523, 770), text, fontsize=12, fontname="helv")
    files = {"pdfs/pipeline-notes.pdf": finish(doc)}

    scan = Image.new("L", (1240, 400), 255)
    draw = ImageDraw.Draw(scan)
    font = ImageFont.load_default(size=44)
    for k, line in enumerate(["Scanned page: splits are assigned", "by a seeded hash of each document id."]):
        draw.text((60, 80 + 110 * k), line, fill=0, font=font)
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    page.insert_textbox(pymupdf.Rect(72, 72, 523, 300), "A cover page with a text layer. " + PDF_PAGES[0],
                        fontsize=12, fontname="helv")
    page = doc.new_page(width=595, height=842)  # no text layer: only the picture of a page
    page.insert_image(pymupdf.Rect(36, 72, 559, 241), stream=_encode(scan, "PNG"))
    files["pdfs/scanned-notes.pdf"] = finish(doc)

    # AES encryption draws a random IV, so the encrypted PDF is a checked-in file (1 KB), not drawn here
    files["pdfs/locked.pdf"] = (SAMPLE_DATA / "locked.pdf").read_bytes()
    return files


TRANSCRIPTS = [
    "one two three four",
    "the quick brown fox",
    "packing keeps documents whole",
    "splits never leak",
]


def _speechlike(seed: int, seconds: float, rate: int = 22_050) -> np.ndarray:
    """Syllable-like bursts: a voiced 120-220 Hz tone with formants, gated at ~4 syllables/s, with
    pauses (what espeak-ng speech looks like to the measures: loud bursts and ~20% silent frames)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    f0 = 120 + 100 * rng.random()
    voiced = sum(np.sin(2 * np.pi * f0 * k * t) / k for k in range(1, 6))
    gate = (np.sin(2 * np.pi * 4 * t + rng.random() * 6) > -0.2).astype(np.float64)
    gate[-int(0.25 * rate):] = 0  # a trailing pause
    return (0.3 * voiced * gate).astype(np.float32)


def audio_files() -> dict[str, bytes]:
    """audio/: clips with sidecar transcripts (WAV 22.05 kHz mono, a FLAC stereo 44.1 kHz), a silent
    clip and a file with a broken header."""
    import soundfile as sf

    files: dict[str, bytes] = {}
    for i, text in enumerate(TRANSCRIPTS):
        clip = _speechlike(i, 1.2 + 0.3 * i)
        buf = io.BytesIO()
        if i == 3:
            stereo = np.stack([np.interp(np.linspace(0, len(clip) - 1, 2 * len(clip)), np.arange(len(clip)), clip)] * 2,
                              axis=1)
            sf.write(buf, stereo, 44_100, format="FLAC", subtype="PCM_16")
            files[f"audio/{i:02d}_clip.flac"] = buf.getvalue()
        else:
            sf.write(buf, clip, 22_050, format="WAV", subtype="PCM_16")
            files[f"audio/{i:02d}_clip.wav"] = buf.getvalue()
        files[f"audio/{i:02d}_clip.txt"] = text.encode()
    buf = io.BytesIO()
    sf.write(buf, np.zeros(22_050, np.float32), 22_050, format="WAV", subtype="PCM_16")
    files["audio/10_silence.wav"] = buf.getvalue()
    files["audio/10_silence.txt"] = b"nothing at all"
    files["audio/11_broken.wav"] = b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(range(40))
    files["audio/11_broken.txt"] = b"a header that lies"
    return files


def manifest_files(images: dict[str, bytes]) -> dict[str, bytes]:
    """multimodal/: the unified manifest (build_multimodal.sh's format) over its own copies of a few
    files (six are byte copies of images/: exact duplicates across sources), with rows a user gets
    wrong: a path escaping the root, a missing file, a declared modality the bytes disagree with."""
    files = {
        "multimodal/media/heart.png": images["images/09_heart.png"] if "images/09_heart.png" in images
        else images["images/09_heart.jpg"],
        "multimodal/media/sun.png": images["images/05_sun.png"] if "images/05_sun.png" in images
        else images["images/05_sun.jpg"],
    }
    # the same bytes as images/ (a VLM set built from the same pictures): dedup keeps one of each
    shared = [(name, data) for name, data in sorted(images.items())
              if name.endswith((".png", ".jpg")) and name.split("/")[1][:2] in {"01", "02", "03", "04", "06", "07"}]
    for name, data in shared:
        files[f"multimodal/media/{name.split('/')[1]}"] = data
    files["multimodal/media/notes.pdf"] = pdf_files()["pdfs/pipeline-notes.pdf"]
    files["multimodal/media/clip.wav"] = audio_files()["audio/00_clip.wav"]
    rows = [
        {"id": "mm-0", "modality": "image", "file": "media/heart.png",
         "instruction": "Describe the image.", "response": "A pink heart shape on a pale background.",
         "license": "CC0-1.0"},
        {"id": "mm-1", "modality": "image", "file": "media/sun.png", "caption": "A stylised sun.",
         "license": "CC0-1.0"},
        {"id": "mm-2", "modality": "pdf", "file": "media/notes.pdf", "page": 1,
         "instruction": "Summarise this page.", "response": "Near duplicates are found with MinHash.",
         "license": "CC0-1.0"},
        {"id": "mm-3", "modality": "audio", "file": "media/clip.wav", "transcription": "one two three four",
         "license": "CC0-1.0"},
        *({"id": f"mm-shared-{k}", "modality": "image", "file": f"media/{name.split('/')[1]}",
           "instruction": "What shape is this?", "response": SHAPES[int(name.split("/")[1][:2])][0],
           "license": "CC0-1.0"} for k, (name, _) in enumerate(shared)),
        {"id": "mm-4", "modality": "image", "file": "../../../etc/passwd", "caption": "escapes the root"},
        {"id": "mm-5", "modality": "image", "file": "media/missing.png", "caption": "not there"},
        {"id": "mm-6", "modality": "audio", "file": "media/sun.png", "transcription": "declared audio, is a PNG"},
    ]
    files["multimodal/manifest.jsonl"] = "".join(json.dumps(r) + "\n" for r in rows).encode()
    return files


def media_files() -> dict[str, bytes]:
    images = image_files()
    return {**images, **pdf_files(), **audio_files(), **manifest_files(images)}
