"""The OCR plugin interface: an image of a scanned page in, its text out."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["OcrEngine", "OcrUnavailable"]


@runtime_checkable
class OcrEngine(Protocol):
    """Reads the words in an image: how ingestion reads a scanned PDF page (images and
    no text layer) when the ``ocr`` setting names this engine. ``name`` identifies it.

    Called in the process that parses the upload (an ingestion worker), one image at a
    time, in the page's order; the page's text is what the reads of its images return,
    joined.
    """

    name: str

    def read(self, image: bytes, *, timeout: float) -> str:
        """The text of ``image`` (a PNG), lines separated by newlines; ``""`` for none.

        Return or raise within ``timeout`` seconds (wall clock): what is left of the
        page's, the document's and the job's time, which ingestion waits no longer
        than. Raise any exception for a failure (``TimeoutError`` for running out of
        time): the page is indexed without text, and the document's ``no_text`` warning
        lists it, so an engine need not catch its own errors.
        """
        ...


class OcrUnavailable(ValueError):
    """The ``ocr`` setting names an engine no plugin registered (or OCR cannot run here):
    the core does not open."""
