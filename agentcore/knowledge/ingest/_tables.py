"""Tables as text: each row written with its column names, and CSV files read so.

A row becomes one line, ``- Manager: Ana; Site: Porto``: the chunker keeps a line whole
(a list item is a sentence of its own) and a chunk cut anywhere in a long table still
says what each of its values is, where a header written once would be chunks away.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence

from agentcore.knowledge.ingest._extraction import Pages, fold_spaces, invalid_file

__all__ = ["Rows", "csv_pages"]

_TITLE_ROWS = 5  # one-value rows above a table taken as its titles before a header
_DELIMITERS = ",;\t|"


class Rows:
    """Writes a table's rows, each with its column names, onto ``pages``.

    The header is the first row with two values or more; one-value rows above it (a
    sheet's title, a note) are written as plain lines. A table whose rows never have
    two values (a single column) takes its first row as the header. A blank header cell
    is named ``Column N``, counted from ``first_column`` (0: the first value is column 1;
    a sheet whose cells start in column C passes 2); empty values are left out of their
    row.
    """

    def __init__(self, pages: Pages, first_column: int = 0) -> None:
        self._pages = pages
        self._first_column = first_column
        pages.end_lines()
        self._header: list[str] | None = None
        self._names: list[str] = []  # each column's name in a row: the header's, or Column N
        self._waiting: list[list[str]] = []  # one-value rows before the header
        self._rows = 0  # rows written under the header

    def add(self, values: Sequence[str]) -> None:
        """One row's values, as text, in column order."""
        row = [fold_spaces(value) for value in values]
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

    def close(self) -> None:
        """Write what is held back (a table too short to find its header in)."""
        if self._header is None and self._waiting:
            self._start_single_column()
        if self._header is not None and not self._rows:
            self._pages.line("; ".join(value for value in self._header if value))
        self._pages.end_lines()

    def _start_single_column(self) -> None:
        self._header, *rest = self._waiting
        self._waiting = []
        for row in rest:
            self._write(row)

    def _write(self, row: list[str]) -> None:
        names = self._names
        if len(names) < len(row):  # named once per column, not once per cell
            header = self._header or []
            names += [
                (header[column] if column < len(header) else "")
                or f"Column {self._first_column + column + 1}"
                for column in range(len(names), len(row))
            ]
        pairs = [f"{name}: {value}" for name, value in zip(names, row, strict=False) if value]
        self._pages.line("- " + "; ".join(pairs))
        self._rows += 1


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
        for values in reader:
            rows.add(values)
    except csv.Error as exc:
        raise invalid_file(
            f"The CSV file could not be read (line {reader.line_num}: {exc})."
        ) from None
    rows.close()
