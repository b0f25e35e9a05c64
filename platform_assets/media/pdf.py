"""The PDF room: each page of a PDF as its text and a PNG rendering (PyMuPDF), OCR'd by Tesseract where
the text layer is (nearly) empty.

`open_pdf` checks the file (size, damage, password) and returns a `PdfDocument`; the caller reads the pages
in `readable_pages()` one at a time, so a 500-page file never holds more than one page's pixels. Each page
is interpreted once by MuPDF (a display list) and that list gives both the text and the pixels.

Damaged files: MuPDF repairs what it can without a word. A file it cannot open, or that opens with no
pages, is `corrupt_pdf`; so is a page that fails to load or render. A truncated file usually opens
repaired (`PdfDocument.repaired`). Observed with MuPDF 1.28: cut before its xref table, a PDF reads in
full; cut at 30-50%, a 3-page file still had 3 pages, those whose content was lost rendering blank with no
text (Letter size where the page object itself was lost). Such pages render, so they are kept.
"""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass

import numpy as np
import pymupdf
from PIL import Image

from platform_assets.media.errors import MediaRejected
from platform_assets.media.png import PAGE_LEVEL, png_from_scanlines
from platform_assets.media.prepared import PreparedMedia
from platform_assets.media.settings import DEFAULT_MEDIA, PdfSettings
from platform_assets.schema import QuarantineReason

log = logging.getLogger(__name__)

# PyMuPDF "does not support running on multiple threads - doing so may cause incorrect behaviour or even
# crash Python itself" (its docs): documents share MuPDF's store (fonts, glyphs, images) and PyMuPDF's module
# globals, and the bindings release the GIL while MuPDF works (a render in one thread leaves another running
# at full speed: measured). Ingest reads two file groups in threads, so every MuPDF call holds this lock, the
# frees included (dropping a Page, DisplayList or Pixmap calls into MuPDF; see `_interpret`). PNG deflate
# (zlib releases the GIL) and Tesseract (a subprocess) run outside it: on gnuplot.pdf a page spends 3.7 ms
# under the lock and 8.6 ms deflating outside it, so two threads still overlap most of their work.
_MUPDF_LOCK = threading.Lock()

# get_text("text")'s flags less PRESERVE_LIGATURES: a PDF's "ﬁ" is the typesetter's glyph, not what the
# author typed, so it is expanded to "fi" (cleaning keeps ligatures that were typed: NFC does not fold them).
_TEXT_FLAGS = pymupdf.TEXTFLAGS_TEXT & ~pymupdf.TEXT_PRESERVE_LIGATURES

# The page PNG is written by media/png.py rather than by MuPDF's Pixmap.tobytes("png"): 9 ms and 145 KB a
# page on gnuplot.pdf at 96 dpi against 27 ms and 143 KB; deflate, most of a page's cost, runs outside the lock.


@dataclass(frozen=True)
class PdfPage:
    index: int  # 0-based
    text: str  # the page's selectable text, or Tesseract's when OCR'd; trailing whitespace stripped
    image: PreparedMedia  # kind="page", image/png at settings.dpi; measured: width, height, format, frames, page, ocr


@functools.cache
def ocr_unavailable_reason(language: str = "eng") -> str | None:
    """None when Tesseract and `language` ("eng", "eng+deu") are usable; else why not, to log once.
    Cached: one `tesseract --version` and `--list-langs` per process (~20 ms each)."""
    import pytesseract  # here, not at import: it pulls in pandas (~33 MB, 0.25 s) that OCR-less runs never need

    keep = "pages without a text layer keep the text they have (often none)"
    try:
        pytesseract.get_tesseract_version()
        installed = set(pytesseract.get_languages(config=""))
    except pytesseract.TesseractNotFoundError:
        return f"tesseract not found on PATH: install Debian's tesseract-ocr (scripts/setup.sh does) — {keep}"
    except (OSError, RuntimeError) as exc:
        return f"tesseract is installed but does not run ({exc}) — {keep}"
    missing = [lang for lang in language.split("+") if lang not in installed]
    if missing:
        return (f"tesseract has no language data for {'+'.join(missing)} (installed: {', '.join(sorted(installed))}):"
                f" install Debian's tesseract-ocr-{missing[0]} — {keep}")
    return None


def open_pdf(data: bytes, settings: PdfSettings = DEFAULT_MEDIA.pdf) -> PdfDocument:
    """Open one PDF from its bytes; raises MediaRejected (media_too_large, corrupt_pdf, encrypted_pdf)."""
    if len(data) > settings.max_file_bytes:
        raise MediaRejected(QuarantineReason.MEDIA_TOO_LARGE,
                            f"{len(data)} bytes > pdf.max_file_bytes = {settings.max_file_bytes}")
    with _MUPDF_LOCK:
        try:  # filetype="pdf": never guess another MuPDF format (EPUB, XPS, images) from the bytes
            doc = pymupdf.open(stream=data, filetype="pdf")
        except Exception as exc:  # EmptyFileError, FileDataError: not a PDF, or beyond repair
            raise MediaRejected(QuarantineReason.CORRUPT_PDF, f"MuPDF cannot open it: {exc}") from None
        try:
            # MuPDF tries the empty user password itself: a PDF encrypted with one opens with needs_pass False.
            if doc.needs_pass:
                raise MediaRejected(QuarantineReason.ENCRYPTED_PDF, "encrypted with a user password")
            if doc.page_count == 0:
                raise MediaRejected(QuarantineReason.CORRUPT_PDF, "no pages (after MuPDF's repair)"
                                    if doc.is_repaired else "no pages")
            return PdfDocument(doc, settings)
        except MediaRejected:
            doc.close()
            raise
        except Exception as exc:
            doc.close()
            raise MediaRejected(QuarantineReason.CORRUPT_PDF, f"MuPDF: {exc}") from None


class PdfDocument:
    """An open PDF: a context manager, since it holds MuPDF memory (the file and its caches) until closed."""

    def __init__(self, doc: pymupdf.Document, settings: PdfSettings):  # built by open_pdf, under the lock
        self._doc: pymupdf.Document | None = doc
        self.settings = settings
        self.page_count: int = doc.page_count
        self.repaired: bool = doc.is_repaired  # damaged, and MuPDF rebuilt its cross-reference table

    def readable_pages(self) -> range:
        """The pages read: the first pdf.max_pages (the caller quarantines the rest as pdf_page_limit)."""
        return range(min(self.page_count, self.settings.max_pages))

    def page(self, index: int) -> PdfPage:
        """One page's text and rendering; raises MediaRejected (page_not_found, corrupt_pdf, media_too_large)."""
        s = self.settings
        if not 0 <= index < self.page_count:
            raise MediaRejected(QuarantineReason.PAGE_NOT_FOUND, f"page {index} of a {self.page_count}-page PDF")
        if index >= s.max_pages:
            raise MediaRejected(QuarantineReason.PAGE_NOT_FOUND,
                                f"page {index} is past pdf.max_pages = {s.max_pages} ({self.page_count} pages)")
        want_ocr = s.ocr and ocr_unavailable_reason(s.ocr_language) is None
        with _MUPDF_LOCK:
            if self._doc is None:
                raise ValueError("PdfDocument is closed")
            text, rows, gray = self._interpret(index, want_ocr)
        height, width = rows.shape[0], (rows.shape[1] - 1) // 3
        png = png_from_scanlines(rows, width, height, PAGE_LEVEL, s.dpi)
        ocr = False
        if gray is not None:
            ocr_text = _tesseract(gray, s, index)
            if ocr_text:  # a blank page reads as "": the layer's text (if any) stays, and ocr stays False
                text, ocr = ocr_text, True
        measured = {"width": width, "height": height, "format": "PDF", "frames": self.page_count,
                    "page": index, "ocr": ocr}
        return PdfPage(index, text, PreparedMedia("page", "image/png", png, measured))

    def _interpret(self, index: int, want_ocr: bool) -> tuple[str, np.ndarray, Image.Image | None]:
        """Under the lock: the page's text, its RGB rows for the PNG, and a grey rendering for OCR when its text
        layer is too thin. Returns only Python objects: every MuPDF one is dropped here, still under the lock."""
        s = self.settings
        page = dlist = pix = textpage = None
        try:
            page = self._doc.load_page(index)
            # Bounded before any pixel exists: an A4 page at 96 dpi is 0.9 MP; 14400 pt square would be 368 MP.
            matrix = pymupdf.Matrix(s.dpi / 72, s.dpi / 72)
            box = (page.rect * matrix).irect  # MuPDF's own rounding: exactly the pixmap's size
            if box.width * box.height > s.max_page_pixels:
                raise MediaRejected(QuarantineReason.MEDIA_TOO_LARGE,
                                    f"page {index} is {page.rect.width:g} x {page.rect.height:g} pt: {box.width} x "
                                    f"{box.height} px at {s.dpi} dpi > pdf.max_page_pixels = {s.max_page_pixels}")
            if box.is_empty:  # MuPDF 1.28 reads an empty MediaBox as Letter; were it not to, no 0-pixel PNG
                raise MediaRejected(QuarantineReason.CORRUPT_PDF, f"page {index} has an empty page box {page.rect}")
            dlist = page.get_displaylist(annots=True)  # one pass over the content stream, for text and pixels
            textpage = dlist.get_textpage(_TEXT_FLAGS)
            if not isinstance(textpage, pymupdf.TextPage):  # PyMuPDF 1.2x returns MuPDF's bare FzStextPage
                textpage = pymupdf.TextPage(textpage)
            text = textpage.extractText().rstrip()
            pix = dlist.get_pixmap(matrix=matrix, colorspace=pymupdf.csRGB, alpha=False)
            # PNG scanlines: a filter-type byte (0, None) then the row; the copy leaves MuPDF's memory here.
            rows = np.zeros((pix.height, 1 + 3 * pix.width), np.uint8)
            rows[:, 1:] = np.frombuffer(pix.samples_mv, np.uint8).reshape(pix.height, pix.stride)[:, :3 * pix.width]
            gray = None
            if want_ocr and len("".join(text.split())) < s.ocr_min_chars:
                # Tesseract reads best at 200-300 dpi; fewer dpi where that would pass max_page_pixels.
                zoom = min(s.ocr_dpi / 72, (s.max_page_pixels / (page.rect.width * page.rect.height)) ** 0.5)
                while (page.rect * pymupdf.Matrix(zoom, zoom)).irect.get_area() > s.max_page_pixels:
                    zoom *= 0.99  # rounding out to whole pixels added a row or column
                pix = dlist.get_pixmap(matrix=pymupdf.Matrix(zoom, zoom), colorspace=pymupdf.csGRAY, alpha=False)
                gray = Image.frombytes("L", (pix.width, pix.height), pix.samples, "raw", "L", pix.stride)
            return text, rows, gray
        except MediaRejected:
            raise
        except Exception as exc:  # MuPDF's errors on a broken page tree, content stream or image
            raise MediaRejected(QuarantineReason.CORRUPT_PDF, f"page {index}: MuPDF: {exc}") from None
        finally:
            # A traceback keeps this frame (and its locals) alive past the lock; these drops must happen now.
            page = dlist = pix = textpage = None

    def close(self) -> None:
        with _MUPDF_LOCK:
            if self._doc is not None:
                self._doc.close()
                self._doc = None

    def __enter__(self) -> PdfDocument:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _tesseract(gray: Image.Image, settings: PdfSettings, index: int) -> str:
    """Tesseract's text for one page rendering; "" when it fails or times out (logged: the page is kept)."""
    import pytesseract

    try:
        text = pytesseract.image_to_string(gray, lang=settings.ocr_language, timeout=settings.ocr_timeout_s)
    except RuntimeError as exc:  # TesseractError, and pytesseract's "Tesseract process timeout"
        log.warning("OCR of page %d failed (%s): the page keeps its text layer", index, exc)
        return ""
    return text.rstrip()  # Tesseract ends a page with "\f"
