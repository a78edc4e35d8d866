"""The text python-calamine copies into a workbook's cells, measured before it reads a sheet.

A cell of type ``s`` holds an index into the workbook's shared strings, and calamine copies
that string into the cell: one string of 50 KB shown by 200,000 cells is 10 GB, from a file
of 400 KB whose parts all pass the archive's size limits. So ``_zipguard.verify_archive``
measures the shared strings part as it inflates it (``SharedStrings``) and, once every
part is inflated, bounds the text the workbook's cells hold (``shared_text_bytes``):

- quickly, every cell of every part (the grid measurement counts them) times the longest
  string: a workbook of short strings passes here;
- otherwise each part holding cells is inflated again and its cells of type ``s`` summed
  string by string (``_SHARED_CELL``); a cell of that type written otherwise counts the
  longest string.

calamine reads the part named ``xl/sharedStrings.xml`` (any case, ``\\`` as ``/``). A
string's length is bounded by the bytes from the end tag of the string before it to its
own end tag (``</si>``, or with a prefix, ``</x:si>``): text never holds a raw ``<``. A
part whose strings could be read otherwise (a comment or CDATA section, whose text may
hold ``</si>``; a processing instruction past the XML declaration; strings nested in
strings) has every string bounded by the whole part.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import IO

import numpy as np

from agentcore.knowledge.ingest._sheetgrid import PIECE_BYTES, TAG_END, Bytes, Pieces, Positions

__all__ = ["SharedStrings", "is_shared_strings", "shared_text_bytes"]

_READ_BYTES = 256 * 1024
_LT, _SLASH, _BANG, _QUESTION, _COLON = b"</!?:"
_S, _I = b"si"
_AHEAD = 5  # bytes read after a "<": "/si>" and one more
_BOM = 3  # bytes of UTF-8's byte order mark, which may precede the declaration
_PREFIX_BYTES = 16
_NAME = np.zeros(256, bool)  # what a prefix is written with
_NAME[list(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")] = True
# a cell of type s and its value, as the common writers write it (the second branch: any
# other mention of type s, counted at the longest string)
_SHARED_CELL = re.compile(
    rb"<(?:[^\s<>/:]+:)?c\b[^<>]*?\bt=[\"']s[\"'][^<>]*+>\s*+<(?:[^\s<>/:]+:)?v>([0-9]{1,10})</"
    rb"""|\bt\s*=\s*["']s["']"""
)


def is_shared_strings(name: str) -> bool:
    """Whether calamine may read the member ``name`` as the workbook's shared strings."""
    return name.lower().replace("\\", "/").endswith("xl/sharedstrings.xml")


class SharedStrings(Pieces):
    """The lengths of a shared strings part's strings (an upper bound on each, in bytes of
    XML), fed as the part inflates; ``odd`` when the part is written so that a string's
    bound is the whole part's size (see the module docstring).

    Each piece's tags are found at once (numpy): a string starts at ``<si`` and ends at
    ``</si>`` (either with a prefix), and no string may open inside another.
    """

    def __init__(self) -> None:
        super().__init__(piece_bytes=PIECE_BYTES)
        self._found: list[Positions] = []  # each piece's strings' bounds, in index order
        self._joined: Positions | None = None  # all of them, once asked for
        self._parts = 0
        self._read_bytes = 0  # the bytes before the piece being read
        self._last_end = 0  # where the last end tag starts (the part's start before one)
        self._depth = 0  # 1 inside a string
        self._size = 0
        self.odd = False

    @property
    def longest(self) -> int:
        """The longest string's bound."""
        if self.odd or not self.usual or self._depth:
            return self._size
        lengths = self._lengths()
        return int(lengths.max()) if lengths.size else 0

    def length(self, index: int) -> int:
        """String ``index``'s bound (0 for an index past the table: calamine fails then)."""
        if self.odd or not self.usual or self._depth:
            return self._size
        lengths = self._lengths()
        return int(lengths[index]) if index < lengths.size else 0

    def begin(self) -> None:
        """A part named as the table begins: a second one makes the table odd (which of
        them calamine reads, and so which string an index names, is not known)."""
        self._parts += 1
        if self._parts > 1:
            self.odd = True

    def feed(self, chunk: bytes) -> None:
        self._size += len(chunk)
        super().feed(chunk)

    def _lengths(self) -> Positions:
        """Every string's bound, in index order (the pieces' joined once)."""
        if self._joined is None:
            self._joined = np.concatenate(self._found) if self._found else np.zeros(0, np.intp)
            self._found = [self._joined]
        return self._joined

    def _read(self, text: bytes, end: int) -> None:
        start, self._read_bytes = self._read_bytes, self._read_bytes + end
        if self.odd:
            return
        data = np.frombuffer(text[: end + _AHEAD] + bytes(_AHEAD), np.uint8)
        tags = np.flatnonzero(data[:end] == _LT)
        after = [data[tags + k] for k in range(1, _AHEAD)]
        instructions = tags[after[0] == _QUESTION]  # the XML declaration opens the part
        if (after[0] == _BANG).any() or (start + instructions > _BOM).any():
            self.odd = True  # a comment, CDATA or instruction may hold what looks a tag
            return
        closing = after[0] == _SLASH
        # <si + [space / >], or </si>, at once for the usual tags; prefixed ones found
        # from their colon
        opens = (after[0] == _S) & (after[1] == _I) & TAG_END[after[2]]
        ends = closing & (after[1] == _S) & (after[2] == _I) & TAG_END[after[3]]
        prefixed = _prefixed(data, end, tags)
        if prefixed is None:
            self.odd = True
            return
        opens[prefixed] |= ~closing[prefixed]
        ends[prefixed] |= closing[prefixed]
        steps = opens.astype(np.int64) - ends
        events = steps != 0
        depth = self._depth + np.cumsum(steps[events])
        if depth.size and (depth.min() < 0 or depth.max() > 1):
            self.odd = True  # an end without a start, or a string inside a string
            return
        if depth.size:
            self._depth = int(depth[-1])
        closed = start + tags[ends]
        if closed.size:
            bounds = np.diff(closed, prepend=self._last_end)
            self._found.append(bounds)
            self._joined = None
            self._last_end = int(closed[-1])


def _prefixed(data: Bytes, end: int, tags: Positions) -> Positions | None:
    """Which of ``tags`` are ``<x:si`` or ``</x:si``: a ``:si`` that only letters, digits
    and ``_.-`` separate from the ``<`` before it (any other is in a text or a value);
    ``None`` for such a prefix longer than ``_PREFIX_BYTES``."""
    colons = np.flatnonzero(data[:end] == _COLON)
    named = colons[(data[colons + 1] == _S) & (data[colons + 2] == _I) & TAG_END[data[colons + 3]]]
    at = np.searchsorted(tags, named) - 1  # the tag each colon is in: the last "<" before
    named, at = named[at >= 0], at[at >= 0]
    if not named.size:
        return np.asarray(at, np.intp)
    first = tags[at] + 1 + (data[tags[at] + 1] == _SLASH)
    width = named - first
    offsets = np.arange(_PREFIX_BYTES)
    window = data[np.minimum(first[:, None] + offsets, end - 1)]
    names = (_NAME[window] | (offsets >= width[:, None])).all(axis=1)
    if (names & (width > _PREFIX_BYTES)).any():
        return None
    return np.asarray(at[names], np.intp)


def shared_text_bytes(
    cells: Iterable[tuple[int, Callable[[], IO[bytes]]]],
    strings: SharedStrings,
    limit: int,
    check: Callable[[], None] | None = None,
) -> int:
    """A bound on the bytes of shared strings calamine copies into cells: ``cells`` are
    each part's cell count and how to open it again; its sum at the longest string when
    that stays within ``limit``, else each part's cells of type ``s`` summed (a bound past
    ``limit`` is returned as soon as it is)."""
    parts = list(cells)
    longest = strings.longest
    quick = sum(count for count, _ in parts) * longest
    if quick <= limit or not longest:
        return quick
    total = 0
    for count, open_part in parts:
        if count:
            total += _part_text(count, open_part, strings, longest, check)
            if total > limit:
                return total
    return total


def _part_text(
    count: int,
    open_part: Callable[[], IO[bytes]],
    strings: SharedStrings,
    longest: int,
    check: Callable[[], None] | None,
) -> int:
    """The shared-string bytes of one part's cells of type ``s`` (its ``count`` cells at
    the longest string when the part is no text a reading can cut at its tags)."""
    reader = _CellStrings(strings, longest)
    with open_part() as stream:
        while reader.usual and (chunk := stream.read(_READ_BYTES)):
            reader.feed(chunk)
            if check is not None:
                check()
    return reader.total if reader.finish() else count * longest


class _CellStrings(Pieces):
    """The shared-string bytes of a part's cells, fed as it inflates."""

    def __init__(self, strings: SharedStrings, longest: int) -> None:
        super().__init__()
        self._strings = strings
        self._longest = longest
        self.total = 0

    def _read(self, text: bytes, end: int) -> None:
        # a cell's value may end past the piece (in what waits for the next one): matches
        # are taken from all of ``text`` but only those that start in the piece
        length, longest = self._strings.length, self._longest
        for found in _SHARED_CELL.finditer(text):
            if found.start() >= end:
                break
            index = found.group(1)
            self.total += longest if index is None else length(int(index))
