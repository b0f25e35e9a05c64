"""From the bytes of one media file to documents, through the media rooms (platform_assets/media/).

Every reader of media (folders with sidecars, the multimodal manifest, Hugging Face Image/Audio
columns) goes through `MediaReader.documents`: the type comes from the bytes (never from the name),
the name must agree with the bytes, the room decodes, normalises and measures, and anything that
fails becomes one quarantine row with the room's reason. An image or clip is one document; a PDF is
one document per page (`#page=N`).

What a document stores: the prepared bytes (normalised image, rendered page PNG, 16 kHz mono FLAC)
inline in the `large_binary` `media` column with their sha256; the original file stays referenced by
its uri. So a 300-page, 40 MB PDF costs its pages' PNGs (~60-150 KB each at 96 dpi), not 300 copies of
itself, and every later stage reads bytes from Parquet rather than from wherever the source lives (S3).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import PurePosixPath
from typing import Any, TypeVar

import filetype
import orjson

from platform_assets.ingest.media_types import media_kind, modality_of, sniff_mime
from platform_assets.ingest.records import ReadContext, Record
from platform_assets.media.errors import MediaRejected
from platform_assets.media.settings import MediaSettings
from platform_assets.schema import QuarantineReason as Q

log = logging.getLogger(__name__)

# Extensions naming the same format: `photo.jpeg` holding JPEG bytes is not mislabelled.
_EXTENSION_ALIASES = {"jpeg": "jpg", "jpe": "jpg", "tiff": "tif", "oga": "ogg", "opus": "ogg", "wave": "wav"}
_KNOWN_EXTENSIONS = {t.extension for t in filetype.TYPES}
_ocr_warned = False
T = TypeVar("T")
UNEXPECTED = {"image": Q.CORRUPT_IMAGE, "pdf": Q.CORRUPT_PDF, "audio": Q.CORRUPT_AUDIO}


def mislabelled(name: str, mime: str) -> str | None:
    """Why the file's name disagrees with its bytes (a `.png` that is a GIF), or None. Only names with
    a known media extension are compared: `scan.bin` or a name without a suffix says nothing."""
    suffix = PurePosixPath(name.split("#", 1)[0]).suffix.lower().lstrip(".")
    suffix = _EXTENSION_ALIASES.get(suffix, suffix)
    actual = filetype.get_type(mime=mime)
    if not suffix or suffix not in _KNOWN_EXTENSIONS or actual is None:
        return None
    if _EXTENSION_ALIASES.get(actual.extension, actual.extension) == suffix:
        return None
    return f"named .{suffix}, but the bytes are {mime}"


def meta_text(meta: dict[str, Any]) -> str | None:
    return orjson.dumps(meta, option=orjson.OPT_SORT_KEYS).decode() if meta else None


class MediaReader:
    """Prepares the media files of one read (one input group) with the configured rooms."""

    def __init__(self, ctx: ReadContext, settings: MediaSettings,
                 kinds: frozenset[str] = frozenset({"image", "pdf", "audio"})):
        self._ctx = ctx
        self.settings = settings
        self.kinds = kinds

    def _reject(self, uri: str, reason: str, detail: str, data: bytes | None = None) -> None:
        self._ctx.quarantine.add(uri, reason, detail, data[:64] if data else None)

    def documents(
        self,
        data: bytes,
        file_uri: str,
        *,
        text: str = "",
        meta: dict[str, Any] | None = None,
        mtime_s: int | None = None,
        doc_uri: str | None = None,
        expected: str | None = None,
        allowed: frozenset[str] = frozenset({"image", "pdf", "audio"}),
        page: int | None = None,
    ) -> Iterator[Record]:
        """The documents of one media file. `doc_uri` (default: the file) locates the document (a
        manifest row); `expected` is the kind a manifest row declares; `page` picks one PDF page."""
        doc_uri = doc_uri or file_uri
        meta = dict(meta or {})
        if not data:
            self._reject(doc_uri, Q.EMPTY_FILE, f"{file_uri}: 0 bytes")
            return
        mime = sniff_mime(data)
        kind = media_kind(mime)
        if kind is None:
            what = mime or "no known signature in the first bytes"
            self._reject(doc_uri, Q.UNSUPPORTED_MEDIA, f"{file_uri}: {what}", data)
            return
        if expected is not None and kind != expected:
            self._reject(doc_uri, Q.MEDIA_TYPE_MISMATCH, f"{file_uri}: declared {expected}, the bytes are {mime}", data)
            return
        if kind not in allowed:
            self._reject(doc_uri, Q.BINARY_FILE, f"{file_uri}: {mime} ({kind}): not among this source's media kinds",
                         data)
            return
        wrong_name = mislabelled(file_uri, mime)
        if wrong_name:
            self._reject(doc_uri, Q.MEDIA_TYPE_MISMATCH, f"{file_uri}: {wrong_name}", data)
            return
        meta.setdefault("file_bytes", len(data))
        meta.setdefault("source_mime", mime)
        mtime = self._ctx.mtime(mtime_s)
        if kind == "pdf":
            yield from self._pdf_pages(data, file_uri, doc_uri, text, meta, mtime, page)
            return
        if kind == "image":
            from platform_assets.media.images import prepare_image as prepare
            settings: Any = self.settings.images
        else:
            from platform_assets.media.audio import prepare_audio as prepare
            settings = self.settings.audio
        prepared = self._attempt(lambda: prepare(data, settings), doc_uri, file_uri, kind, data)
        if prepared is not None:
            yield Record(text, doc_uri, meta_text(meta), mtime, modality_of(kind).value, (prepared.item(file_uri),))

    def _attempt(self, call: Callable[[], T], where: str, what: str, kind: str, data: bytes | None = None) -> T | None:
        """`call()` of a media room, or None after one quarantine row for `where` (the detail starts with
        `what`, the file or page): the room's reason for a MediaRejected, `corrupt_<kind>` naming the
        exception for anything a decoder raises that the room does not map, so odd bytes cost that one
        file (or page), never the rest of the source."""
        try:
            return call()
        except MediaRejected as rej:
            self._reject(where, rej.reason, f"{what}: {rej.detail}", data)
        except (RuntimeError, MemoryError):
            raise  # a misconfigured process (see images.py) or the machine: not this file's fault
        except Exception as err:  # noqa: BLE001 - a decoder's surprise is this file's problem, not the run's
            self._reject(where, UNEXPECTED[kind], f"{what}: {type(err).__name__}: {err}", data)
        return None

    def _pdf_pages(self, data: bytes, file_uri: str, doc_uri: str, text: str, meta: dict[str, Any],
                   mtime: int | None, page: int | None) -> Iterator[Record]:
        """One document per page; a manifest row naming a page gets that page only. The page's text is
        the document's text; a row's own text (an instruction, a summary) stays in meta."""
        from platform_assets.media.pdf import ocr_unavailable_reason, open_pdf

        self._warn_once_without_ocr(ocr_unavailable_reason)
        if text:
            meta.setdefault("row_text", text)
        doc = self._attempt(lambda: open_pdf(data, self.settings.pdf), doc_uri, file_uri, "pdf", data)
        if doc is None:
            return
        with doc:
            if page is None:
                indices = list(doc.readable_pages())
                if doc.page_count > len(indices):
                    self._reject(doc_uri, Q.PDF_PAGE_LIMIT, f"{file_uri}: {doc.page_count} pages; the first "
                                 f"{len(indices)} kept (pdf.max_pages)")
            else:
                indices = [page]
            for index in indices:
                page_uri = f"{file_uri}#page={index}"
                where = doc_uri if page is not None else page_uri
                got = self._attempt(lambda i=index: doc.page(i), where, page_uri, "pdf")
                if got is None:
                    continue
                yield Record(got.text, where, meta_text(meta), mtime, modality_of("pdf").value,
                             (got.image.item(page_uri),))

    def _warn_once_without_ocr(self, reason_fn) -> None:
        global _ocr_warned
        if self.settings.pdf.ocr and not _ocr_warned:
            reason = reason_fn()
            if reason:
                _ocr_warned = True
                log.warning("PDF OCR is off: %s", reason)
