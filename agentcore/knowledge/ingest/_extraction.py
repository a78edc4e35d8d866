"""Extraction: the page texts and labels a structured file is read into, within its budgets.

Every format but PDF and plain text writes through ``Pages``: paragraphs and table rows
go onto the current page, ``label`` marks where a named part starts (``Slide 3``, a
heading), and the characters written are counted against the text budget as they are
written, so a file that expands past it (a sheet of millions of cells) stops there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentcore.errors import AgentCoreError, PayloadTooLarge, ValidationFailed
from agentcore.knowledge._chunking import Label
from agentcore.knowledge.ingest._cpu_budget import BudgetSpent, CpuBudget

if TYPE_CHECKING:
    from agentcore._cancellation import Cancellation

__all__ = ["Pages", "TextBudget", "decode_text", "fold_spaces", "invalid_file", "within_cpu"]

_CHECK_EVERY = 256  # writes between two checks of the cancellation


@dataclass(frozen=True)
class TextBudget:
    """How much text a file may extract to: per page and in all, in characters.

    Counted as extraction goes (a crafted file can make every page extract to megabytes
    of text from a few bytes: thousands of pages sharing one compressed content stream),
    so a file over budget stops within one page's budget of work, not after all of it.
    ``page_chars`` bounds a PDF's pages; other formats' pages (a sheet, a slide, a Word
    document without page breaks) are bounded by ``total_chars`` alone.
    """

    page_chars: int
    total_chars: int


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


def fold_spaces(text: str) -> str:
    """``text`` on one line: each run of whitespace (line breaks too) one space, trimmed."""
    return " ".join(text.split())  # str.split's whitespace is re's \s: one C pass


def invalid_file(detail: str) -> ValidationFailed:
    """The 422 of a file that cannot be read as the format it is."""
    return ValidationFailed(detail, code="invalid_file", param="file")


@contextlib.contextmanager
def reading(unreadable: ValidationFailed) -> Iterator[None]:
    """A parser's failures as ``unreadable`` (a corrupt or truncated file). A MemoryError
    (the worker's memory limit, not a corrupt file: the worker is replaced and reports a
    413) and our own errors (a budget's, a refusal's) pass."""
    try:
        yield
    except (MemoryError, AgentCoreError):
        raise
    except Exception:
        raise unreadable from None


@contextlib.contextmanager
def within_cpu(seconds: float | None, what: str) -> Iterator[None]:
    """Reading ``what`` (``the workbook``) on this thread within ``seconds`` of its CPU
    time (``None``: no limit); past it, 413 ``too_complex``."""
    if seconds is None:
        yield
        return
    try:
        with CpuBudget(seconds):
            yield
    except BudgetSpent:
        raise PayloadTooLarge(
            f"Reading {what} took more than {seconds:.1f} s of CPU time"
            " (ingest_cpu_seconds, ingest_cpu_seconds_per_mib). It is too complex to read;"
            " split it.",
            code="too_complex",
            param="file",
        ) from None


class Pages:
    """The pages of a file being read, its labels, and the budget they are written within.

    :param what: the file as messages name it (``the workbook``).
    :param unit: what one page of it is (``sheet``, ``slide``, ``page``).
    :param budget: its ``total_chars`` bound all pages together (``None``: no limit).
    :param cancellation: checked every few writes.
    """

    def __init__(
        self,
        what: str,
        unit: str,
        budget: TextBudget | None = None,
        cancellation: Cancellation | None = None,
    ) -> None:
        self.what = what
        self.unit = unit
        self._limit = budget.total_chars if budget is not None else None
        self._cancellation = cancellation
        self._done: list[str] = []
        self._labels: list[Label] = []
        self._parts: list[str] = []
        self._length = 0  # of the current page
        self._total = 0  # of every page
        self._has_text = False  # the current page holds more than whitespace
        self._in_lines = False  # the last write was a line (a table row, a list item)
        self._writes = 0
        self._next_check = _CHECK_EVERY  # writes at the next check of the cancellation

    @property
    def number(self) -> int:
        """The current page's number (1-based)."""
        return len(self._done) + 1

    def next_page(self, *, keep_empty: bool = True) -> None:
        """Start the next page; with ``keep_empty=False`` an empty current page is kept
        as the one to write on (two page-break marks in a row make one break)."""
        if not keep_empty and not self._has_text:
            return
        self._done.append("".join(self._parts))
        self._parts, self._length, self._has_text, self._in_lines = [], 0, False, False

    def label(self, text: str) -> None:
        """Name the part of the file that starts with the next write."""
        text = fold_spaces(text)
        if text:
            self._labels.append(Label(self.number, self._length, text[:200]))

    def paragraph(self, text: str) -> None:
        """Write ``text`` as a paragraph of its own (a blank line before it)."""
        self._write(text, "\n\n")
        self._in_lines = False

    def line(self, text: str) -> None:
        """Write ``text`` as a line: right under the line before it, if that was one,
        else as a new paragraph (a table's rows, a list's items)."""
        self._write(text, "\n" if self._in_lines else "\n\n")
        self._in_lines = True

    def lines(self, texts: list[str], joined: str | None = None) -> None:
        """Write each of ``texts`` as ``line`` does, in one write (``joined``: ``texts``
        already joined by newlines)."""
        text = "\n".join(texts) if joined is None else joined
        self._write(text, "\n" if self._in_lines else "\n\n", len(texts))
        self._in_lines = True

    def end_lines(self) -> None:
        """End a run of lines: the next line starts a paragraph (a table after a list)."""
        self._in_lines = False

    def _write(self, text: str, separator: str, writes: int = 1) -> None:
        if not text or text.isspace():
            return
        if self._parts:
            text = separator + text
        self._parts.append(text)
        self._length += len(text)
        self._total += len(text)
        self._has_text = True
        if self._limit is not None and self._total > self._limit:
            raise PayloadTooLarge(
                f"{self.what.capitalize()} extracts to more than {self._limit:,} characters"
                f" of text by {self.unit} {self.number}, more than one document may hold.",
                code="too_large",
                param="file",
            )
        self._writes += writes
        if self._cancellation is not None and self._writes >= self._next_check:
            self._next_check = self._writes + _CHECK_EVERY
            self._cancellation.check()

    def finish(self) -> tuple[list[str], list[Label]]:
        """Every page's text (the current one last) and the labels."""
        return [*self._done, "".join(self._parts)], self._labels
