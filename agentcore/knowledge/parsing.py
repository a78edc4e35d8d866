"""Parsing: uploaded bytes (text, Markdown, PDF) to clean page texts, or a clear 4xx."""

from __future__ import annotations

import contextlib
import io
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentcore.errors import (
    AgentCoreError,
    PayloadTooLarge,
    UnsupportedMediaType,
    ValidationFailed,
    check_unicode,
)

if TYPE_CHECKING:
    from agentcore.cancellation import Cancellation

__all__ = [
    "PDF",
    "PLAIN",
    "MARKDOWN",
    "ParsedDocument",
    "TextBudget",
    "check_text",
    "check_upload",
    "clean_pdf_text",
    "decode_text",
    "parse_document",
    "parse_text",
    "text_kind",
]

PLAIN = "text/plain"
MARKDOWN = "text/markdown"
PDF = "application/pdf"

_TYPE_ALIASES = {
    "text/plain": PLAIN,
    "text/markdown": MARKDOWN,
    "text/x-markdown": MARKDOWN,
    "application/pdf": PDF,
    "application/x-pdf": PDF,
}
_EXTENSIONS = {".txt": PLAIN, ".text": PLAIN, ".md": MARKDOWN, ".markdown": MARKDOWN, ".pdf": PDF}
# Types that say nothing about the content; the extension and the bytes decide.
_GENERIC_TYPES = frozenset({"", "application/octet-stream", "binary/octet-stream"})
_PDF_MAGIC = b"%PDF-"


@dataclass(frozen=True)
class TextBudget:
    """How much text a PDF may extract to: per page and in all, in characters.

    Counted as extraction goes (a crafted file can make every page extract to megabytes
    of text from a few bytes: thousands of pages sharing one compressed content stream),
    so a file over budget stops within one page's budget of work, not after all of it.
    """

    page_chars: int
    total_chars: int


@dataclass(frozen=True)
class ParsedDocument:
    """A parsed upload: its source name, canonical content type and page texts.

    Page ``n`` (1-based) is ``pages[n - 1]``; a page with no text is an empty string,
    so numbering always matches the original file.
    """

    source: str
    content_type: str
    pages: list[str]


def parse_document(
    data: bytes,
    filename: str,
    content_type: str | None = None,
    *,
    max_bytes: int,
    max_pages: int,
    budget: TextBudget | None = None,
    cancellation: Cancellation | None = None,
) -> ParsedDocument:
    """Parse an uploaded file into pages.

    The type comes from the bytes first (``%PDF-`` means PDF whatever the label),
    then from ``content_type`` unless it is generic (``application/octet-stream``),
    then from the file name's extension, and for unlabelled files from whether the
    bytes are UTF-8 text. Plain text is split into pages at form feeds (``\\f``);
    Markdown is one page; PDFs give one entry per page. PDFs encrypted with an
    empty user password (common for "no copy" flags) are opened; any other
    encryption is refused.

    :param data: the file's bytes.
    :param filename: the uploaded file's name; its base name becomes ``source``.
    :param content_type: the declared media type, parameters allowed.
    :param max_bytes: the largest accepted file.
    :param max_pages: the most pages accepted in a PDF.
    :param budget: the most text a PDF may extract to (``None``: no limit).
    :param cancellation: checked between the pages of a PDF.
    :raises PayloadTooLarge: ``file_too_large``, ``too_many_pages``, ``too_large`` (a PDF
        whose text passes ``budget``).
    :raises UnsupportedMediaType: ``unsupported_file_type``.
    :raises ValidationFailed: ``empty_file``, ``invalid_encoding``, ``invalid_pdf``,
        ``encrypted_pdf``, ``no_text``. Every error has ``param="file"``.
    """
    source, kind = check_upload(data, filename, content_type, max_bytes=max_bytes)
    pages = (
        _pdf_pages(data, max_pages, budget, cancellation)
        if kind == PDF
        else _text_pages(decode_text(data), kind)
    )
    if not any(page and not page.isspace() for page in pages):  # no copy of a huge page
        raise ValidationFailed(
            "The file contains no extractable text"
            + (" (a scanned PDF needs OCR first)." if kind == PDF else "."),
            code="no_text",
            param="file",
        )
    return ParsedDocument(source=source, content_type=kind, pages=pages)


def check_upload(
    data: bytes, filename: str, content_type: str | None, *, max_bytes: int
) -> tuple[str, str]:
    """The cheap checks of ``parse_document``: ``(source, canonical type)`` or its error.

    Size, emptiness and type only, without decoding or parsing: what an upload
    queued for background ingestion is checked for before it is accepted.
    """
    check_unicode(filename, param="filename")
    check_unicode(content_type, param="content_type")
    source = _source_name(filename)
    if len(data) > max_bytes:
        raise PayloadTooLarge(
            f"The file is {len(data)} bytes; the limit is {max_bytes}.",
            code="file_too_large",
            param="file",
        )
    if not data:
        raise ValidationFailed("The file is empty.", code="empty_file", param="file")
    return source, _detect_type(data, source, content_type)


def check_text(source: str, text: str) -> None:
    """The checks of ``parse_text``: a non-blank source and text."""
    if not source.strip():
        raise ValidationFailed("source must not be blank.", param="source")
    if not text.strip():
        raise ValidationFailed("text must not be blank.", code="no_text", param="text")


def text_kind(source: str) -> str:
    """The type of text stored under ``source``: Markdown by extension, else plain."""
    kind = _EXTENSIONS.get(posixpath.splitext(source.strip().lower())[1], PLAIN)
    return PLAIN if kind == PDF else kind


def parse_text(source: str, text: str) -> ParsedDocument:
    """Wrap text sent as JSON ``{source, text}``, like a ``.txt`` or ``.md`` upload.

    :raises ValidationFailed: ``param="source"`` when the source is blank;
        ``no_text`` with ``param="text"`` when the text is blank.
    """
    check_text(source, text)
    kind = text_kind(source)
    return ParsedDocument(source=source.strip(), content_type=kind, pages=_text_pages(text, kind))


def _source_name(filename: str) -> str:
    # Browsers may send "C:\\fakepath\\x.pdf"; only the base name is meaningful.
    name = filename.replace("\\", "/").rsplit("/", 1)[-1].strip()
    return name or "upload"


def _detect_type(data: bytes, source: str, content_type: str | None) -> str:
    declared = (content_type or "").split(";", 1)[0].strip().lower()
    extension = posixpath.splitext(source.lower())[1]
    # Some producers put junk before the header; readers accept it within 1 KiB.
    if _PDF_MAGIC in data[:1024]:
        return PDF
    if declared not in _GENERIC_TYPES:
        kind = _TYPE_ALIASES.get(declared)
    elif extension:
        kind = _EXTENSIONS.get(extension)
    else:
        kind = PLAIN if _looks_like_text(data) else None
    if kind is None:
        label = declared if declared not in _GENERIC_TYPES else (extension or "unknown")
        raise UnsupportedMediaType(
            f"Unsupported file type {label!r}: upload PDF, plain text or Markdown.",
            code="unsupported_file_type",
            param="file",
        )
    if kind == PDF:
        raise ValidationFailed(
            "The file is labelled PDF but is not one (no %PDF- header).",
            code="invalid_pdf",
            param="file",
        )
    return kind


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


def decode_text(data: bytes, *, param: str = "file") -> str:
    """UTF-8 bytes (an optional BOM dropped) as text, or ``invalid_encoding`` naming ``param``."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValidationFailed(
            f"The file is not valid UTF-8 (bad byte at offset {exc.start}).",
            code="invalid_encoding",
            param=param,
        ) from None
    if "\x00" in text:
        raise ValidationFailed(
            "The file contains NUL characters; it is not text.",
            code="invalid_encoding",
            param=param,
        )
    return text


def _text_pages(text: str, kind: str) -> list[str]:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if kind == PLAIN and "\f" in text:
        return text.split("\f")
    return [text.replace("\f", "\n")]


class _OverBudget(Exception):
    """Raised from pypdf's text visitor to stop an extraction that passed its budget."""

    def __init__(self, per_page: bool) -> None:
        super().__init__()
        self.per_page = per_page


def _pdf_pages(
    data: bytes, max_pages: int, budget: TextBudget | None, cancellation: Cancellation | None
) -> list[str]:
    # Imported here: a host that never ingests PDFs does not pay for pypdf.
    from pypdf import PasswordType, PdfReader
    from pypdf.errors import LimitReachedError

    invalid = ValidationFailed(
        "The file is not a readable PDF (corrupt or truncated).",
        code="invalid_pdf",
        param="file",
    )
    # pypdf's own bounds (tokens per stream, objects, ...): a size limit, not corruption
    too_large = PayloadTooLarge(
        "The PDF holds more than the parser reads (too many operators or objects in a stream).",
        code="too_large",
        param="file",
    )

    @contextlib.contextmanager
    def reading(unreadable: ValidationFailed) -> Iterator[None]:
        """pypdf's failures as the upload's errors: its own bounds a 413 (``too_large``),
        anything else ``unreadable``. A MemoryError (the worker's memory limit, not a
        corrupt file) passes: the worker is replaced and reports a 413."""
        try:
            yield
        except (MemoryError, AgentCoreError):
            raise
        except LimitReachedError:
            raise too_large from None
        except Exception:
            raise unreadable from None

    with reading(invalid):
        reader = PdfReader(io.BytesIO(data), strict=False)
        encrypted = reader.is_encrypted
    if encrypted:
        try:
            opened = reader.decrypt("") != PasswordType.NOT_DECRYPTED
        except Exception:  # unsupported algorithm or missing crypto dependency
            opened = False
        if not opened:
            raise ValidationFailed(
                "The PDF is encrypted with a password; upload an unencrypted copy.",
                code="encrypted_pdf",
                param="file",
            )
    with reading(invalid):
        count = len(reader.pages)
    if count > max_pages:
        raise PayloadTooLarge(
            f"The PDF has {count} pages; the limit is {max_pages}.",
            code="too_many_pages",
            param="file",
        )
    pages: list[str] = []
    total = 0
    for number in range(count):
        if cancellation is not None:
            cancellation.check()
        corrupt = ValidationFailed(
            f"Page {number + 1} of the PDF could not be read (corrupt content).",
            code="invalid_pdf",
            param="file",
        )
        with reading(corrupt):
            try:
                raw = _page_text(reader.pages[number], budget, total)
            except _OverBudget as over:
                assert budget is not None
                raise PayloadTooLarge(
                    f"Page {number + 1} of the PDF extracts to more than"
                    f" {budget.page_chars:,} characters of text, the limit for one page."
                    if over.per_page
                    else f"The PDF extracts to more than {budget.total_chars:,} characters"
                    f" of text by page {number + 1}, more than one document may hold.",
                    code="too_large",
                    param="file",
                ) from None
        total += len(raw)
        pages.append(clean_pdf_text(raw))
    return pages


def _page_text(page: Any, budget: TextBudget | None, before: int) -> str:
    """One page's raw text; ``_OverBudget`` as soon as it passes ``budget`` (``before``:
    the characters the earlier pages extracted to).

    pypdf calls the visitor with each piece of text as it goes, so counting there stops
    the extraction early: its cost grows with the page's text, faster than linearly.
    """
    if budget is None:
        return str(page.extract_text())
    per_page = budget.page_chars <= budget.total_chars - before
    limit = budget.page_chars if per_page else budget.total_chars - before
    seen = 0

    def count(text: str, *_: Any) -> None:
        nonlocal seen
        seen += len(text)
        if seen > limit:
            raise _OverBudget(per_page)

    return str(page.extract_text(visitor_text=count))


_LIGATURES = str.maketrans(
    {
        "\ufb00": "ff",
        "\ufb01": "fi",
        "\ufb02": "fl",
        "\ufb03": "ffi",
        "\ufb04": "ffl",
        "\ufb05": "st",
        "\ufb06": "st",
        "\u00a0": " ",
        "\u00ad": None,  # soft hyphen: only a line-break hint
        "\u200b": None,
        "\x00": None,
    }
)
_LINE_END_HYPHEN = re.compile(r"(\w)[-\u2010]\n[ \t]*(?=[a-z])")
_SPACES = re.compile(r"[ \t\u2000-\u200a\u3000\x0b\x0c]+")
_CONTROLS = re.compile(r"[\x01-\x08\x0e-\x1f\x7f]")
_TERMINAL = (".", "!", "?", ":", '"', "\u201d", "'", "\u2019", ")")


def clean_pdf_text(raw: str) -> str:
    """Tidy one page of text extracted from a PDF.

    Joins words hyphenated across line breaks ("infor-\\nmation"), folds runs of
    spaces, and rejoins wrapped lines into paragraphs separated by a blank line. A
    paragraph ends at a blank line or after a short line ending in terminal
    punctuation (the last line of a justified or ragged paragraph).
    """
    text = raw.translate(_LIGATURES).replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROLS.sub(" ", text)
    text = _LINE_END_HYPHEN.sub(r"\1", text)
    lines = [_SPACES.sub(" ", line).strip() for line in text.split("\n")]
    longest = sorted((len(line) for line in lines if line), reverse=True)
    # The typical full line: robust to one overlong line (a URL, a table row).
    full = longest[min(len(longest) - 1, len(longest) // 10)] if longest else 0
    paragraphs: list[str] = []
    current: list[str] = []
    for line in lines:
        if not line:
            if current:
                paragraphs.append(" ".join(current))
                current = []
            continue
        current.append(line)
        if line.endswith(_TERMINAL) and len(line) < 0.75 * full:
            paragraphs.append(" ".join(current))
            current = []
    if current:
        paragraphs.append(" ".join(current))
    return "\n\n".join(paragraphs)
