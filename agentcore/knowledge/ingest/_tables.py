"""Tables as text: each row written with its column names, and CSV files read so.

A row becomes one line, ``- Manager: Ana; Site: Porto``: the chunker keeps a line whole
(a list item is a sentence of its own) and a chunk cut anywhere in a long table still
says what each of its values is, where a header written once would be chunks away.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Mapping, Sequence
from itertools import islice
from typing import Any

import numpy as np

from agentcore.knowledge.ingest._extraction import Pages, fold_spaces, invalid_file

__all__ = ["Rows", "csv_pages"]

_TITLE_ROWS = 5  # one-value rows above a table taken as its titles before a header
_DELIMITERS = ",;\t|"
_TEMPLATES = 64  # the most value-type patterns a table keeps a line template for
_BATCH = 256  # rows written onto the page at once
_TEXT_ONLY: Mapping[type, str] = {str: "s"}


def _clean(line: str) -> bool:
    """Whether a row's line, formatted from its values as they are, is what folding each
    value and leaving out the empty ones would write: no whitespace but single spaces
    (every other whitespace character is unprintable), no value blank or padded (``Name:
    ;``, ``Name:  Ana``, ``Ana ;``, a trailing space)."""
    return line.isprintable() and "  " not in line and " ;" not in line and line[-1] != " "


def _clean_run(lines: list[str], joined: str) -> bool:
    """Whether every one of ``lines`` is ``_clean``; ``joined`` is them joined by
    newlines. ASCII text is read at once with numpy: its control bytes are only the
    newlines between lines (a byte ``b`` is one when ``(b + 1) & 127 < 33``: below 32,
    or 127), and no space comes before a space, a ``;``, a newline or the end."""
    if not joined.isascii():
        return all(map(_clean, lines))
    codes = np.frombuffer(joined.encode("ascii"), np.uint8)
    if np.count_nonzero(((codes + np.uint8(1)) & 127) < 33) != len(lines) - 1:
        return False
    after = codes[1:]
    spaced = (codes[:-1] == _SPACE) & (
        (after == _SPACE) | (after == _SEMICOLON) | (after == _NEWLINE)
    )
    return not spaced.any() and codes[-1] != _SPACE


_SPACE, _SEMICOLON, _NEWLINE = b" ;\n"


class Rows:
    """Writes a table's rows, each with its column names, onto ``pages``.

    The header is the first row with two values or more; one-value rows above it (a
    sheet's title, a note) are written as plain lines. A table whose rows never have
    two values (a single column) takes its first row as the header. A blank header cell
    is named ``Column N``, counted from ``first_column`` (0: the first value is column 1;
    a sheet whose cells start in column C passes 2); empty values are left out of their
    row.

    A row under the header whose values' types all have a ``%`` conversion in ``specs``
    (``s`` for text only, by default; a sheet's numbers and dates too) is written with
    one ``%`` of a line template made once per pattern of types, and checked
    (``_clean``); any other row is written value by value. Rows reach the page
    ``_BATCH`` at a time (``Pages.lines``), and all of them by ``close``. ``add_many``
    writes a run of rows at once; ``as_text`` names, for such runs, a quicker way to
    write a type's values as their ``%s`` would (``date.isoformat`` for dates).
    """

    def __init__(
        self,
        pages: Pages,
        first_column: int = 0,
        specs: Mapping[type, str] = _TEXT_ONLY,
        as_text: Mapping[type, Callable[[Any], str]] | None = None,
    ) -> None:
        self._pages = pages
        self._first_column = first_column
        self._specs = specs
        self._as_text = as_text or {}
        pages.end_lines()
        self._header: list[str] | None = None
        self._names: list[str] = []  # each column's name in a row: the header's, or Column N
        self._waiting: list[list[str]] = []  # one-value rows before the header
        self._rows = 0  # rows written under the header
        self._templates: dict[tuple[type, ...], str | None] = {}
        self._lines: list[str] = []  # rows not yet on the page

    def add(self, values: Sequence[Any], text: Callable[[Any], str] = str) -> None:
        """One row's values in column order: text, or values ``text`` writes as text."""
        if self._header is not None:
            types = tuple(map(type, values))
            try:
                template = self._templates[types]
            except KeyError:
                template = self._template(types)
            if template is not None:
                line = template % tuple(values)
                if _clean(line):
                    self._lines.append(line)
                    if len(self._lines) >= _BATCH:
                        self._flush()
                    return
        row = [fold_spaces(value if type(value) is str else text(value)) for value in values]
        filled = len(row) - row.count("")
        if not filled:
            return
        if self._header is not None:
            self._write(row)
        elif filled >= 2 or len(self._waiting) >= _TITLE_ROWS:
            if filled >= 2:
                for title in self._waiting:
                    self._pages.line(" ".join(value for value in title if value))
                self._waiting = []
                self._header = row
            else:
                self._start_single_column()
                self._write(row)
        else:
            self._waiting.append(row)

    def add_many(self, rows: Sequence[Sequence[Any]], text: Callable[[Any], str] = str) -> None:
        """Rows as ``add`` writes them, in order, with the same lines: a run of rows under
        the header, of one width, whose every column holds values of one type with a
        conversion, is written with one template at once and checked as a whole (a
        spreadsheet's usual rows: no Python step per row); any other run row by row."""
        start = 0
        while self._header is None and start < len(rows):
            self.add(rows[start], text)
            start += 1
        run = rows[start:] if start else rows
        written = self._run_lines(run)
        if written is None:
            for values in run:
                self.add(values, text)
            return
        lines, joined = written
        self._flush()
        self._pages.lines(lines, joined)
        self._rows += len(lines)

    def _run_lines(self, rows: Sequence[Sequence[Any]]) -> tuple[list[str], str] | None:
        """The lines of ``rows`` under the header written with one template, and them
        joined; ``None`` unless that template fits every row (rows of one width, each
        column of values of one type with a conversion) and every line is ``_clean``."""
        if self._header is None or not rows:
            return None
        try:
            columns: list[Sequence[Any]] = list(zip(*rows, strict=True))
        except ValueError:  # rows of two widths
            return None
        types = []
        for column in columns:
            kinds = set(map(type, column))
            if len(kinds) != 1:
                return None
            types.append(kinds.pop())
        key = tuple(types)
        try:
            template = self._templates[key]
        except KeyError:
            template = self._template(key)
        if template is None:
            return None
        convert = self._as_text
        if any(kind in convert for kind in key):
            columns = [
                list(map(convert[kind], column)) if kind in convert else column
                for column, kind in zip(columns, key, strict=True)
            ]
        lines = list(map(template.__mod__, zip(*columns, strict=True)))
        joined = "\n".join(lines)
        # a blank or padded value, a line break: not as the template writes it
        return (lines, joined) if _clean_run(lines, joined) else None

    def close(self) -> None:
        """Write what is held back (the last rows; a table too short to find its header
        in)."""
        if self._header is None and self._waiting:
            self._start_single_column()
        self._flush()
        if self._header is not None and not self._rows:
            self._pages.line("; ".join(value for value in self._header if value))
        self._pages.end_lines()

    def _start_single_column(self) -> None:
        self._header, *rest = self._waiting
        self._waiting = []
        for row in rest:
            self._write(row)

    def _template(self, types: tuple[type, ...]) -> str | None:
        """The ``%`` line template of rows of values of ``types`` (kept for the next such
        row), or ``None`` when a type has no conversion."""
        specs = [self._specs.get(kind) for kind in types]
        names = self._names_of(len(types))
        template = None
        if types and None not in specs:
            fields = [
                f"{name.replace('%', '%%')}: %{spec}"
                for name, spec in zip(names, specs, strict=False)
            ]
            template = "- " + "; ".join(fields)
        if len(self._templates) < _TEMPLATES:
            self._templates[types] = template
        return template

    def _names_of(self, columns: int) -> list[str]:
        """The names of a row's first ``columns`` columns (named once per column, not
        once per cell)."""
        names = self._names
        if len(names) < columns:
            header = self._header or []
            names += [
                (header[column] if column < len(header) else "")
                or f"Column {self._first_column + column + 1}"
                for column in range(len(names), columns)
            ]
        return names

    def _write(self, row: list[str]) -> None:
        names = self._names_of(len(row))
        pairs = [f"{name}: {value}" for name, value in zip(names, row, strict=False) if value]
        self._lines.append("- " + "; ".join(pairs))
        if len(self._lines) >= _BATCH:
            self._flush()

    def _flush(self) -> None:
        if self._lines:
            self._pages.lines(self._lines)
            self._rows += len(self._lines)
            self._lines = []


def csv_pages(text: str, pages: Pages) -> None:
    """A CSV file's rows onto ``pages`` (one page), each with its header's names.

    The delimiter is the one of ``, ; TAB |`` the first line holds most of (a comma
    when it holds none): spreadsheets in many locales write semicolons.
    """
    first = text.split("\n", 1)[0]
    delimiter = max(_DELIMITERS, key=first.count) if any(d in first for d in _DELIMITERS) else ","
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    rows = Rows(pages)
    try:
        while batch := list(islice(reader, _BATCH)):
            rows.add_many(batch)
    except csv.Error as exc:
        raise invalid_file(
            f"The CSV file could not be read (line {reader.line_num}: {exc})."
        ) from None
    rows.close()
