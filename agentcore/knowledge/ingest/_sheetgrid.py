"""The cells a workbook's parts span, measured before python-calamine reads a sheet.

calamine makes a sheet one dense grid from its first cell to its last: a 5 KB file with
a value in A1 and one in XFD1048576 asks for 17 billion cells (550 GB), and a failed
allocation aborts the process, the server's own when ingestion runs on its threads. So
``_zipguard.verify_archive`` measures every part of a workbook as it inflates it (any
part may be named a sheet by the workbook's relationships), and a part whose cells span
more rows x columns, or are more, than ``ArchiveLimits.sheet_cells`` is refused.

The measure never falls short of what calamine builds (it places a cell at its ``r``
reference, or without one right after the cell before it in the row, on the row after
the row before; only cells between the first ``<sheetData>`` and its end count; a row
or column number wraps at 2**32 as calamine's does). Three readings, the first that
applies:

- Excel, LibreOffice, openpyxl and XlsxWriter write each cell ``<c r="B7" s="1">``:
  when every ``<c`` of a part is written so, its grid is the span of those references,
  read with a regular expression per 64 KiB (0.7 s of CPU for 800,000 cells, where
  calamine takes 0.9 s to read them).
- Otherwise (cells without ``r``, as the format allows; prefixed tags), a well-formed
  part is parsed again with expat and placed cell by cell as calamine does.
- A part expat refuses (an image, or XML calamine would read more leniently) is
  bounded by its tokens: the largest row and column any ``r="..."`` in it names, plus
  every row and cell tag, from A1. Far too large for a sheet, small for an image.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO
from xml.parsers import expat

from agentcore.knowledge.ingest._extraction import invalid_file

__all__ = ["QuickGrid", "SheetGrid", "exact_grid"]

_U32 = 2**32
_READ_BYTES = 64 * 1024
_CARRY_BYTES = 1024 * 1024  # a tag this long ends the quick reading
# a cell tag as the common writers write it: its reference first, then attributes whose
# names do not start with ``r`` (so no second ``r``), double-quoted; any other ``<c``
# (matched by the second branch, its groups empty) ends the quick reading
_CELL = re.compile(
    rb'<c(?: r="([A-Z]{1,3})([0-9]{1,7})"(?: [A-Za-qs-z_:][\w.:-]*+="[^"<]*+")*+/?>|[\s/>])'
)
_PREFIXED_CELL = re.compile(rb":c[\s/>]")
# every token calamine might take for a row or cell tag, or for a reference
_ROW_TAG = re.compile(rb"</?(?:[^\s/>]*:)?row[\s/>]")
_CELL_TAG = re.compile(rb"<(?:[^\s/>]*:)?c[\s/>]")
_REFERENCE = re.compile(rb"""r\s*=\s*["']([A-Za-z]*)([0-9]+)["']""")
_REFERENCE_VALUE = re.compile(rb"([A-Za-z]*)([0-9]+)")


@dataclass
class SheetGrid:
    """The rows and columns a part's cells span (0-based, inclusive) and their count."""

    first_row: int = _U32
    last_row: int = -1
    first_column: int = _U32
    last_column: int = -1
    cells: int = 0

    @property
    def size(self) -> int:
        """The cells calamine's grid would hold, or the cells written if more."""
        if self.last_row < 0:
            return self.cells
        area = (self.last_row - self.first_row + 1) * (self.last_column - self.first_column + 1)
        return max(area, self.cells)

    def add(self, row: int, column: int) -> None:
        self.cells += 1
        self.first_row = min(self.first_row, row)
        self.last_row = max(self.last_row, row)
        self.first_column = min(self.first_column, column)
        self.last_column = max(self.last_column, column)


class QuickGrid:
    """The grid of a part whose every cell tag is ``<c r="REF" ...>``, fed as it
    inflates; ``result()`` is ``None`` for a part written otherwise."""

    def __init__(self) -> None:
        self._grid = SheetGrid()
        self._carry = b""
        self._usual = True

    def feed(self, chunk: bytes) -> None:
        if not self._usual:
            return
        text = self._carry + chunk
        # a tag cut at the chunk's end waits for the rest (a match holds no ``<`` after
        # its first byte, so none ends past the last ``<``)
        cut = text.rfind(b"<")
        if cut >= 0 and text.find(b">", cut) < 0:
            text, self._carry = text[:cut], text[cut:]
            if len(self._carry) > _CARRY_BYTES:
                self._usual = False
                return
        else:
            self._carry = b""
        self._read(text)

    def result(self) -> SheetGrid | None:
        if self._usual and self._carry:
            self._read(self._carry)
            self._carry = b""
        return self._grid if self._usual else None

    def _read(self, text: bytes) -> None:
        if _PREFIXED_CELL.search(text):
            self._usual = False
            return
        found = _CELL.findall(text)
        if not found:
            return
        letters, digits = zip(*found, strict=True)
        if b"" in digits:
            self._usual = False
            return
        rows = [int(number) - 1 for number in set(digits)]  # 7 digits: no wrapping
        columns = [_column(name) for name in set(letters)]
        grid = self._grid
        grid.cells += len(found)
        grid.first_row = min(grid.first_row, min(rows))
        grid.last_row = max(grid.last_row, max(rows))
        grid.first_column = min(grid.first_column, min(columns))
        grid.last_column = max(grid.last_column, max(columns))


def exact_grid(open_part: Callable[[], IO[bytes]], check: Callable[[], None] | None) -> SheetGrid:
    """The grid of a part the quick reading could not measure, read again through
    ``open_part`` (twice if it is not well-formed XML); ``check`` runs between reads."""
    try:
        with open_part() as stream:
            return _placed(stream, check)
    except expat.ExpatError:
        with open_part() as stream:
            return _bounded(stream.read())


def _column(letters: bytes) -> int:
    """A reference's column, 0-based, as calamine computes it (wrapping at 2**32)."""
    number = 0
    for letter in letters.upper():
        number = number * 26 + letter - 64
    return number % _U32 - 1


def _row(digits: bytes) -> int:
    return int(digits) % _U32 - 1


def _reference(value: str | None) -> tuple[int, int] | None:
    """The 0-based row and column of an ``r`` attribute's value, ``None`` for one
    calamine cannot read (it then fails the sheet)."""
    found = _REFERENCE_VALUE.fullmatch(value.encode()) if value else None
    return (_row(found.group(2)), _column(found.group(1))) if found else None


def _placed(stream: IO[bytes], check: Callable[[], None] | None) -> SheetGrid:
    """Every cell of a well-formed part placed as calamine places it (``ExpatError``
    for a part that is not well-formed)."""
    grid = SheetGrid()
    # between the first <sheetData> and its end; the next row and column; how deep in
    # a cell (calamine reads a cell's value whole)
    reading, done, row, column, inside = False, False, 0, 0, 0

    def start(name: str, attributes: dict[str, str]) -> None:
        nonlocal reading, row, column, inside
        if done:
            return
        if inside:
            inside += 1
            return
        local = name.rpartition(":")[2]
        if not reading:
            reading = local == "sheetData"
        elif local == "row":
            place = _reference(attributes.get("r"))
            if place is not None:
                row = place[0]
        elif local == "c":
            place = _reference(attributes.get("r"))
            at_row, at_column = place if place is not None else (row, column)
            grid.add(at_row, at_column)
            column, inside = at_column + 1, 1

    def end(name: str) -> None:
        nonlocal done, row, column, inside
        if inside:
            inside -= 1
            return
        if not reading or done:
            return
        local = name.rpartition(":")[2]
        if local == "row":
            row, column = row + 1, 0
        elif local == "sheetData":
            done = True

    def refuse(*_: object) -> None:
        raise invalid_file("The file's part declares a DTD, which Office files never do.")

    parser = expat.ParserCreate()
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.StartDoctypeDeclHandler = refuse
    while chunk := stream.read(_READ_BYTES):
        parser.Parse(chunk, False)
        if check is not None:
            check()
    parser.Parse(b"", True)
    return grid


def _bounded(text: bytes) -> SheetGrid:
    """A bound on any grid calamine could read from ``text``, however it is written:
    from A1 to the largest row and column any reference in it names, plus a row per
    row tag and a column per cell tag."""
    rows = _ROW_TAG.subn(b"", text)[1]
    cells = _CELL_TAG.subn(b"", text)[1]
    last_row = last_column = 0
    for found in _REFERENCE.finditer(text):
        last_row = max(last_row, _row(found.group(2)))
        last_column = max(last_column, _column(found.group(1)))
    return SheetGrid(0, last_row + rows, 0, last_column + cells, cells)
