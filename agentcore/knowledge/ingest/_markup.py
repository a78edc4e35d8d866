"""HTML pages: their reading text, headings and tables, without code or page chrome.

Read with the standard library's parser (no extra to install; a crafted page that makes
it work hard is stopped by the reading's CPU budget, in a worker process). Left out:
``script``, ``style``, ``template``, ``noscript`` and the like, anything ``hidden``, and
the page's chrome: ``nav`` and ``aside``, and ``header`` and ``footer`` unless inside an
``article``, ``main`` or ``section`` (where they hold the article's own title or byline).
Entities are decoded; headings become Markdown headings and labels; ``<title>`` is
the first line, a heading labelling what comes before the page's first heading.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

from agentcore.errors import ValidationFailed
from agentcore.knowledge.ingest._extraction import Pages, decode_text, fold_spaces
from agentcore.knowledge.ingest._tables import Rows

__all__ = ["decode_html", "html_pages"]

_SKIPPED = frozenset(
    {"script", "style", "template", "noscript", "nav", "aside", "svg", "math", "iframe"}
    | {"object", "canvas", "select", "button", "datalist"}
)
_CHROME = frozenset({"header", "footer"})
_SECTIONS = frozenset({"article", "main", "section"})
_VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source"}
    | {"track", "wbr", "param"}
)
_BLOCKS = frozenset(
    {"p", "div", "section", "article", "main", "header", "footer", "ul", "ol", "dl", "dt"}
    | {"dd", "blockquote", "pre", "figure", "figcaption", "form", "fieldset", "address"}
    | {"hr", "table", "details", "summary", "body", "caption"}
)
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_.:-]+)""", re.IGNORECASE)


def decode_html(data: bytes) -> str:
    """An HTML page's text: UTF-8, or the charset its ``<meta>`` declares in its first
    KiB; ``invalid_encoding`` when neither reads it."""
    try:
        return decode_text(data)
    except ValidationFailed as error:
        declared = _CHARSET.search(data[:1024])
        if declared is None:
            raise
        try:
            text = data.decode(declared.group(1).decode("ascii"))
        except (LookupError, UnicodeDecodeError):
            raise error from None
        if "\x00" in text:
            raise
        return text


def html_pages(text: str, pages: Pages) -> None:
    """An HTML page's reading text onto ``pages`` (one page)."""
    reader = _Reader(pages)
    reader.feed(text)
    reader.close()
    reader.finish()


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


class _Reader(HTMLParser):
    """Collects the reading text of one page into ``pages``."""

    def __init__(self, pages: Pages) -> None:
        super().__init__(convert_charrefs=True)
        self._pages = pages
        self._skipping: list[str] = []  # open elements whose content is left out
        self._sections = 0  # open article, main and section elements
        self._pre = 0
        self._text: list[str] = []  # the paragraph being read
        self._heading: int = 0  # the level of the heading being read
        self._title: list[str] | None = None  # the <title> being read
        self._tables: list[_Table] = []
        self._item = False  # the paragraph is a list item

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID:
            if tag == "br" and not self._skipping:
                self._data("\n")
            elif tag == "hr" and not self._skipping:
                self._flush()
            return
        hidden = any(
            name == "hidden" or (name == "aria-hidden" and value == "true") for name, value in attrs
        )
        if self._skipping or tag in _SKIPPED or hidden or (tag in _CHROME and not self._sections):
            self._skipping.append(tag)
            return
        self._open(tag)

    def _open(self, tag: str) -> None:
        if tag in _SECTIONS:
            self._sections += 1
        if tag == "title":
            self._title = []
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

    def handle_endtag(self, tag: str) -> None:
        if self._skipping:
            if tag in self._skipping:  # closes it, and what it left open
                del self._skipping[len(self._skipping) - 1 - self._skipping[::-1].index(tag) :]
            return
        if tag in _SECTIONS:
            self._sections = max(0, self._sections - 1)
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
            self._pre = max(0, self._pre - 1)

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self._data(data)

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
