"""Chunking: page texts to sentence-aware, overlapping chunks that keep their page numbers."""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agentcore.errors import PayloadTooLarge

if TYPE_CHECKING:
    from agentcore._cancellation import Cancellation

__all__ = [
    "Chunk",
    "Label",
    "chunk_pages",
    "pages_in_span",
    "sentence_spans",
    "split_sentences",
]


@dataclass(frozen=True)
class Label:
    """Where a named part of a document starts: ``text`` (``Slide 3``, a heading) is in
    force from character ``offset`` of page ``page`` (1-based) until the next label."""

    page: int
    offset: int
    text: str


@dataclass(frozen=True)
class Chunk:
    """A passage of a document and the 1-based pages its text comes from, sorted.

    ``page_offsets[i]`` is where the text of ``pages[i]`` starts within ``text``, so a
    quote from the chunk can be cited with just the pages it came from. ``location``
    is the label in force where the chunk starts (``None``: the document has none there).
    """

    text: str
    pages: list[int]
    page_offsets: list[int] = field(default_factory=list, compare=False)
    location: str | None = field(default=None, compare=False)


def pages_in_span(pages: list[int], offsets: list[int], start: int, end: int) -> list[int]:
    """Pages of a chunk (starting at ``offsets``) that overlap ``[start, end)``."""
    if len(offsets) != len(pages) or not pages:
        return list(pages)
    found = []
    for index, page in enumerate(pages):
        begins = offsets[index]
        ends = offsets[index + 1] if index + 1 < len(pages) else float("inf")
        if begins < end and start < ends:
            found.append(page)
    return found or list(pages)


# Words that end in a period without ending a sentence, compared lowercased and
# without their last period. Single letters (initials) are handled apart.
_ABBREVIATIONS_TEXT = """
    mr mrs ms dr prof sr jr st mt ft gen col capt lt sgt cpl rev hon pres gov sen rep vs
    etc e.g i.e cf viz al approx ca est dept univ assn bros inc ltd co corp nos vol
    vols fig figs eq eqs ch sec pp ed eds jan feb mar apr jun jul aug sep sept oct nov
    dec
"""
_ABBREVIATIONS = frozenset(_ABBREVIATIONS_TEXT.split())
_CLOSERS = "\"'”’)]"
# A candidate sentence end: terminal punctuation, optional closing quotes/brackets,
# then whitespace. `_is_boundary` decides whether it really ends a sentence; decimals
# ("3.14") and dotted names ("agentcore.errors") never match as no space follows.
# Matches start only where a run of punctuation starts and never backtrack, so a
# megabyte of "!!!!" is scanned once, not once per character. The pattern opens with
# the character class (the run's start is checked just after it), so the engine
# skips ahead to the next punctuation mark instead of trying every position.
_CANDIDATE = re.compile(r"[.!?…](?<![.!?…].)[.!?…]*+[\"'”’)\]]*+(?=\s)")
# A new line opening a Markdown heading, list item, quote or table row ends whatever
# came before it, punctuation or not; so does the end of a heading line.
_BLOCK_START = re.compile(r"\n[ \t]*(?=#{1,6}\s|[-*+>]\s|\d{1,3}[.)]\s|\|)")
_HEADING_END = re.compile(r"^[ \t]*#{1,6}[ \t][^\n]*(?=\n)", re.MULTILINE)
_PAGE_END = (".", "!", "?", "…", ":", '"', "”", "’", ")")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n\s*")
_NEXT_CHAR = re.compile(r"\s+[\"'“‘(\[]*(\S)")
_DOTTED_ACRONYM = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]")


@dataclass(frozen=True)
class _Unit:
    """A sentence, or a piece of an over-long one, located in the joined text."""

    start: int
    end: int
    paragraph_start: bool

    @property
    def length(self) -> int:
        return self.end - self.start


def _is_boundary(text: str, match: re.Match[str]) -> bool:
    punct = match.group(0).rstrip(_CLOSERS)
    if punct == ".":
        end = match.start()
        low = max(0, end - 40)
        start = (
            max(text.rfind(" ", low, end), text.rfind("\n", low, end), text.rfind("\t", low, end))
            + 1
        )
        token = text[max(start, end - 40) : end].lstrip("\"'“‘([")
        if token.lower() in _ABBREVIATIONS:
            return False
        # Initials ("J. Smith") and dotted acronyms ("U.S. Army", "e.g. this").
        if (len(token) == 1 and token.isalpha()) or (
            "." in token and _DOTTED_ACRONYM.fullmatch(token)  # it needs an inner "."
        ):
            return False
    nxt = _NEXT_CHAR.match(text, match.end())
    if nxt is None:
        return True
    char = nxt.group(1)
    # A lowercase word after a period or an ellipsis continues the sentence
    # ("approx. five", "wait... what"); after "!" or "?" informal text starts anew.
    return not char.islower() or not ("." in punct or "…" in punct)


def _trim(text: str, start: int, end: int) -> tuple[int, int] | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def _sentence_spans(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Split ``text[start:end]``, one block of a paragraph, into trimmed sentence spans.

    The cut points of the three kinds are gathered and sorted per block, which holds
    at most ``BLOCK_CHARS`` characters, so a huge paragraph costs no more memory
    than one block's cuts.
    """
    cuts = [start]
    cuts += [m.end() for m in _CANDIDATE.finditer(text, start, end) if _is_boundary(text, m)]
    others = [m.start() for m in _BLOCK_START.finditer(text, start, end)]
    if text.find("#", start, end) >= 0:  # no heading without one: skip the line scan
        others += [m.end() for m in _HEADING_END.finditer(text, start, end)]
    cuts.append(end)
    if others:
        cuts = sorted(cuts + others)
    spans = []
    left = start
    for right in cuts[1:]:
        span = _trim(text, left, right)
        if span is not None:
            spans.append(span)
        left = right
    return spans


def _hard_split(text: str, start: int, end: int, limit: int) -> list[tuple[int, int]]:
    """Cut a span longer than ``limit`` at whitespace, mid-word only for giant words."""
    if end - start <= limit:
        return [(start, end)]
    pieces: list[tuple[int, int]] = []
    while end - start > limit:
        window = text[start + 1 : start + limit + 1]
        spaces = [i for i in (window.rfind(" "), window.rfind("\n"), window.rfind("\t")) if i >= 0]
        cut = start + 1 + max(spaces) if spaces else start + limit
        span = _trim(text, start, cut)
        if span is not None:
            pieces.append(span)
        start = cut
        while start < end and text[start].isspace():
            start += 1
    if start < end:
        pieces.append((start, end))
    return pieces


BLOCK_CHARS = 1 << 16
# Python's regex engine holds the GIL for a whole search: a paragraph is searched in
# blocks of at most this many characters, so one huge paragraph (a 50 MB line of
# base64) cannot stall every other thread of the process for seconds.


def _blocks(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """``[start, end)`` in pieces of at most ``BLOCK_CHARS`` characters.

    Each piece ends just after a line break or other whitespace in its second half
    (a cut there acts as a sentence break, which trimming makes invisible), else
    mid-run. Only paragraphs longer than a block are cut differently than before.
    """
    while end - start > BLOCK_CHARS:
        limit = start + BLOCK_CHARS
        cut = text.rfind("\n", start + BLOCK_CHARS // 2, limit)
        if cut < 0:
            half = start + BLOCK_CHARS // 2
            cut = max(text.rfind(" ", half, limit), text.rfind("\t", half, limit))
        cut = cut + 1 if cut > start else limit
        yield start, cut
        start = cut
    yield start, end


def _paragraphs(text: str) -> Iterator[tuple[int, int]]:
    position = 0
    for brk in _PARAGRAPH_BREAK.finditer(text):
        yield position, brk.start()
        position = brk.end()
    yield position, len(text)


def _units(text: str, limit: int) -> Iterator[_Unit]:
    """Sentences of ``text`` no longer than ``limit``, marking paragraph starts.

    A generator, linear in ``len(text)``: every regex scans each character a bounded
    number of times, and no list of all sentences is ever built.
    """
    for para_start, para_end in _paragraphs(text):
        first = True
        for block_start, block_end in _blocks(text, para_start, para_end):
            for start, end in _sentence_spans(text, block_start, block_end):
                for piece_start, piece_end in _hard_split(text, start, end, limit):
                    yield _Unit(piece_start, piece_end, first)
                    first = False


def split_sentences(text: str) -> list[str]:
    """Split ``text`` into sentences; a paragraph break always ends one."""
    return [text[start:end] for start, end in sentence_spans(text)]


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Where the sentences of ``text`` are: ``(start, end)`` offsets, trimmed, in order."""
    return [(u.start, u.end) for u in _units(text, max(len(text), 1))]


def _separator(unit: _Unit) -> str:
    return "\n\n" if unit.paragraph_start else " "


def _single_chunk(text: str, target_chars: int, labels: _Labels) -> list[Chunk] | None:
    """``chunk_pages([text])`` for a short one-paragraph text, without the packing loop.

    When the whole text fits in ``target_chars`` and in one block and has no paragraph
    break, no sentence is cut and the packing takes every sentence into one chunk:
    its sentences joined by single spaces (their joined length never exceeds the
    text's, as every cut drops at least one whitespace character). ``None`` for any
    other text: the general path handles it.
    """
    if len(text) > min(target_chars, BLOCK_CHARS) or _PARAGRAPH_BREAK.search(text):
        return None
    spans = _sentence_spans(text, 0, len(text))
    if not spans:
        return []
    joined = " ".join([text[start:end] for start, end in spans])
    return [Chunk(text=joined, pages=[1], page_offsets=[0], location=labels.at(spans[0][0]))]


def chunk_pages(
    pages: list[str],
    *,
    labels: Sequence[Label] = (),
    target_chars: int = 700,
    overlap_chars: int = 150,
    max_chunks: int | None = None,
    cancellation: Cancellation | None = None,
) -> list[Chunk]:
    """Pack the sentences of ``pages`` into chunks of at most ``target_chars``.

    Pages are read as one continuous text, so a sentence that runs over a page break
    stays whole and its chunk carries both pages; a page whose text ends a sentence
    is taken to end a paragraph. Chunks end at
    sentence boundaries and prefer paragraph breaks: once a chunk is half full, a new
    paragraph starts a new chunk. A chunk cut inside a paragraph begins with the
    previous chunk's trailing whole sentences, at most ``overlap_chars`` of them, so a
    sentence keeps some context; a chunk that begins a paragraph repeats nothing.
    Sentences longer than ``target_chars`` are cut at word boundaries. Whitespace
    between sentences is folded to one space (one blank line between paragraphs).
    Deterministic; never returns an empty chunk. Time and memory are linear in the
    text, whatever it holds (no whitespace at all, a million one-letter sentences).
    A labelled part (a slide, a sheet, a heading's section: each of ``labels`` starts
    one) starts a new chunk, and each chunk's ``location`` is the label in force at its
    first sentence, so a chunk lies in one part.

    :param pages: page texts; page ``n`` (1-based) is ``pages[n - 1]``.
    :param labels: where named parts of the pages start (a slide, a sheet, a heading).
    :param target_chars: the longest chunk text.
    :param overlap_chars: the most text a chunk repeats from the one before it.
    :param max_chunks: the most chunks a document may make (``None``: no limit).
    :param cancellation: checked once per chunk; its error propagates.
    :return: the chunks in document order.
    :raises ValueError: on a non-positive target, a negative overlap, or an overlap
        larger than half the target.
    :raises PayloadTooLarge: ``too_many_chunks``, as soon as ``max_chunks`` is passed.
    """
    if target_chars < 1:
        raise ValueError("target_chars must be positive")
    if overlap_chars < 0:
        raise ValueError("overlap_chars must not be negative")
    if overlap_chars * 2 > target_chars:
        raise ValueError("overlap_chars must be at most half of target_chars")

    # one short page is one chunk, unless a labelled part starts inside it
    inner = any(label.page != 1 or label.offset > 0 for label in labels)
    if len(pages) == 1 and not inner and (max_chunks is None or max_chunks > 0):
        single = _single_chunk(pages[0], target_chars, _Labels(labels, [0]))
        if single is not None:
            if cancellation is not None:
                cancellation.check()
            return single

    layout = _Layout.of(pages)
    located = _Labels(labels, layout.page_starts)
    chunks: list[Chunk] = []
    units = _units(layout.text, target_chars)
    for group in _packed(units, target_chars, overlap_chars, located.starts):
        if cancellation is not None:
            cancellation.check()
        if max_chunks is not None and len(chunks) >= max_chunks:
            raise PayloadTooLarge(
                f"The document makes more than {max_chunks} chunks; split it or raise"
                " max_document_chunks.",
                code="too_many_chunks",
                param="file",
            )
        chunks.append(layout.chunk(group, located.at(group[0].start)))
    return chunks


class _Labels:
    """Labels placed in the pages' joined text: which one is in force at a position."""

    def __init__(self, labels: Sequence[Label], page_starts: list[int]) -> None:
        placed = sorted(
            (page_starts[label.page - 1] + label.offset, number, label.text)
            for number, label in enumerate(labels)
            if 1 <= label.page <= len(page_starts)
        )
        self.starts = [start for start, _, _ in placed]
        self._texts = [text for _, _, text in placed]

    def at(self, position: int) -> str | None:
        """The label in force at ``position`` of the joined text (``None``: none yet)."""
        index = bisect_right(self.starts, position) - 1
        return self._texts[index] if index >= 0 else None


@dataclass(frozen=True)
class _Layout:
    """Pages read as one text: where each page starts in it, and which hold any text."""

    text: str
    page_starts: list[int]
    has_text: list[bool]

    @classmethod
    def of(cls, pages: list[str]) -> _Layout:
        """The pages joined: a page that ends a sentence most likely ends a paragraph
        too (PDF extraction cannot tell), one that does not is continued on the next."""
        parts: list[str] = []
        page_starts: list[int] = []
        offset = 0
        for page in pages:
            if parts:
                parts.append("\n\n" if parts[-1].rstrip().endswith(_PAGE_END) else " ")
                offset += len(parts[-1])
            page_starts.append(offset)
            parts.append(page)
            offset += len(page)
        return cls("".join(parts), page_starts, [bool(page.strip()) for page in pages])

    def chunk(self, group: list[_Unit], location: str | None = None) -> Chunk:
        """The chunk of ``group``'s units: their text, its pages (those with text),
        where each page's text starts in it, and ``location``."""
        text, page_starts = self.text, self.page_starts
        parts: list[str] = []
        starts: dict[int, int] = {}  # page -> where its text starts in the chunk
        written = 0
        for position, unit in enumerate(group):
            if position:
                parts.append(_separator(unit))
                written += len(parts[-1])
            low = bisect_right(page_starts, unit.start) - 1
            high = bisect_right(page_starts, unit.end - 1) - 1
            for n in range(low, high + 1):
                starts.setdefault(n + 1, written + max(0, page_starts[n] - unit.start))
            parts.append(text[unit.start : unit.end])
            written += len(parts[-1])
        first = bisect_right(page_starts, group[0].start) - 1
        last = bisect_right(page_starts, group[-1].end - 1) - 1
        pages_in = [n + 1 for n in range(first, last + 1) if self.has_text[n]]
        offsets = [starts.get(page, 0) for page in pages_in]
        return Chunk(text="".join(parts), pages=pages_in, page_offsets=offsets, location=location)


def _packed(
    units: Iterable[_Unit], target_chars: int, overlap_chars: int, parts: Sequence[int] = ()
) -> Iterator[list[_Unit]]:
    """The units packed into groups of at most ``target_chars`` (as ``chunk_pages`` says);
    a unit starting at or past one of ``parts`` (sorted positions where a labelled part
    starts) starts a new group, repeating nothing of the part before.

    Lengths are kept as running sums (the joined length of a group counts the
    separator before every unit but the first), so packing stays linear.
    """
    current: list[_Unit] = []
    current_length = 0
    ahead = 0  # the next part start not yet passed
    for unit in units:
        gap = len(_separator(unit))
        new_part = False
        while ahead < len(parts) and parts[ahead] <= unit.start:
            new_part = True
            ahead += 1
        if current:
            too_long = current_length + gap + unit.length > target_chars
            paragraph_cut = unit.paragraph_start and current_length >= target_chars // 2
            if new_part:
                yield current
                current, current_length = [], 0
            elif too_long or paragraph_cut:
                yield current
                current, current_length = _carried(current, unit, overlap_chars, target_chars)
        current_length += (gap if current else 0) + unit.length
        current.append(unit)
    if current:
        yield current


def _carried(
    group: list[_Unit], unit: _Unit, overlap_chars: int, target_chars: int
) -> tuple[list[_Unit], int]:
    """The trailing whole units of ``group`` the next group (starting with ``unit``)
    repeats, at most ``overlap_chars`` of them, and their joined length; none when
    ``unit`` starts a paragraph."""
    carried: deque[_Unit] = deque()
    carried_length = 0
    if unit.paragraph_start:
        return [], 0
    gap = len(_separator(unit))
    for previous in reversed(group):
        length = previous.length
        if carried:
            length += len(_separator(carried[0])) + carried_length
        if length > overlap_chars or length + gap + unit.length > target_chars:
            break
        carried.appendleft(previous)
        carried_length = length
    return list(carried), carried_length
