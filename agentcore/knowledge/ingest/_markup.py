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
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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


def html_pages(data: bytes, pages: Pages) -> None:
    """An HTML page's reading text onto ``pages`` (one page)."""
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(data, encoding=True)
    reader = _Reader(pages)
    if tree.root is not None:
        reader.read(tree.root)
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


class _Reader:
    """Collects the reading text of one page into ``pages``, walking its tree."""

    def __init__(self, pages: Pages) -> None:
        self._pages = pages
        self._sections = 0  # open article, main and section elements
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
        tag = node.tag
        attributes = node.attributes
        return (
            tag in _SKIPPED
            or "hidden" in attributes
            or attributes.get("aria-hidden") == "true"
            or (tag in _CHROME and not self._sections)
        )

    def _open(self, tag: str) -> None:
        if tag in _SECTIONS:
            self._sections += 1
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
            self._sections -= 1
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
