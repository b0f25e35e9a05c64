"""PDF pages -> text + PNG rendering: our PDF room vs a plain PyMuPDF loop.

Input (`--corpus`, the multimodal data of `../shared/data/build_multimodal.sh`, e.g. /work/mm): every
`pdfs/*.pdf` (3 Debian manuals there, gnuplot.pdf ~250 pages), or the file given. The parent reads every
file once first, so both sides find them in the page cache. Both sides run in one thread and keep
nothing but counts:

- ours: `platform_assets.media.pdf.open_pdf(data, PdfSettings(ocr=False))` on the file's bytes, then
  `doc.page(i)` for every `i` in `doc.readable_pages()`: the page interpreted once into a display list,
  text (ligatures expanded) and an RGB pixmap at the default 96 dpi from it, the PNG written by the room
  (zlib level 3, outside the MuPDF lock), PreparedMedia with the page's measurements.
- peer: `pymupdf.open(path)`; for each page: `page.get_text()`, `page.get_pixmap(dpi=96).tobytes("png")`.

OCR is off on our side (the peer has none): `PDF_BENCH_DPI` changes the resolution of both (default:
`PdfSettings().dpi`). Pages and rendered pixels must be equal on both sides; text characters are shown
for information (ours expands ligatures, so it may differ by a few).
"""

from __future__ import annotations

import os
from pathlib import Path

from benchmarks.harness import (
    MB,
    Benchmark,
    BenchmarkError,
    Metric,
    Prepared,
    Record,
    Spec,
    Target,
    cpu_seconds_metric,
    peak_rss_metric,
)

DEFAULT_DPI = 96  # PdfSettings().dpi; checked against it in the ours child
ENV = {"OMP_NUM_THREADS": "1"}


def prepare(corpus: Path, run_dir: Path) -> Spec:
    if corpus.is_file():
        files = [corpus]
    else:
        root = corpus / "pdfs" if (corpus / "pdfs").is_dir() else corpus
        files = sorted(p for p in root.glob("*.pdf") if p.is_file())
    if not files:
        raise BenchmarkError(f"no *.pdf files in {corpus} (or its pdfs/)")
    total = sum(len(p.read_bytes()) for p in files)  # also warms the page cache for both sides
    dpi = int(os.environ.get("PDF_BENCH_DPI", "0") or 0)
    return {"corpus": str(corpus), "files": [str(p) for p in files], "input_bytes": total, "dpi": dpi or None}


def describe(spec: Spec) -> str:
    names = ", ".join(Path(f).name for f in spec["files"])
    return f"{len(spec['files'])} PDFs ({names}), {spec['input_bytes'] / MB:,.2f} MB"


# -- ours ------------------------------------------------------------------------------------------
def run_ours(spec: Spec, run_dir: Path) -> Prepared:
    from platform_assets.media.pdf import open_pdf
    from platform_assets.media.settings import PdfSettings

    if PdfSettings().dpi != DEFAULT_DPI and spec["dpi"] is None:
        raise BenchmarkError(f"PdfSettings().dpi is {PdfSettings().dpi}, the benchmark's DEFAULT_DPI {DEFAULT_DPI}")
    settings = PdfSettings(ocr=False, dpi=spec["dpi"] or DEFAULT_DPI)
    files = spec["files"]

    def work():
        pages = chars = png_bytes = pixels = 0
        for path in files:
            with open_pdf(Path(path).read_bytes(), settings) as doc:
                for i in doc.readable_pages():
                    page = doc.page(i)
                    pages += 1
                    chars += len(page.text)
                    png_bytes += len(page.image.data)
                    pixels += page.image.measured["width"] * page.image.measured["height"]
        return {"pages": pages, "text_chars": chars, "png_bytes": png_bytes, "pixels": pixels,
                "dpi": settings.dpi}

    return Prepared(work)


# -- peer ------------------------------------------------------------------------------------------
def run_peer(spec: Spec, run_dir: Path) -> Prepared:
    import pymupdf

    dpi = spec["dpi"] or DEFAULT_DPI
    files = spec["files"]

    def work():
        pages = chars = png_bytes = pixels = 0
        for path in files:
            with pymupdf.open(path) as doc:
                for page in doc:
                    text = page.get_text()
                    pix = page.get_pixmap(dpi=dpi)
                    png = pix.tobytes("png")
                    pages += 1
                    chars += len(text.rstrip())
                    png_bytes += len(png)
                    pixels += pix.width * pix.height
        return {"pages": pages, "text_chars": chars, "png_bytes": png_bytes, "pixels": pixels, "dpi": dpi}

    return Prepared(work)


def check(ours: Record, peer: Record) -> None:
    for key in ("pages", "pixels"):
        if ours[key] != peer[key]:
            raise BenchmarkError(f"{key} differ: ours {ours[key]:,}, peer {peer[key]:,}; not comparable")


BENCHMARK = Benchmark(
    name="media_pdf",
    description="PDF pages -> text + PNG rendering at 96 dpi, OCR off",
    ours_label="platform_assets.media.pdf.open_pdf(data, PdfSettings(ocr=False)) + doc.page(i) for every readable page",
    peer_label="pymupdf.open(path); per page: page.get_text(), page.get_pixmap(dpi=96).tobytes('png')",
    prepare=prepare,
    ours=run_ours,
    peer=run_peer,
    metrics=(
        Metric("pages/s", "pages/s", True, lambda r, s: r["pages"] / r["seconds"], "{:,.1f}"),
        Metric("pages per CPU-s", "pages/CPU-s", True, lambda r, s: r["pages"] / r["cpu_seconds"], "{:,.1f}"),
        Metric("wall time", "s", False, lambda r, s: r["seconds"], "{:,.2f}"),
        cpu_seconds_metric(),
        Metric("cores used", "CPU s / wall s", None, lambda r, s: r["cpu_seconds"] / r["seconds"], "{:.2f}"),
        peak_rss_metric(),
        Metric("RSS after setup", "MB", None, lambda r, s: (r["rss_after_setup_bytes"] or 0) / MB, "{:,.0f}"),
        Metric("PNG size", "MB", None, lambda r, s: r["png_bytes"] / MB, "{:,.1f}"),
        Metric("text", "characters", None, lambda r, s: r["text_chars"], "{:,.0f}"),
        Metric("pages", "", None, lambda r, s: r["pages"], "{:,.0f}", must_match=True),
        Metric("pixels", "Mpx", None, lambda r, s: r["pixels"] / 1e6, "{:,.3f}", must_match=True),
    ),
    packages=("platform-assets", "pymupdf", "numpy"),
    check=check,
    targets=(Target("pages/s", "pages/s at least the peer's (1x)", min_ratio=1.0),),
    env=ENV,
    describe=describe,
)
