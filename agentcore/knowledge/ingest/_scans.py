"""Scanned PDF pages: told from blank ones by their images, and read by OCR when set.

A page is scanned when it extracts to blank text, its content draws an XObject and its
resources hold an image XObject (directly or in the forms they hold). Only pages that
extracted to nothing are looked at, and only their resource dictionaries, at most
``page_xobjects`` entries of them: no image is decoded to find one.

OCR runs in the reading thread, through the configured ``OcrEngine`` (the built-in one
calls the ``tesseract`` command). The reading thread's CPU clock does not see a
subprocess's time, so OCR is bounded in wall-clock seconds instead: a page's images get
at most ``page_seconds`` together, a document's pages at most ``document_seconds``,
and never more than is left of the job's deadline. A page that runs out, or whose
engine fails, is indexed without text, as it would be without OCR.
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentcore._logs import get_logger
from agentcore.schema import DocumentWarning

if TYPE_CHECKING:
    from agentcore._cancellation import Cancellation
    from agentcore.knowledge.ocr import OcrEngine

__all__ = ["MAX_IMAGE_PIXELS", "Ocr", "OcrRun", "ScannedPages", "holds_images"]

log = get_logger("agentcore.ingest")

MAX_IMAGE_PIXELS = 64_000_000
"""The largest image OCR reads (an A4 page scanned at 600 dpi is 35 million pixels);
larger ones are skipped, never decoded."""
_MIN_SIDE = 16  # pixels: a rule, a dot, an icon holds no words worth reading
_MIN_SECONDS = 0.05  # less time than this left for an image: it is not started


def _images(page: Any, limit: int) -> Iterator[Any]:
    """The image XObjects of ``page``'s resources, then those of the forms among them,
    each once; at most ``limit`` XObject entries are looked at."""
    pending = [page.get("/Resources")]
    seen: set[int] = set()
    looked = 0
    while pending:
        xobjects = _dictionary(_dictionary(pending.pop(0)).get("/XObject"))
        for entry in xobjects.values():
            looked += 1
            if looked > limit:
                return
            xobject = entry.get_object()
            if not isinstance(xobject, dict) or id(xobject) in seen:
                continue
            seen.add(id(xobject))  # pypdf resolves an object once: a form drawn twice is seen
            subtype = xobject.get("/Subtype")
            if subtype == "/Image":
                yield xobject
            elif subtype == "/Form":
                pending.append(xobject.get("/Resources"))


def _dictionary(value: Any) -> dict[Any, Any]:
    """``value`` resolved if it is a dictionary, else an empty one."""
    resolved = value.get_object() if value is not None else None
    return resolved if isinstance(resolved, dict) else {}


def holds_images(page: Any, limit: int) -> bool:
    """Whether ``page``'s resources hold an image XObject, directly or in a form (at
    most ``limit`` entries looked at); a resource too broken to read holds none."""
    try:
        return next(_images(page, limit), None) is not None
    except MemoryError:
        raise
    except Exception:
        return False


@dataclass(frozen=True)
class Ocr:
    """An OCR engine and the wall-clock seconds it may take: for one page's images
    together, and for all of a document's pages."""

    engine: OcrEngine
    page_seconds: float
    document_seconds: float


class OcrRun:
    """One document's OCR: reads its scanned pages within the time it has, and keeps
    the first reason a page could not be read (for the document's warning)."""

    def __init__(self, ocr: Ocr, cancellation: Cancellation | None = None) -> None:
        self.ocr = ocr
        self.cancellation = cancellation
        self.used = 0.0  # wall-clock seconds the engine took, over the document's pages
        self.failed = 0  # images the engine failed on, or had no time for
        self.reason: str | None = None  # why the first of them was not read

    @property
    def name(self) -> str:
        """The engine's name."""
        return self.ocr.engine.name

    def read(self, page: Any, limit: int) -> str:
        """The text of ``page``'s images (at most ``limit`` XObjects looked at), one
        image after the other; ``""`` when none could be read."""
        texts: list[str] = []
        spent = 0.0  # by the engine, on this page
        for xobject in _images(page, limit):
            if self._left(spent) < _MIN_SECONDS:
                break
            png = self._png(xobject)
            if png is None:
                continue
            left = self._left(spent)  # decoding it took some of the job's time
            if left < _MIN_SECONDS:
                break
            start = time.monotonic()
            try:
                texts.append(str(self.ocr.engine.read(png, timeout=left)))
            except MemoryError:
                raise
            except Exception as error:
                self._failure(_reason(error, left))
            finally:
                took = time.monotonic() - start
                spent += took
                self.used += took
        return "\n\n".join(text for text in texts if text.strip())

    def _left(self, spent: float) -> float:
        """Seconds the next image may take: what is left of the page's, the document's
        and the job's time. When it is too little to start, that is the failure noted
        (the caller stops reading the page)."""
        page = self.ocr.page_seconds - spent
        document = self.ocr.document_seconds - self.used
        job = self.cancellation.remaining if self.cancellation is not None else None
        left = min(page, document, float("inf") if job is None else job)
        if left < _MIN_SECONDS:
            self._failure(
                "the page's OCR time ran out (ingest_page_cpu_seconds)"
                if left == page
                else "the document's OCR time ran out (ingest_cpu_seconds,"
                " ingest_cpu_seconds_per_mib)"
                if left == document
                else "the job's deadline came"
            )
        return left

    def _png(self, xobject: Any) -> bytes | None:
        """An image XObject as PNG bytes, or ``None``: too small to hold words, too large
        to read, or not decodable (each a failure but the first)."""
        try:
            width, height = int(xobject.get("/Width", 0)), int(xobject.get("/Height", 0))
        except (TypeError, ValueError):
            return None
        if min(width, height) < _MIN_SIDE:
            return None
        if width * height > MAX_IMAGE_PIXELS:
            self._failure(f"an image of {width} x {height} pixels is too large to read")
            return None
        try:
            image = xobject.decode_as_image()
            if image.mode not in ("1", "L", "RGB"):  # CMYK, palettes, alpha
                image = image.convert("RGB")
            out = io.BytesIO()
            image.save(out, format="PNG", compress_level=1)  # speed over size: a pipe
        except MemoryError:
            raise
        except Exception as error:
            self._failure(f"an image could not be decoded ({type(error).__name__})")
            return None
        return out.getvalue()

    def _failure(self, reason: str) -> None:
        self.failed += 1
        if self.reason is None:
            self.reason = reason

    def report(self, source: str) -> None:
        """Log, once for the document, how many images OCR could not read and why."""
        if self.failed:
            log.warning(
                "OCR (%s) could not read %d image(s) of %r; first: %s",
                self.name,
                self.failed,
                source,
                self.reason,
            )


def _reason(error: Exception, timeout: float) -> str:
    """Why an engine's read failed, in words for a warning (its message cut short)."""
    if isinstance(error, TimeoutError):
        return f"it took more than {timeout:.3g} s"
    message = " ".join(str(error).split())
    if len(message) > 200:
        message = message[:199] + "\u2026"
    return f"it failed ({type(error).__name__}{': ' + message if message else ''})"


class ScannedPages:
    """A PDF's scanned pages as it is read: those OCR read text from, the others."""

    def __init__(self) -> None:
        self.read: list[int] = []
        self.unread: list[int] = []

    def add(self, page: int, *, read: bool) -> None:
        """Page ``page`` (1-based) is scanned; ``read``: OCR gave it text."""
        (self.read if read else self.unread).append(page)

    def warnings(self, ocr: OcrRun | None) -> list[DocumentWarning]:
        """The document's warnings: ``no_text`` for the pages still without text (why,
        when OCR ran), ``ocr`` for those it read."""
        warnings = []
        if self.unread:
            detail = (
                "These pages hold images but no text layer: nothing on them is searchable."
                " Scanned pages need OCR (the `ocr` setting)."
                if ocr is None
                else "These pages hold images but no text layer, and OCR"
                f" ({ocr.name}) read no text from them: {ocr.reason or 'it found none'}."
            )
            warnings.append(DocumentWarning(code="no_text", pages=self.unread, detail=detail))
        if self.read:
            assert ocr is not None
            detail = (
                f"The text of these pages was read from their images by OCR ({ocr.name}):"
                " it may hold misread words."
            )
            warnings.append(DocumentWarning(code="ocr", pages=self.read, detail=detail))
        return warnings
