"""Formats: which of the readable formats an upload is, from its bytes, label and name.

The bytes decide first (``%PDF-``; a ZIP package whose parts are Word's, PowerPoint's or
Excel's; a page that opens as HTML), then the declared media type unless it says
nothing (``application/octet-stream``), then the extension, and for an unlabelled,
unnamed file whether its bytes are UTF-8 text.
"""

from __future__ import annotations

import importlib.util
import posixpath

from agentcore.errors import UnsupportedMediaType, ValidationFailed
from agentcore.knowledge.ingest._extraction import invalid_file
from agentcore.knowledge.ingest._zipguard import ArchiveLimits, open_archive

__all__ = [
    "CSV",
    "DOCX",
    "HTML",
    "INLINE_TYPES",
    "MARKDOWN",
    "OFFICE_TYPES",
    "PDF",
    "PLAIN",
    "PPTX",
    "XLSX",
    "detect_type",
    "text_kind",
]

PLAIN = "text/plain"
MARKDOWN = "text/markdown"
PDF = "application/pdf"
CSV = "text/csv"
HTML = "text/html"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"

OFFICE_TYPES = frozenset({DOCX, PPTX, XLSX})
INLINE_TYPES = frozenset({PLAIN, MARKDOWN, CSV})
"""Types a small upload of is read in the calling thread: plain text, whose reading is
linear and bounded. Everything else (PDF, Office files, HTML, whose parsers a crafted
file can make work hard) goes to a worker process."""

_TYPE_ALIASES = {
    PLAIN: PLAIN,
    MARKDOWN: MARKDOWN,
    "text/x-markdown": MARKDOWN,
    PDF: PDF,
    "application/x-pdf": PDF,
    CSV: CSV,
    "application/csv": CSV,
    "text/x-csv": CSV,
    "text/comma-separated-values": CSV,
    HTML: HTML,
    "application/xhtml+xml": HTML,
    DOCX: DOCX,
    PPTX: PPTX,
    XLSX: XLSX,
}
_EXTENSIONS = {
    ".txt": PLAIN,
    ".text": PLAIN,
    ".md": MARKDOWN,
    ".markdown": MARKDOWN,
    ".pdf": PDF,
    ".csv": CSV,
    ".html": HTML,
    ".htm": HTML,
    ".xhtml": HTML,
    ".docx": DOCX,
    ".pptx": PPTX,
    ".xlsx": XLSX,
}
# Types that say nothing about the content; the extension and the bytes decide. Windows
# labels a .csv file application/vnd.ms-excel when Excel is installed, and some clients
# label any ZIP package (an Office file) application/zip.
_GENERIC_TYPES = frozenset(
    {
        "",
        "application/octet-stream",
        "binary/octet-stream",
        "application/vnd.ms-excel",
        "application/zip",
        "application/x-zip-compressed",
    }
)
_PDF_MAGIC = b"%PDF-"
_ZIP_MAGIC = b"PK\x03\x04"
_NAMES = {
    PLAIN: "plain text",
    MARKDOWN: "Markdown",
    PDF: "PDF",
    CSV: "CSV",
    HTML: "HTML",
    DOCX: "a Word document (.docx)",
    PPTX: "a PowerPoint presentation (.pptx)",
    XLSX: "an Excel workbook (.xlsx)",
}
SUPPORTED = (
    "PDF, Word (.docx), PowerPoint (.pptx), Excel (.xlsx), CSV, HTML, Markdown or plain text"
)
# the package an Office or HTML file is read with (the ``office`` extra installs them)
_PARSERS = {DOCX: "docx", PPTX: "pptx", XLSX: "python_calamine", HTML: "selectolax"}
# a package's main part, by the folder its format keeps its parts in
_OFFICE_FOLDERS = (("word/", DOCX), ("ppt/", PPTX), ("xl/", XLSX))


def detect_type(data: bytes, source: str, content_type: str | None, limits: ArchiveLimits) -> str:
    """The canonical type of ``data`` (see the module), or its 4xx: 415
    ``unsupported_file_type``, 422 for a file labelled a type its bytes are not, 413
    ``too_large`` for an archive past ``limits``."""
    declared = (content_type or "").split(";", 1)[0].strip().lower()
    extension = posixpath.splitext(source.lower())[1]
    # Some producers put junk before the header; readers accept it within 1 KiB.
    if _PDF_MAGIC in data[:1024]:
        return PDF
    if data.startswith(_ZIP_MAGIC):
        office = _office_type(data, limits)
        if office is not None:
            return _installed(office)
    if _looks_like_html(data):
        return _installed(HTML)
    if declared not in _GENERIC_TYPES:
        kind = _TYPE_ALIASES.get(declared)
    elif extension:
        kind = _EXTENSIONS.get(extension)
    else:
        kind = PLAIN if _looks_like_text(data) else None
    if kind is None:
        label = declared if declared not in _GENERIC_TYPES else (extension or "unknown")
        raise UnsupportedMediaType(
            f"Unsupported file type {label!r}: upload {SUPPORTED}.",
            code="unsupported_file_type",
            param="file",
        )
    if kind == PDF:
        raise ValidationFailed(
            "The file is labelled PDF but is not one (no %PDF- header).",
            code="invalid_pdf",
            param="file",
        )
    if kind in OFFICE_TYPES:
        raise invalid_file(
            f"The file is labelled {_NAMES[kind]} but is not a readable one (corrupt,"
            " truncated, or not an Office Open XML package)."
        )
    return _installed(kind) if kind in _PARSERS else kind


def text_kind(source: str) -> str:
    """The type of text stored under ``source``: Markdown by extension, else plain."""
    kind = _EXTENSIONS.get(posixpath.splitext(source.strip().lower())[1], PLAIN)
    return MARKDOWN if kind == MARKDOWN else PLAIN


def _office_type(data: bytes, limits: ArchiveLimits) -> str | None:
    """The Office type of a ZIP package (``[Content_Types].xml`` and the folder of Word's,
    PowerPoint's or Excel's parts), ``None`` for another or unreadable archive."""
    archive = open_archive(data, limits)
    if archive is None:
        return None
    with archive:
        names = archive.namelist()
    if "[Content_Types].xml" not in names:
        return None
    for folder, kind in _OFFICE_FOLDERS:
        if any(name.startswith(folder) for name in names):
            return kind
    return None


def _installed(kind: str) -> str:
    """``kind``, when the package that reads it is installed; else 415 naming the extra."""
    if importlib.util.find_spec(_PARSERS[kind]) is None:
        raise UnsupportedMediaType(
            f"Reading {_NAMES[kind]} needs the office extra, which this server lacks:"
            " pip install 'agentcore-service[office]'.",
            code="unsupported_file_type",
            param="file",
        )
    return kind


def _looks_like_html(data: bytes) -> bool:
    """Whether ``data`` opens as an HTML page: ``<!doctype html`` or ``<html`` first,
    after a byte-order mark, whitespace, an XML declaration and comments."""
    head = data[:1024].removeprefix(b"\xef\xbb\xbf").lstrip().lower()
    if head.startswith(b"<?xml"):
        head = head[head.find(b"?>") + 2 :].lstrip() if b"?>" in head else b""
    while head.startswith(b"<!--"):
        end = head.find(b"-->")
        head = head[end + 3 :].lstrip() if end >= 0 else b""
    return head.startswith((b"<!doctype html", b"<html"))


def _looks_like_text(data: bytes) -> bool:
    head = data[:4096]
    if b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A multi-byte character cut by the 4 KiB window is still text.
        return exc.start >= len(head) - 3
    return True
