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
or column number wraps at 2**32 as calamine's does). Readings, cheapest first, each
used only when the one before cannot settle the part:

- ``QuickGrid``, as the part inflates: when every ``<c`` is written ``<c r="B7" ...>``
  (Excel, LibreOffice, openpyxl and XlsxWriter write cells so), a bound from the
  references' lengths alone: a reference of at most 5 digits and one letter places its
  cell within 99,999 rows and 26 columns. Pieces of the part are read with numpy (every
  ``<c`` found at once, then the bytes after each): about 45 ms for 400,000 cells, where
  calamine takes 240 ms to read them.
- A part whose bound passes the limit (a sheet of 100,000 rows or more, or of two-letter
  columns and 10,000 rows or more), or that is written otherwise, is inflated again and
  measured exactly, in turn:
  - every cell written so: the span of its references, read with a regular expression
    per 64 KiB (0.25 s of CPU for 400,000 cells);
  - otherwise (cells without ``r``, as the format allows; prefixed tags), a well-formed
    part parsed with expat and placed cell by cell as calamine does;
  - a part expat refuses (an image, or XML calamine would read more leniently) bounded
    by its tokens: the largest row and column any ``r="..."`` in it names, plus every
    row and cell tag, from A1. Far too large for a sheet, small for an image.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO
from xml.parsers import expat

import numpy as np
import numpy.typing as npt

from agentcore.knowledge.ingest._extraction import invalid_file

__all__ = [
    "PIECE_BYTES",
    "TAG_END",
    "Bytes",
    "Pieces",
    "Positions",
    "QuickGrid",
    "SheetGrid",
    "exact_grid",
]

_U32 = 2**32
_READ_BYTES = 64 * 1024
_CARRY_BYTES = 1024 * 1024  # this long without a "<": the reading gives up (a text, not a sheet)
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
# the quick bound reads each piece with numpy: the bytes it looks for, and classes of bytes
Bytes = npt.NDArray[np.uint8]
Positions = npt.NDArray[np.intp]
PIECE_BYTES = 128 * 1024  # larger pieces cost page faults in a fresh process
_AHEAD = 16  # bytes read after a "<": c r="XFD1048576 and one more
_LT, _EQ, _COLON, _C, _R = b"<=:cr"
TAG_END = np.zeros(256, bool)  # what may follow a tag's name (and the spaces between)
TAG_END[list(b" \t\n\r/>")] = True
_QUOTE = np.zeros(256, bool)
_QUOTE[list(b"\"'")] = True
_UPPER = np.zeros(256, bool)
_UPPER[list(range(ord("A"), ord("Z") + 1))] = True
_DIGIT = np.zeros(256, bool)
_DIGIT[list(range(ord("0"), ord("9") + 1))] = True


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


class Pieces:
    """A part fed as it inflates, read in pieces that end right before a ``<``: what
    follows the last ``<`` of a chunk waits for the next. So a match that starts with
    ``<``, or holds none, is never cut in two, even where a ``>`` inside an attribute's
    value would make a tag look closed. ``usual`` turns false, for good, once a piece is
    written otherwise than the reading expects (or a chunk holds no ``<`` for
    ``_CARRY_BYTES``). Chunks are gathered into pieces of at least ``piece_bytes`` (a
    reading whose cost is per piece as much as per byte asks for large ones)."""

    def __init__(self, piece_bytes: int = 0) -> None:
        self._carry = b""
        self._piece_bytes = piece_bytes
        self._chunks: list[bytes] = []
        self._gathered = 0
        self.usual = True

    def feed(self, chunk: bytes) -> None:
        if not self.usual:
            return
        if self._piece_bytes:
            self._chunks.append(chunk)
            self._gathered += len(chunk)
            if self._gathered < self._piece_bytes:
                return
            chunk, self._chunks, self._gathered = b"".join(self._chunks), [], 0
        self._split(chunk)

    def _split(self, chunk: bytes) -> None:
        text = self._carry + chunk
        end = text.rfind(b"<")
        if end < 0:  # no tag yet: all of it waits
            end = 0
        self._carry = text[end:]
        if len(self._carry) > _CARRY_BYTES:
            self.usual = False
            return
        if end:
            self._read(text, end)

    def finish(self) -> bool:
        """Read what is left; whether the whole part was usual."""
        if self._chunks and self.usual:
            self._split(b"".join(self._chunks))
        self._chunks = []
        if self.usual and self._carry:
            self._read(self._carry, len(self._carry))
            self._carry = b""
        return self.usual

    def _read(self, text: bytes, end: int) -> None:
        """Read ``text[:end]`` (a piece, passed whole to save a copy)."""
        raise NotImplementedError


class QuickGrid(Pieces):
    """A bound on the grid of a part whose every cell tag is ``<c r="REF" ...>``, from the
    lengths of its references, fed as it inflates; ``result()`` is ``None`` for a part
    written otherwise.

    Each piece (``PIECE_BYTES`` or more) is read at once with numpy: every ``<c`` found,
    the bytes after each cell tag's read (``r``, ``=``, a quote, one to three capitals,
    the digits), and every ``=`` checked for an ``r`` attribute after another one
    (calamine places a cell at its last ``r``).
    """

    def __init__(self) -> None:
        super().__init__(piece_bytes=PIECE_BYTES)
        self._cells = 0
        self._letters = 0  # the most letters of a reference
        self._digits = 0  # the most digits of a reference

    def result(self) -> SheetGrid | None:
        if not self.finish():
            return None
        if not self._cells:
            return SheetGrid()
        # from A1 to the last row and column references of these lengths can name
        last_column = sum(26**n for n in range(1, self._letters + 1)) - 1
        return SheetGrid(0, 10**self._digits - 2, 0, last_column, self._cells)

    def _read(self, text: bytes, end: int) -> None:
        data = np.frombuffer(text[: end + _AHEAD] + bytes(_AHEAD), np.uint8)
        head = data[:end]
        colons = np.flatnonzero(head == _COLON)
        if ((data[colons + 1] == _C) & TAG_END[data[colons + 2]]).any():
            self.usual = False  # a prefixed cell tag
            return
        tags = head == _LT
        tags &= data[1 : end + 1] == _C
        cells = np.flatnonzero(tags)
        cells = cells[TAG_END[data[cells + 2]]]
        if not cells.size:
            return
        opened = (data[cells + 3] == _R) & (data[cells + 4] == _EQ) & _QUOTE[data[cells + 5]]
        if not opened.all() or _later_r(data, head):
            self.usual = False
            return
        # one to three capitals, then one to seven digits
        fewest, most = _runs(data, cells + 6, _UPPER, 4)
        if fewest == most:  # the usual sheet: references of as many letters (A to Z: 1)
            fewest_digits, most_digits = _runs(data, cells + 6 + most, _DIGIT, 8)
        else:
            digits = _digits_after(data, cells + 6, most)
            fewest_digits, most_digits = int(digits.min()), int(digits.max())
        if fewest < 1 or most > 3 or fewest_digits < 1:
            self.usual = False
            return
        self._cells += int(cells.size)
        self._letters = max(self._letters, most)
        self._digits = max(self._digits, most_digits)
        if self._digits == 8:  # calamine would wrap it past 2**32
            self.usual = False


def _runs(data: Bytes, at: Positions, kind: npt.NDArray[np.bool_], most: int) -> tuple[int, int]:
    """The shortest and the longest run of bytes of ``kind`` starting at each of ``at``
    (non-empty), each counted up to ``most``: the positions still in a run are stepped on
    together, fewer at each step."""
    shortest = None
    length = 0
    while length < most:
        inside = kind[data[at]]
        if shortest is None and not inside.all():
            shortest = length
        at = at[inside] + 1
        if not at.size:
            break
        length += 1
    return (length if shortest is None else shortest), length


def _digits_after(data: Bytes, at: Positions, most_letters: int) -> npt.NDArray[np.int64]:
    """The digits (up to 8) after the capitals (up to ``most_letters``) at each of ``at``."""
    letters = np.zeros(at.size, np.int64)
    going = np.ones(at.size, bool)
    for offset in range(most_letters):
        going &= _UPPER[data[at + offset]]
        letters += going
    digits = np.zeros(at.size, np.int64)
    going = np.ones(at.size, bool)
    first = at + letters
    for offset in range(8):
        going &= _DIGIT[data[first + offset]]
        digits += going
    return digits


def _later_r(data: Bytes, head: Bytes) -> bool:
    """Whether an ``r`` attribute follows another attribute's quoted value anywhere in
    ``head``: a quote, then ``r`` and ``=``, spaces (or ``/``, ``>``) around the ``r``."""
    at = np.flatnonzero(head == _EQ) - 1
    at = _skip_spaces(data, at)
    at = _skip_spaces(data, at[data[at] == _R] - 1)
    return bool(_QUOTE[data[at]].any())


def _skip_spaces(data: Bytes, at: Positions) -> Positions:
    """Each of ``at`` moved back past the spaces (and ``/``, ``>``) it is on."""
    while (spaced := TAG_END[data[at]] & (at > 0)).any():
        at = np.where(spaced, at - 1, at)
    return at


class _ReferencedGrid(Pieces):
    """The exact grid of a part whose every cell tag is ``<c r="REF" ...>``: the span of
    its references; ``result()`` is ``None`` for a part written otherwise."""

    def __init__(self) -> None:
        super().__init__()
        self._grid = SheetGrid()

    def result(self) -> SheetGrid | None:
        return self._grid if self.finish() else None

    def _read(self, text: bytes, end: int) -> None:
        if _PREFIXED_CELL.search(text, 0, end):
            self.usual = False
            return
        found = _CELL.findall(text, 0, end)
        if not found:
            return
        letters, digits = zip(*found, strict=True)
        if b"" in digits:
            self.usual = False
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
    """The grid of a part ``QuickGrid`` could not settle, read again through
    ``open_part`` (up to three times: by its references, by expat, by its tokens);
    ``check`` runs between reads."""
    referenced = _ReferencedGrid()
    with open_part() as stream:
        while referenced.usual and (chunk := stream.read(_READ_BYTES)):
            referenced.feed(chunk)
            if check is not None:
                check()
    grid = referenced.result()
    if grid is not None:
        return grid
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
