"""HTML pages: their reading text, headings and tables, without code or page chrome.

Read with selectolax's lexbor parser (the ``office`` extra), which builds the tree a
browser builds, by the HTML Standard's algorithm, from the page's bytes: their encoding
is found as the Standard finds it (a byte-order mark, else a ``<meta charset>`` in the
first 1,024 bytes, else UTF-8; a byte the encoding cannot read becomes U+FFFD). Left
out: ``script``, ``style``, ``template``, ``noscript`` and the like, anything ``hidden``,
and the page's chrome: ``nav`` and ``aside``, and ``header`` and ``footer`` unless inside
an ``article``, ``main`` or ``section`` (where they hold the article's own title or
byline). Entities are decoded; headings become Markdown headings and labels; ``<title>``
is the first line, a heading labelling what comes before the page's first heading.

lexbor builds a tree in time quadratic in its depth (200,000 nested elements: a minute of
CPU in one call into C). So a page whose tags could nest more than ``_LEXBOR_DEPTH``
deep (counted from its tags, at once, with numpy) is read instead as a stream of tags
by the standard library's ``html.parser``: linear, and in Python, where the CPU budget
stops it. Its text is the same for a well-formed page; a malformed one's implied ends
are not inferred.
"""

from __future__ import annotations

import codecs
import contextlib
import re
from html.parser import HTMLParser
from typing import TYPE_CHECKING

import numpy as np

from agentcore.knowledge.ingest._extraction import Pages, fold_spaces
from agentcore.knowledge.ingest._tables import Rows

if TYPE_CHECKING:
    from selectolax.lexbor import LexborNode

__all__ = ["html_pages"]

_SKIPPED = frozenset(
    {"script", "style", "template", "noscript", "nav", "aside", "svg", "math", "iframe"}
    | {"object", "canvas", "select", "button", "datalist"}
)
_CHROME = frozenset({"header", "footer"})
_SECTIONS = frozenset({"article", "main", "section"})
_BLOCKS = frozenset(
    {"p", "div", "section", "article", "main", "header", "footer", "ul", "ol", "dl", "dt"}
    | {"dd", "blockquote", "pre", "figure", "figcaption", "form", "fieldset", "address"}
    | {"hr", "table", "details", "summary", "body", "caption"}
)
_HEADINGS = {f"h{n}": n for n in range(1, 7)}


_LEXBOR_DEPTH = 5_000  # lexbor's tree at this depth: about 30 ms
# elements that take no end tag, and those the next of their kind ends: not counted deep
_VOID = b"br img hr input meta link wbr area col source track embed param base keygen".split()
_UNNESTED = (
    _VOID + b"p li dt dd option optgroup tr td th thead tbody tfoot colgroup rb rt rp".split()
)
_VOID_TAGS = frozenset(name.decode() for name in _VOID)
_NAME_BYTES = 8  # the longest of them (a key of eight bytes)
_UNNESTED_KEYS = np.array(
    [int.from_bytes(name.ljust(_NAME_BYTES, b"\0"), "little") for name in _UNNESTED], np.uint64
)


def html_pages(data: bytes, pages: Pages) -> None:
    """An HTML page's reading text onto ``pages`` (one page)."""
    reader = _Reader(pages)
    if _nesting_bound(data) > _LEXBOR_DEPTH:
        _Events(reader).read(data)
    else:
        from selectolax.lexbor import LexborHTMLParser

        tree = LexborHTMLParser(data, encoding=True)
        if tree.root is not None:
            reader.read(tree.root)
    reader.finish()


def _nesting_bound(data: bytes) -> int:
    """How deep the page's elements could nest, read from its tags alone: start tags
    less end tags, at the deepest point (elements that take no end tag, or that the next
    of their kind ends, left out)."""
    if data.count(b"<") <= _LEXBOR_DEPTH:
        return 0  # so few tags cannot nest deeper
    page = np.frombuffer(data + bytes(_NAME_BYTES + 2), np.uint8)
    tags = np.flatnonzero(page[: len(data)] == ord("<"))
    closing = page[tags + 1] == ord("/")
    first = tags + 1 + closing
    # each tag's name in lower case, up to _NAME_BYTES, zero-padded past its end: a key
    window = page[first[:, None] + np.arange(_NAME_BYTES + 1)] | 0x20
    goes = _NAME_GOES_ON[window]
    length = np.where(goes.all(axis=1), _NAME_BYTES + 1, np.argmin(goes, axis=1))
    inside = np.arange(_NAME_BYTES) < length[:, None]
    keys = np.ascontiguousarray(window[:, :_NAME_BYTES] * inside).view("<u8")[:, 0]
    letter = (window[:, 0] >= ord("a")) & (window[:, 0] <= ord("z"))
    # a longer name is no short one
    counted = letter & ((length > _NAME_BYTES) | ~np.isin(keys, _UNNESTED_KEYS))
    steps = np.where(closing, -1, 1)[counted]
    return int(np.cumsum(steps).max(initial=0))


_NAME_GOES_ON = np.zeros(256, bool)  # a byte a tag's name may go on with (lower-cased)
_NAME_GOES_ON[list(b"abcdefghijklmnopqrstuvwxyz0123456789-_.:")] = True


class _Table:
    """A table being read: its rows of cells."""

    def __init__(self) -> None:
        self.rows: list[list[str]] = []
        self.cell: list[str] | None = None

    def new_row(self) -> None:
        self.end_cell()
        self.rows.append([])

    def new_cell(self) -> None:
        self.end_cell()
        if not self.rows:
            self.rows.append([])
        self.cell = []

    def end_cell(self) -> None:
        if self.cell is not None:
            self.rows[-1].append("".join(self.cell))
            self.cell = None


def _leaves_out(reader: _Reader, tag: str, attributes: dict[str, str | None]) -> bool:
    """Whether an element and what it holds are left out of the reading text."""
    return (
        tag in _SKIPPED
        or "hidden" in attributes
        or attributes.get("aria-hidden") == "true"
        or (tag in _CHROME and not reader.sections)
    )


class _Reader:
    """Collects the reading text of one page into ``pages``, walking its tree."""

    def __init__(self, pages: Pages) -> None:
        self._pages = pages
        self.sections = 0  # open article, main and section elements
        self._pre = 0
        self._text: list[str] = []  # the paragraph being read
        self._heading: int = 0  # the level of the heading being read
        self._title: list[str] | None = None  # the <title> being read
        self._tables: list[_Table] = []
        self._item = False  # the paragraph is a list item

    def read(self, root: LexborNode) -> None:
        """Read ``root`` and what it holds, in document order (with a stack, not
        recursion: a page may nest elements thousands deep)."""
        stack: list[LexborNode | str] = [root]
        while stack:
            node = stack.pop()
            if isinstance(node, str):  # the end of an element
                self._close(node)
            elif node.is_text_node:
                self._data(node.text_content or "")
            elif node.is_element_node and not self._left_out(node):
                tag = node.tag or ""
                self._open(tag)
                stack.append(tag)
                stack.extend(reversed(list(node.iter(include_text=True))))

    def _left_out(self, node: LexborNode) -> bool:
        return _leaves_out(self, node.tag or "", node.attributes)

    def _open(self, tag: str) -> None:
        if tag in _SECTIONS:
            self.sections += 1
        if tag == "title":
            self._title = []
        elif tag == "br":
            self._data("\n")
        elif tag in _HEADINGS:
            self._flush()
            self._heading = _HEADINGS[tag]
        elif tag == "table":
            self._flush()
            self._tables.append(_Table())
        elif tag == "tr" and self._tables:
            self._tables[-1].new_row()
        elif tag in ("td", "th") and self._tables:
            self._tables[-1].new_cell()
        elif tag == "li":
            self._flush()
            self._item = True
        elif tag in _BLOCKS:
            self._flush()
        if tag == "pre":
            self._pre += 1

    def _close(self, tag: str) -> None:
        if tag in _SECTIONS:
            self.sections -= 1
        if tag == "title" and self._title is not None:
            title = fold_spaces("".join(self._title))
            self._title = None
            if title:
                self._pages.label(title)
                self._pages.paragraph("# " + title)
        elif tag in _HEADINGS or tag in _BLOCKS or tag == "li":
            self._flush()
            if tag == "table" and self._tables:
                self._write_table(self._tables.pop())
        elif tag in ("td", "th") and self._tables:
            self._tables[-1].end_cell()
        if tag == "pre":
            self._pre -= 1

    def _data(self, data: str) -> None:
        if self._title is not None:
            self._title.append(data)
        elif self._tables and self._tables[-1].cell is not None:
            self._tables[-1].cell.append(data)
        else:
            self._text.append(data)

    def _write_table(self, table: _Table) -> None:
        table.end_cell()
        if self._tables and self._tables[-1].cell is not None:  # a table in a cell: its text
            self._tables[-1].cell.append(" ".join(" ".join(row) for row in table.rows))
            return
        rows = Rows(self._pages)
        for row in table.rows:
            rows.add(row)
        rows.close()

    def _flush(self) -> None:
        """Write the paragraph read so far."""
        raw = "".join(self._text)
        self._text = []
        text = raw.strip("\n") if self._pre else fold_spaces(raw)
        level, self._heading = self._heading, 0
        item, self._item = self._item, False
        if not text.strip():
            return
        if level:
            self._pages.label(text)
            self._pages.paragraph("#" * level + " " + text)
        elif item:
            self._pages.line("- " + fold_spaces(text))  # an item of a <pre> too: one line
        else:
            self._pages.paragraph(text)

    def finish(self) -> None:
        """Write what is left: the last paragraph, and tables never closed."""
        self._flush()
        while self._tables:
            self._write_table(self._tables.pop())


class _Events(HTMLParser):
    """The page read as a stream of tags (``html.parser``), into the same ``_Reader``:
    for a page too deep for lexbor. An element that is left out is skipped up to its
    end tag."""

    def __init__(self, reader: _Reader) -> None:
        super().__init__(convert_charrefs=True)
        self._reader = reader
        self._skipping: list[str] = []  # the left-out element being skipped, as nested

    def read(self, data: bytes) -> None:
        self.feed(_decoded(data))
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._skipping:
            if tag == self._skipping[0]:
                self._skipping.append(tag)
            return
        attributes = dict(attrs)
        if _leaves_out(self._reader, tag, attributes):
            if tag not in _VOID_TAGS:
                self._skipping.append(tag)
            return
        self._reader._open(tag)
        if tag in _VOID_TAGS:
            self._reader._close(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in _VOID_TAGS and not self._skipping:
            self._reader._close(tag)

    def handle_endtag(self, tag: str) -> None:
        if self._skipping:
            if tag == self._skipping[0]:
                self._skipping.pop()
            return
        if tag not in _VOID_TAGS:
            self._reader._close(tag)

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self._reader._data(data)


_META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([\w.:-]+)""", re.IGNORECASE)
# labels the HTML Standard reads as windows-1252
_WINDOWS_1252 = frozenset({"ascii", "us-ascii", "latin1", "iso-8859-1", "iso8859-1", "l1", "cp819"})


def _decoded(data: bytes) -> str:
    """The page as text, decoded as the HTML Standard decodes it: a byte-order mark,
    else a ``<meta charset>`` in the first 1,024 bytes, else UTF-8 (a byte the encoding
    cannot read becomes U+FFFD)."""
    for mark, encoding in (
        (codecs.BOM_UTF8, "utf-8"),
        (b"\xff\xfe", "utf-16-le"),
        (b"\xfe\xff", "utf-16-be"),
    ):
        if data.startswith(mark):
            return data[len(mark) :].decode(encoding, errors="replace")
    declared = _META_CHARSET.search(data[:1024])
    encoding = "utf-8"
    if declared is not None:
        label = declared.group(1).decode("ascii", errors="replace").lower()
        label = "windows-1252" if label in _WINDOWS_1252 else label
        with contextlib.suppress(LookupError):
            encoding = codecs.lookup(label).name
    if encoding.startswith("utf-16"):  # a page that says so in ASCII is not UTF-16
        encoding = "utf-8"
    return data.decode(encoding, errors="replace")
