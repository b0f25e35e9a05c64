"""The PDF room: pages as text + PNG, OCR where the text layer is empty, and what it rejects and why.

Every fixture is written here by PyMuPDF (no files from outside the test); OCR tests that need the real
Tesseract skip, saying why, where it is not installed.
"""

import io
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pymupdf
import pytesseract
import pytest
from PIL import Image, ImageDraw, ImageFont

from platform_assets.media import pdf as pdf_room
from platform_assets.media.errors import MediaRejected
from platform_assets.media.pdf import PdfPage, ocr_unavailable_reason, open_pdf
from platform_assets.media.settings import PdfSettings
from platform_assets.schema import QuarantineReason

LETTER = (612, 792)  # points; at the default 96 dpi: 816 x 1056 px
SENTENCE = "the quick brown fox jumps over the lazy dog"  # 35 non-space characters: above ocr_min_chars = 32


def text_pdf(pages: int = 3, size: tuple[float, float] = LETTER) -> bytes:
    doc = pymupdf.open()
    for i in range(pages):
        page = doc.new_page(width=size[0], height=size[1])
        page.insert_text((72, 72), f"Page {i}: {SENTENCE}", fontsize=12)
        # vector graphics and a colour, so renderings differ by page and exercise more than glyphs
        page.draw_rect(pymupdf.Rect(72, 100 + 20 * i, 300, 200 + 20 * i), color=(0.8, 0.1, 0.1), fill=(0.1, 0.4, 0.9))
    return doc.tobytes()


def scanned_pdf(words: str, layer_text: str = "") -> bytes:
    """One Letter page with no usable text layer: only a picture of `words` (and perhaps a page number)."""
    picture = Image.new("L", (1600, 400), 255)
    ImageDraw.Draw(picture).text((40, 120), words, fill=0, font=ImageFont.load_default(size=96))
    png = io.BytesIO()
    picture.save(png, "PNG")
    doc = pymupdf.open()
    page = doc.new_page(width=LETTER[0], height=LETTER[1])
    page.insert_image(pymupdf.Rect(36, 72, 576, 207), stream=png.getvalue())  # ~33 pt letters on the page
    if layer_text:
        page.insert_text((300, 760), layer_text, fontsize=10)
    return doc.tobytes()


def rejected(reason: str, call) -> MediaRejected:
    with pytest.raises(MediaRejected) as info:
        call()
    assert info.value.reason == reason, info.value
    return info.value


NO_OCR = PdfSettings(ocr=False)


def read_all(data: bytes, settings: PdfSettings = NO_OCR) -> list[PdfPage]:
    with open_pdf(data, settings) as doc:
        return [doc.page(i) for i in doc.readable_pages()]


@pytest.fixture
def tesseract() -> None:
    reason = ocr_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture
def fake_tesseract(monkeypatch):
    """Tesseract as a stand-in that records the image it was given: the OCR plumbing without the binary."""
    seen: list[Image.Image] = []

    def image_to_string(image, lang=None, timeout=0):
        seen.append(image.copy())
        return "words from the stand-in\n\f"

    monkeypatch.setattr(pdf_room, "ocr_unavailable_reason", lambda language="eng": None)
    monkeypatch.setattr(pytesseract, "image_to_string", image_to_string)
    return seen


def test_text_pdf_gives_each_page_its_text_and_a_png_at_the_dpi():
    data = text_pdf(pages=3)
    for dpi, size in ((96, (816, 1056)), (72, LETTER), (150, (1275, 1650))):  # width = 612 pt * dpi / 72
        pages = read_all(data, PdfSettings(dpi=dpi, ocr=False))
        assert [p.index for p in pages] == [0, 1, 2]
        assert [p.text for p in pages] == [f"Page {i}: {SENTENCE}" for i in range(3)]  # trailing "\n" stripped
        for page in pages:
            assert (page.image.kind, page.image.mime) == ("page", "image/png")
            assert page.image.measured == {"width": size[0], "height": size[1], "format": "PDF", "frames": 3,
                                           "page": page.index, "ocr": False}
            decoded = Image.open(io.BytesIO(page.image.data))
            assert (decoded.format, decoded.mode, decoded.size) == ("PNG", "RGB", size)
            # pHYs stores whole pixels per metre: 96 dpi is 3780 /m, read back as 96.012 dpi
            assert decoded.info["dpi"] == pytest.approx((dpi, dpi), abs=0.02)


def test_png_holds_exactly_the_pixels_mupdf_rendered():
    # The PNG is written by the room (not MuPDF): lossless means pixel for pixel what MuPDF drew.
    data = text_pdf(pages=2)
    pages = read_all(data)
    reference = pymupdf.open(stream=data, filetype="pdf")
    for page in pages:
        pix = reference.load_page(page.index).get_pixmap(dpi=96)
        mupdf_pixels = np.frombuffer(pix.samples, np.uint8).reshape(pix.height, pix.width, 3)
        ours = np.asarray(Image.open(io.BytesIO(page.image.data)))
        assert np.array_equal(ours, mupdf_pixels)
        assert len(np.unique(ours.reshape(-1, 3), axis=0)) > 2  # text and the filled rectangle were drawn
    assert reference.load_page(0).get_text().rstrip() == pages[0].text  # the same text as get_text("text")


def test_rotated_page_renders_turned_and_keeps_its_text():
    doc = pymupdf.open(stream=text_pdf(pages=1), filetype="pdf")
    doc.load_page(0).set_rotation(90)
    (page,) = read_all(doc.tobytes())
    assert (page.image.measured["width"], page.image.measured["height"]) == (1056, 816)
    assert page.text == f"Page 0: {SENTENCE}"


def test_rerunning_gives_identical_bytes():
    data = text_pdf(pages=4)
    first, second = read_all(data), read_all(data)  # the second run finds MuPDF's glyph cache warm
    assert [p.image.data for p in first] == [p.image.data for p in second]
    assert [p.text for p in first] == [p.text for p in second]
    assert len({p.image.data for p in first}) == 4  # and the pages are not all one picture


def test_mupdf_work_waits_for_the_room_lock():
    # PyMuPDF is not thread-safe and releases the GIL inside MuPDF: every page's MuPDF work holds the lock.
    doc = open_pdf(text_pdf(pages=1), NO_OCR)
    with ThreadPoolExecutor(1) as pool:
        with pdf_room._MUPDF_LOCK:
            reading = pool.submit(doc.page, 0)
            with pytest.raises(TimeoutError):
                reading.result(timeout=0.3)  # a page takes ~10 ms: this one is blocked on the lock
        assert reading.result(timeout=10).text == f"Page 0: {SENTENCE}"
    doc.close()


def test_two_threads_rendering_at_once_give_the_same_bytes():
    # Ingest reads two file groups in threads. (Without the lock this did not fail in 20 tries here: MuPDF's
    # races are rare, which is why the test above checks the lock itself.)
    data = text_pdf(pages=6)
    expected = [(p.text, p.image.data) for p in read_all(data)]
    start = threading.Barrier(2)

    def own_document(_: int) -> list[tuple[str, bytes]]:
        start.wait()  # both threads enter MuPDF together
        return [(p.text, p.image.data) for _ in range(3) for p in read_all(data)]

    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(own_document, range(2)))
    assert runs == [expected * 3, expected * 3]

    with open_pdf(data, PdfSettings(ocr=False)) as shared, ThreadPoolExecutor(2) as pool:  # one document, two readers
        pages = list(pool.map(shared.page, list(range(6)) * 2))
    assert [(p.text, p.image.data) for p in pages] == expected * 2


def test_page_without_text_layer_is_ocrd(tesseract):
    (page,) = read_all(scanned_pdf("QUICK BROWN FOX", layer_text="7"), PdfSettings())
    assert page.image.measured["ocr"] is True
    assert {"QUICK", "BROWN", "FOX"} <= set(page.text.upper().split()), page.text


def test_ocr_off_leaves_a_scanned_page_empty():
    (page,) = read_all(scanned_pdf("QUICK BROWN FOX"), PdfSettings(ocr=False))
    assert (page.text, page.image.measured["ocr"]) == ("", False)
    assert page.image.measured["width"] == 816  # the picture is still rendered and kept


def test_ocr_reads_a_rendering_at_ocr_dpi_and_only_where_the_layer_is_thin(fake_tesseract):
    pages = read_all(scanned_pdf("QUICK BROWN FOX") + b"", PdfSettings(ocr_dpi=200))
    assert (pages[0].text, pages[0].image.measured["ocr"]) == ("words from the stand-in", True)
    assert [(im.mode, im.size) for im in fake_tesseract] == [("L", (1700, 2200))]  # 612 x 792 pt at 200 dpi
    assert pages[0].image.measured["width"] == 816  # the stored PNG stays at dpi = 96

    fake_tesseract.clear()
    pages = read_all(text_pdf(pages=2), PdfSettings())  # 35 characters of text layer each: not OCR'd
    assert fake_tesseract == [] and [p.image.measured["ocr"] for p in pages] == [False, False]


def test_ocr_rendering_is_bounded_by_max_page_pixels(fake_tesseract):
    # 2000 pt square at 72 dpi is 4 MP, within 5 MP; at ocr_dpi = 200 it would be 30.9 MP, so OCR gets fewer dpi.
    data = pymupdf.open()
    data.new_page(width=2000, height=2000)
    (page,) = read_all(data.tobytes(), PdfSettings(dpi=72, ocr_dpi=200, max_page_pixels=5_000_000))
    (image,) = fake_tesseract
    assert image.size[0] * image.size[1] <= 5_000_000 and image.size[0] >= 2200  # sqrt(5 MP) = 2236 px a side
    assert page.image.measured["ocr"] is True


def test_ocr_timeout_keeps_the_page_with_its_layer_text(monkeypatch, caplog):
    def times_out(image, lang=None, timeout=0):
        raise RuntimeError("Tesseract process timeout")

    monkeypatch.setattr(pdf_room, "ocr_unavailable_reason", lambda language="eng": None)
    monkeypatch.setattr(pytesseract, "image_to_string", times_out)
    with caplog.at_level(logging.WARNING, logger=pdf_room.__name__):
        (page,) = read_all(scanned_pdf("QUICK", layer_text="7"), PdfSettings(ocr_timeout_s=0.5))
    assert (page.text, page.image.measured["ocr"]) == ("7", False)
    assert "OCR of page 0 failed (Tesseract process timeout)" in caplog.text


def test_missing_tesseract_is_explained_and_pages_keep_their_layer(monkeypatch):
    ocr_unavailable_reason.cache_clear()
    monkeypatch.setattr(pytesseract.pytesseract, "tesseract_cmd", "/nonexistent/tesseract")
    try:
        reason = ocr_unavailable_reason()
        assert reason is not None and reason.startswith("tesseract not found on PATH: install Debian's tesseract-ocr")
        (page,) = read_all(scanned_pdf("QUICK", layer_text="7"), PdfSettings(ocr=True))
        assert (page.text, page.image.measured["ocr"]) == ("7", False)  # no failure: the page is kept as it is
    finally:
        ocr_unavailable_reason.cache_clear()  # the next test sees the real Tesseract again


def test_missing_language_is_explained(tesseract):
    reason = ocr_unavailable_reason("eng+xyz")
    assert reason is not None and "no language data for xyz" in reason and "tesseract-ocr-xyz" in reason
    assert ocr_unavailable_reason("eng") is None


def test_password_protected_pdf_is_encrypted_pdf():
    doc = pymupdf.open(stream=text_pdf(pages=1), filetype="pdf")
    locked = doc.tobytes(encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="secret", owner_pw="owner")
    error = rejected(QuarantineReason.ENCRYPTED_PDF, lambda: open_pdf(locked))
    assert "password" in error.detail
    # Encrypted with an empty user password (only an owner password: permissions): it opens and reads.
    open_to_all = doc.tobytes(encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="", owner_pw="owner")
    assert [p.text for p in read_all(open_to_all)] == [f"Page 0: {SENTENCE}"]


@pytest.mark.parametrize("data", [b"", b"hello, this is not a PDF\n" * 40, b"%PDF-1.7\n" + b"\x00garbage" * 100],
                         ids=["zero-bytes", "text", "pdf-header-then-garbage"])
def test_bytes_that_are_no_pdf_are_corrupt_pdf(data):
    error = rejected(QuarantineReason.CORRUPT_PDF, lambda: open_pdf(data))
    assert "MuPDF cannot open it" in error.detail


def test_pdf_with_no_pages_is_corrupt_pdf():
    empty_tree = (b"%PDF-1.4\n1 0 obj <</Type /Catalog /Pages 2 0 R>> endobj\n"
                  b"2 0 obj <</Type /Pages /Kids [] /Count 0>> endobj\ntrailer <</Root 1 0 R>>\n%%EOF\n")
    error = rejected(QuarantineReason.CORRUPT_PDF, lambda: open_pdf(empty_tree))
    assert "no pages" in error.detail


def test_pdf_cut_before_its_xref_table_is_repaired_and_read():
    # What MuPDF does with a truncated file: it rebuilds the cross-reference table from the objects it finds.
    data = text_pdf(pages=3)
    cut = data[:data.rindex(b"xref")]
    with open_pdf(cut, PdfSettings(ocr=False)) as doc:
        assert (doc.repaired, doc.page_count) == (True, 3)
        assert [doc.page(i).text for i in doc.readable_pages()] == [f"Page {i}: {SENTENCE}" for i in range(3)]
    with open_pdf(data) as intact:
        assert intact.repaired is False


@pytest.mark.parametrize("kept", [0.1, 0.3, 0.5, 0.8, 0.95])
def test_truncated_pdf_gives_pages_or_a_reason_never_a_crash(kept):
    # Whatever MuPDF makes of a cut file, the room answers with pages or a MediaRejected, nothing else.
    data = text_pdf(pages=3)
    outcomes = []
    try:
        with open_pdf(data[:int(len(data) * kept)], NO_OCR) as doc:
            assert doc.repaired
            for i in doc.readable_pages():
                try:
                    page = doc.page(i)
                    outcomes.append(Image.open(io.BytesIO(page.image.data)).size)
                except MediaRejected as error:
                    outcomes.append(error.reason)
    except MediaRejected as error:
        outcomes.append(error.reason)
    assert outcomes and all(isinstance(o, tuple) or o == QuarantineReason.CORRUPT_PDF for o in outcomes), outcomes


def test_pages_past_max_pages_are_not_read():
    with open_pdf(text_pdf(pages=5), PdfSettings(max_pages=2, ocr=False)) as doc:
        assert (doc.page_count, doc.readable_pages()) == (5, range(2))
        assert doc.page(1).text == f"Page 1: {SENTENCE}"
        error = rejected(QuarantineReason.PAGE_NOT_FOUND, lambda: doc.page(2))
        assert "past pdf.max_pages = 2" in error.detail


@pytest.mark.parametrize("index", [3, 10, -1])
def test_page_out_of_range_is_page_not_found(index):
    with open_pdf(text_pdf(pages=3)) as doc:
        error = rejected(QuarantineReason.PAGE_NOT_FOUND, lambda: doc.page(index))
        assert error.detail == f"page {index} of a 3-page PDF"


def test_file_over_max_file_bytes_is_media_too_large():
    data = text_pdf(pages=1)
    limit = PdfSettings(max_file_bytes=len(data) - 1)
    error = rejected(QuarantineReason.MEDIA_TOO_LARGE, lambda: open_pdf(data, limit))
    assert f"{len(data)} bytes > pdf.max_file_bytes" in error.detail
    assert open_pdf(data, PdfSettings(max_file_bytes=len(data))).page_count == 1  # the limit itself is allowed


def test_huge_page_is_media_too_large_before_rendering():
    # 14400 pt square (200 inches) at 96 dpi is 19200 x 19200 = 369 MP (1.1 GB of RGB) > 25 MP: refused from
    # the page box alone; the file's other page is still read.
    doc = pymupdf.open()
    doc.new_page(width=14400, height=14400)
    doc.new_page(width=LETTER[0], height=LETTER[1]).insert_text((72, 72), SENTENCE)
    with open_pdf(doc.tobytes(), PdfSettings(ocr=False)) as pdf:
        error = rejected(QuarantineReason.MEDIA_TOO_LARGE, lambda: pdf.page(0))
        assert "19200 x 19200 px at 96 dpi > pdf.max_page_pixels = 25000000" in error.detail
        assert pdf.page(1).text == SENTENCE


def test_closed_document_refuses_pages():
    doc = open_pdf(text_pdf(pages=1))
    doc.close()
    doc.close()  # closing twice is harmless
    with pytest.raises(ValueError, match="closed"):
        doc.page(0)
