"""Parsing: uploaded bytes to clean page texts (and their labels), or a clear 4xx.

Text, Markdown and PDF are read here; the other formats in modules of their own
(``_office``: Word, PowerPoint, Excel; ``_markup``: HTML; ``_tables``: CSV), imported when
such a file arrives. Which format a file is, ``_formats`` decides.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentcore._logs import get_logger
from agentcore.errors import (
    PayloadTooLarge,
    ValidationFailed,
    check_unicode,
)
from agentcore.knowledge._chunking import Label
from agentcore.knowledge.ingest._cpu_budget import BudgetSpent, CpuBudget
from agentcore.knowledge.ingest._extraction import (
    Pages,
    TextBudget,
    decode_text,
    reading,
    within_cpu,
)
from agentcore.knowledge.ingest._formats import (
    CSV,
    DOCX,
    HTML,
    MARKDOWN,
    PDF,
    PLAIN,
    PPTX,
    XLSX,
    detect_type,
    text_kind,
)
from agentcore.knowledge.ingest._scans import Ocr, OcrRun, ScannedPages, holds_images
from agentcore.knowledge.ingest._zipguard import (
    DEFAULT_LIMITS,
    ArchiveLimits,
    open_archive,
    verify_archive,
)
from agentcore.schema import DocumentWarning

if TYPE_CHECKING:
    from agentcore._cancellation import Cancellation

__all__ = [
    "CSV",
    "DOCX",
    "HTML",
    "MARKDOWN",
    "PDF",
    "PLAIN",
    "PPTX",
    "XLSX",
    "ArchiveLimits",
    "ParsedDocument",
    "TextBudget",
    "WorkBudget",
    "check_text",
    "check_upload",
    "clean_pdf_text",
    "decode_text",
    "parse_document",
    "parse_text",
    "text_kind",
]

log = get_logger("agentcore.ingest")


@dataclass(frozen=True)
class WorkBudget:
    """How much work reading a PDF may take, whatever text it yields.

    A page can cost seconds of parsing and extract to nothing (a quarter million drawing
    operators; forms drawing forms ten times over), which no text budget sees. Reading
    stops with 413 ``too_complex`` once a page has more operators or XObject invocations
    than allowed (counted before and while pypdf parses), or once the page, or the whole
    file, has used its CPU seconds (``cpu_budget.CpuBudget``: the reading thread's own
    CPU time, so a busy machine does not fail a file sooner).
    """

    cpu_seconds: float
    page_cpu_seconds: float
    page_operators: int
    page_xobjects: int

    @classmethod
    def for_size(
        cls,
        size: int,
        *,
        cpu_seconds: float,
        cpu_seconds_per_mib: float,
        page_cpu_seconds: float,
        page_operators: int,
        page_xobjects: int,
    ) -> WorkBudget:
        """The budget of a file of ``size`` bytes: ``cpu_seconds``, plus
        ``cpu_seconds_per_mib`` for each MiB of it."""
        return cls(
            cpu_seconds=cpu_seconds + cpu_seconds_per_mib * size / (1024 * 1024),
            page_cpu_seconds=page_cpu_seconds,
            page_operators=page_operators,
            page_xobjects=page_xobjects,
        )


@dataclass(frozen=True)
class ParsedDocument:
    """A parsed upload: its source name, canonical content type, page texts and labels,
    and what its reader should know (a PDF's scanned pages, its pages read by OCR).

    Page ``n`` (1-based) is ``pages[n - 1]``; a page with no text is an empty string,
    so numbering always matches the original file (a PDF's pages, a deck's slides, a
    workbook's sheets). ``labels`` say where named parts start (``Slide 3``,
    ``Sheet Sales``, a heading): what chunks cite as their ``location``.
    """

    source: str
    content_type: str
    pages: list[str]
    warnings: list[DocumentWarning] = field(default_factory=list)
    labels: list[Label] = field(default_factory=list)


def parse_document(
    data: bytes,
    filename: str,
    content_type: str | None = None,
    *,
    max_bytes: int,
    max_pages: int,
    budget: TextBudget | None = None,
    work: WorkBudget | None = None,
    cancellation: Cancellation | None = None,
    ocr: Ocr | None = None,
    archive: ArchiveLimits = DEFAULT_LIMITS,
) -> ParsedDocument:
    """Parse an uploaded file into pages.

    The type comes from the bytes first (``%PDF-`` means PDF whatever the label; a ZIP
    package of Word's, PowerPoint's or Excel's parts; a page opening ``<!doctype html``
    or ``<html``), then from ``content_type`` unless it is generic
    (``application/octet-stream``), then from the file name's extension, and for
    unlabelled files from whether the bytes are UTF-8 text. Plain text is split into
    pages at form feeds (``\\f``); Markdown, CSV and HTML are one page; PDFs give one
    entry per page, presentations one per slide, workbooks one per sheet, Word
    documents one per page break. PDFs encrypted with an empty user password (common
    for "no copy" flags) are opened; any other encryption is refused.

    A PDF page that extracts to no text but holds images is scanned: ``ocr`` (when
    given) reads its images, and the document's ``warnings`` list the pages read so
    (``ocr``) and those still without text (``no_text``).

    :param data: the file's bytes.
    :param filename: the uploaded file's name; its base name becomes ``source``.
    :param content_type: the declared media type, parameters allowed.
    :param max_bytes: the largest accepted file.
    :param max_pages: the most pages accepted in a PDF.
    :param budget: the most text a file may extract to (``None``: no limit); its
        ``page_chars`` bound a PDF's pages.
    :param work: the most work reading a file may take (``None``: no limit); its
        operator and XObject counts bound a PDF's pages.
    :param cancellation: checked between the pages of a PDF, the rows of a table; OCR
        ends by its deadline.
    :param ocr: reads a PDF's scanned pages (``None``: they stay without text).
    :param archive: what an Office file's ZIP archive may unpack to.
    :raises PayloadTooLarge: ``file_too_large``, ``too_many_pages``, ``too_large`` (text
        past ``budget``, an archive past ``archive``), ``too_complex`` (past ``work``).
    :raises UnsupportedMediaType: ``unsupported_file_type`` (a format not read, or an
        Office file without the ``office`` extra installed).
    :raises ValidationFailed: ``empty_file``, ``invalid_encoding``, ``invalid_pdf``,
        ``encrypted_pdf``, ``invalid_file`` (an unreadable Office file or CSV),
        ``no_text``. Every error has ``param="file"``.
    """
    source, kind = check_upload(data, filename, content_type, max_bytes=max_bytes, archive=archive)
    labels: list[Label] = []
    if kind == PDF:
        return _pdf_document(source, data, max_pages, budget, work, cancellation, ocr)
    if kind in (PLAIN, MARKDOWN):
        pages = _text_pages(decode_text(data), kind)
    else:
        pages, labels = _structured_pages(data, kind, budget, work, cancellation, archive)
    if not any(page and not page.isspace() for page in pages):  # no copy of a huge page
        raise ValidationFailed(
            "The file contains no extractable text.", code="no_text", param="file"
        )
    return ParsedDocument(source=source, content_type=kind, pages=pages, labels=labels)


def _pdf_document(
    source: str,
    data: bytes,
    max_pages: int,
    budget: TextBudget | None,
    work: WorkBudget | None,
    cancellation: Cancellation | None,
    ocr: Ocr | None,
) -> ParsedDocument:
    """A PDF's pages, its scanned pages read by ``ocr`` when given, and its warnings."""
    run = OcrRun(ocr, cancellation) if ocr is not None else None
    pages, scans = _pdf_pages(data, max_pages, budget, work, cancellation, run)
    if run is not None:
        run.report(source)
    if not any(page and not page.isspace() for page in pages):  # no copy of a huge page
        why = (
            f"its pages are images, and OCR ({run.name}) read no text from them:"
            f" {run.reason or 'it found none'}"
            if run is not None and scans.unread
            else "a scanned PDF needs OCR first"
        )
        raise ValidationFailed(
            f"The file contains no extractable text ({why}).", code="no_text", param="file"
        )
    return ParsedDocument(source, PDF, pages, warnings=scans.warnings(run))


# what each structured format is called in messages, and what its pages are
_STRUCTURED = {
    DOCX: ("the Word document", "page"),
    PPTX: ("the presentation", "slide"),
    XLSX: ("the workbook", "sheet"),
    CSV: ("the CSV file", "page"),
    HTML: ("the HTML page", "page"),
}


def _structured_pages(
    data: bytes,
    kind: str,
    budget: TextBudget | None,
    work: WorkBudget | None,
    cancellation: Cancellation | None,
    limits: ArchiveLimits,
) -> tuple[list[str], list[Label]]:
    """The pages and labels of an Office file, a CSV file or an HTML page, read within
    ``budget`` (its total) and ``work`` (its CPU seconds)."""
    what, unit = _STRUCTURED[kind]
    pages = Pages(what, unit, budget, cancellation)
    check = cancellation.check if cancellation is not None else None
    with within_cpu(work.cpu_seconds if work is not None else None, what):
        if kind == CSV:
            from agentcore.knowledge.ingest._tables import csv_pages

            csv_pages(decode_text(data), pages)
        elif kind == HTML:
            from agentcore.knowledge.ingest._markup import html_pages

            html_pages(data, pages)
        else:
            from agentcore.knowledge.ingest import _office

            opened = open_archive(data, limits)
            if opened is None:  # detected as one, so readable as a ZIP a moment ago
                raise ValidationFailed(
                    "The file is not a readable archive.", code="invalid_file", param="file"
                )
            with opened:
                verify_archive(opened, limits, check, workbook=kind == XLSX)
            read = {DOCX: _office.docx_pages, PPTX: _office.pptx_pages, XLSX: _office.xlsx_pages}
            read[kind](data, pages)
    return pages.finish()


def check_upload(
    data: bytes,
    filename: str,
    content_type: str | None,
    *,
    max_bytes: int,
    archive: ArchiveLimits = DEFAULT_LIMITS,
) -> tuple[str, str]:
    """The cheap checks of ``parse_document``: ``(source, canonical type)`` or its error.

    Size, emptiness and type only, without decoding or parsing (an Office file's ZIP
    directory is read, and its declared sizes checked against ``archive``): what an
    upload queued for background ingestion is checked for before it is accepted.
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
    return source, detect_type(data, source, content_type, archive)


def check_text(source: str, text: str) -> None:
    """The checks of ``parse_text``: a non-blank source and text."""
    if not source.strip():
        raise ValidationFailed("source must not be blank.", param="source")
    if not text.strip():
        raise ValidationFailed("text must not be blank.", code="no_text", param="text")


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


def _text_pages(text: str, kind: str) -> list[str]:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if kind == PLAIN and "\f" in text:
        return text.split("\f")
    return [text.replace("\f", "\n")]


class _Stop(BaseException):  # noqa: N818 - unwinds pypdf, like KeyboardInterrupt
    """Raised from pypdf's visitors to stop reading a page. A ``BaseException``: pypdf
    catches ``Exception`` around a form XObject (and logs it), which would swallow it."""


class _OverBudget(_Stop):
    """A page's text passed the text budget (``per_page``), or the document's did."""

    def __init__(self, per_page: bool) -> None:
        super().__init__()
        self.per_page = per_page


class _TooComplex(_Stop):
    """A page draws more than ``WorkBudget`` allows: ``what`` says which count."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def _pdf_pages(
    data: bytes,
    max_pages: int,
    budget: TextBudget | None,
    work: WorkBudget | None,
    cancellation: Cancellation | None,
    ocr: OcrRun | None,
) -> tuple[list[str], ScannedPages]:
    cpu = CpuBudget(work.cpu_seconds if work is not None else float("inf"))
    pages: list[str] = []  # read so far: the page being read is the next one
    scans = ScannedPages()
    try:
        with cpu, _folded_pypdf_warnings():
            reader = _open_pdf(data, max_pages)
            text_of = _PageReader(budget, work, cpu)
            for number in range(len(reader.pages)):
                if cancellation is not None:
                    cancellation.check()
                cpu.check()
                corrupt = ValidationFailed(
                    f"Page {number + 1} of the PDF could not be read (corrupt content).",
                    code="invalid_pdf",
                    param="file",
                )
                with _reading(corrupt):  # a page object of a broken file raises too
                    page = reader.pages[number]
                    text = clean_pdf_text(text_of.text(page))
                    if not text.strip() and text_of.scanned(page):
                        if ocr is not None:
                            text = clean_pdf_text(text_of.read_images(page, ocr))
                        scans.add(number + 1, read=bool(text.strip()))
                    pages.append(text)
            return pages, scans
    except (_Stop, BudgetSpent) as stop:
        raise _refusal(stop, len(pages) + 1, budget, work, cpu) from None


def _open_pdf(data: bytes, max_pages: int) -> Any:
    """A ``PdfReader`` of ``data`` (opened with the empty password if it is encrypted
    with one), or the upload's error: unreadable, encrypted, or too many pages."""
    # Imported here: a host that never ingests PDFs does not pay for pypdf.
    from pypdf import PasswordType, PdfReader

    invalid = ValidationFailed(
        "The file is not a readable PDF (corrupt or truncated).",
        code="invalid_pdf",
        param="file",
    )
    with _reading(invalid):
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
    with _reading(invalid):
        count = len(reader.pages)
    if count > max_pages:
        raise PayloadTooLarge(
            f"The PDF has {count} pages; the limit is {max_pages}.",
            code="too_many_pages",
            param="file",
        )
    return reader


@contextlib.contextmanager
def _reading(unreadable: ValidationFailed) -> Iterator[None]:
    """pypdf's failures as the upload's errors (``reading``), its own bounds a 413
    (``too_large``)."""
    from pypdf.errors import LimitReachedError

    with reading(unreadable):
        try:
            yield
        except LimitReachedError:
            # pypdf's bounds (tokens per stream, objects, ...): a size limit, not corruption
            raise PayloadTooLarge(
                "The PDF holds more than the parser reads (too many operators or objects in"
                " a stream).",
                code="too_large",
                param="file",
            ) from None


def _refusal(
    stop: _Stop | BudgetSpent,
    page: int,
    budget: TextBudget | None,
    work: WorkBudget | None,
    cpu: CpuBudget,
) -> PayloadTooLarge:
    """The 413 for a read stopped on ``page`` by one of its budgets."""
    if isinstance(stop, _OverBudget):
        assert budget is not None
        return PayloadTooLarge(
            f"Page {page} of the PDF extracts to more than {budget.page_chars:,} characters"
            " of text, the limit for one page."
            if stop.per_page
            else f"The PDF extracts to more than {budget.total_chars:,} characters of text"
            f" by page {page}, more than one document may hold.",
            code="too_large",
            param="file",
        )
    assert work is not None
    if isinstance(stop, _TooComplex):
        operators = stop.what == "operators"
        limit = work.page_operators if operators else work.page_xobjects
        setting = "max_pdf_page_operators" if operators else "max_pdf_page_xobjects"
        noun = "content-stream operators" if operators else "XObject invocations"
        return _too_complex(f"Page {page} of the PDF has more than {limit:,} {noun} ({setting}).")
    if isinstance(stop, BudgetSpent) and cpu.reason(stop) == "page":
        return _too_complex(
            f"Reading page {page} of the PDF took more than {work.page_cpu_seconds:g} s of"
            " CPU time (ingest_page_cpu_seconds)."
        )
    return _too_complex(
        f"Reading the PDF took more than {work.cpu_seconds:.1f} s of CPU time by page {page}"
        " (ingest_cpu_seconds, ingest_cpu_seconds_per_mib)."
    )


def _too_complex(detail: str) -> PayloadTooLarge:
    return PayloadTooLarge(
        detail + " It is too complex to read; simplify it (print it to a new PDF) or split it.",
        code="too_complex",
        param="file",
    )


# Operators that can put text on a page: text shown, or an XObject (a form may hold text).
# A content stream without any is not parsed at all, as pypdf does when nothing visits.
_TEXT_OPERATOR = re.compile(rb"T[jJ]|Do|['\"]")
# An XObject drawn (an image, or a form): a blank page without one shows no scan.
_DRAW_OPERATOR = re.compile(rb"Do")
# XObjects looked at for images on a blank page, when no work budget says how many
_XOBJECTS = 1_000
# An operator: one to three regular characters starting with a letter or a quote, with a
# delimiter or whitespace on both sides; strings are matched too, to be skipped (the
# words in them are no operators). Counted on the raw stream before pypdf parses it, so a
# page of a million operators costs one regular-expression scan, not seconds of parsing.
_OPERATOR = re.compile(
    rb"\((?:[^()\\]|\\.)*\)"  # a string (without nested parentheses)
    rb"|(?<![^\x00\t\n\x0c\r \]\)>])([A-Za-z'\"][A-Za-z0-9*'\"]{0,2})(?![^\x00\t\n\x0c\r (/<\[%])"
)
_CHECK_EVERY = 1024  # operators between two checks of the CPU budget in the visitor


def _count_operators(data: bytes, limit: int) -> None:
    """``_TooComplex`` when the content stream ``data`` holds more than ``limit``
    operators."""
    operators = 0
    for token in _OPERATOR.finditer(data):
        if token.lastindex:  # an operator, not a string
            operators += 1
            if operators > limit:
                raise _TooComplex("operators")


class _PageReader:
    """Reads pages' text within the text budget and the work budget.

    A content stream shared by several pages (a crafted file's thousands of pages can
    all show one) is decoded and counted once.
    """

    def __init__(self, budget: TextBudget | None, work: WorkBudget | None, cpu: CpuBudget) -> None:
        self.budget = budget
        self.work = work
        self.cpu = cpu
        self.total = 0  # characters the pages read so far extracted to
        # content -> whether it may show text, and whether it draws an XObject
        self._streams: dict[tuple[int, ...], tuple[bool, bool]] = {}

    def text(self, page: Any) -> str:
        """One page's raw text; ``_Stop`` as soon as it passes a budget."""
        work = self.work
        if work is None:
            raw = self._extract(page)
        elif not self._may_hold_text(page, work):
            raw = ""
        else:
            with self.cpu.part(work.page_cpu_seconds, "page"):
                raw = self._extract(page)
        self.total += len(raw)
        return raw

    def scanned(self, page: Any) -> bool:
        """Whether ``page``, which extracted to no text, draws an image: its content
        invokes an XObject (known from ``text``, which scanned it) and its resources hold
        an image, directly or in a form. Nothing is decoded."""
        if not self._content(page, self.work)[1]:
            return False
        return holds_images(page, _XOBJECTS if self.work is None else self.work.page_xobjects)

    def read_images(self, page: Any, ocr: OcrRun) -> str:
        """A scanned page's text as ``ocr`` reads it from its images, counted against
        the text budget (``_Stop`` past it). Decoding them counts against the file's CPU
        budget, not a page's: images are bounded in size (``MAX_IMAGE_PIXELS``), and
        the first decode of a process pays for importing Pillow."""
        limit = _XOBJECTS if self.work is None else self.work.page_xobjects
        raw = ocr.read(page, limit)
        if self.budget is not None:
            per_page = self.budget.page_chars <= self.budget.total_chars - self.total
            if len(raw) > min(self.budget.page_chars, self.budget.total_chars - self.total):
                raise _OverBudget(per_page)
        self.total += len(raw)
        return raw

    def _may_hold_text(self, page: Any, work: WorkBudget) -> bool:
        """Whether ``page``'s content can show text; ``_TooComplex`` when it has more
        operators than ``work`` allows."""
        return self._content(page, work)[0]

    def _content(self, page: Any, work: WorkBudget | None) -> tuple[bool, bool]:
        """Whether ``page``'s content may show text, and whether it draws an XObject
        (each stream scanned once); ``_TooComplex`` when it has more operators than
        ``work`` allows (``None``: any number)."""
        contents = page.get("/Contents")
        if contents is None:
            return False, False
        streams = contents.get_object()
        parts = list(streams) if isinstance(streams, list) else [contents]
        key = tuple(id(part.get_object()) for part in parts)
        known = self._streams.get(key)
        if known is not None:
            return known
        data = b"\n".join(part.get_object().get_data() for part in parts)
        if work is not None:
            _count_operators(data, work.page_operators)
        shows = _TEXT_OPERATOR.search(data) is not None
        self._streams[key] = known = (shows, shows and _DRAW_OPERATOR.search(data) is not None)
        return known

    def _extract(self, page: Any) -> str:
        budget, work = self.budget, self.work
        if budget is None and work is None:
            return str(page.extract_text())
        visitors: dict[str, Any] = {}
        if budget is not None:
            per_page = budget.page_chars <= budget.total_chars - self.total
            limit = budget.page_chars if per_page else budget.total_chars - self.total
            seen = 0

            def count_text(text: str, *_: Any) -> None:
                nonlocal seen
                seen += len(text)
                if seen > limit:
                    raise _OverBudget(per_page)

            visitors["visitor_text"] = count_text
        if work is not None:
            operators = xobjects = 0
            cpu = self.cpu

            def count_operator(operator: bytes, *_: Any) -> None:
                nonlocal operators, xobjects
                operators += 1
                if operators > work.page_operators:  # forms' operators count too
                    raise _TooComplex("operators")
                if operator == b"Do":
                    xobjects += 1
                    if xobjects > work.page_xobjects:
                        raise _TooComplex("xobjects")
                if operators % _CHECK_EVERY == 0:
                    cpu.check()  # where the thread's CPU clock cannot be watched

            visitors["visitor_operand_before"] = count_operator
        return str(page.extract_text(**visitors))


class _PypdfTally(logging.Filter):
    """Holds back pypdf's log records on a thread that is reading a file, counting them
    (and keeping the first), so a file that makes pypdf warn on each of 5,000 pages
    logs one line, not 5,000. Other threads' records pass untouched."""

    def __init__(self) -> None:
        super().__init__()
        self.local = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        tally: list[Any] | None = getattr(self.local, "tally", None)
        if tally is None:
            return True
        if tally[0] == 0:
            tally[1] = record.getMessage()
        tally[0] += 1
        return False


_TALLY = _PypdfTally()  # holds nothing between reads: its tallies are per thread, per read
_TALLIED: set[str] = set()  # pypdf loggers the tally is on


def preload() -> None:
    """Import the PDF reader now, so the first PDF read does not pay for it (about 50 ms:
    a worker process calls this before it reports ready)."""
    import pypdf  # noqa: F401


@contextlib.contextmanager
def _folded_pypdf_warnings() -> Iterator[None]:
    """pypdf's warnings while reading one file, folded into one line of our log."""
    import pypdf  # noqa: F401 - its modules (and their loggers) exist from here on

    for name in [n for n in list(sys.modules) if n.split(".", 1)[0] == "pypdf"]:
        if name not in _TALLIED:  # pypdf logs to its modules' loggers, never propagated up
            logging.getLogger(name).addFilter(_TALLY)
            _TALLIED.add(name)
    tally: list[Any] = [0, ""]
    _TALLY.local.tally = tally
    try:
        yield
    finally:
        _TALLY.local.tally = None
        if tally[0]:
            log.warning(
                "reading a PDF: the parser warned %d time(s), first: %s", tally[0], tally[1]
            )


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


def _is_heading(line: str, following: str, full: int) -> bool:
    """Whether ``line``, which starts a paragraph, is a heading over ``following``: at
    most half a full line, no punctuation ending it or joining it to the next, and a
    capital letter (or digit) starting both."""
    return (
        len(line) <= full / 2
        and not line.endswith((*_TERMINAL, ",", ";", "-", "\u2013", "\u2014"))
        and (line[0].isupper() or line[0].isdigit())
        and following[:1].isupper()
    )


def clean_pdf_text(raw: str) -> str:
    """Tidy one page of text extracted from a PDF.

    Joins words hyphenated across line breaks ("infor-\\nmation"), folds runs of
    spaces, and rejoins wrapped lines into paragraphs separated by a blank line. A
    paragraph ends at a blank line or after a short line ending in terminal
    punctuation (the last line of a justified or ragged paragraph). A heading is a
    paragraph of its own, marked ``# `` as Word, PowerPoint and HTML headings are: a
    short line with no terminal punctuation that starts a paragraph, followed by a line
    starting with a capital letter ("Leaving Acme" above "Give four weeks of notice"),
    so that it is not read as the first words of the sentence below it.
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
    for line, following in zip(lines, [*lines[1:], ""], strict=True):
        if not line:
            if current:
                paragraphs.append(" ".join(current))
                current = []
            continue
        current.append(line)
        short = len(line) < 0.75 * full
        if short and line.endswith(_TERMINAL):
            paragraphs.append(" ".join(current))
            current = []
        elif short and len(current) == 1 and _is_heading(line, following, full):
            paragraphs.append("# " + line)  # marked as the other formats mark theirs
            current = []
    if current:
        paragraphs.append(" ".join(current))
    return "\n\n".join(paragraphs)
