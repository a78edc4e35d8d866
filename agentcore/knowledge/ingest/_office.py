"""Office files (Word, PowerPoint, Excel): their pages, headings, tables and labels.

Each archive is checked (``_zipguard``) before its parser opens it. The parsers
(python-docx, python-pptx, python-calamine: the ``office`` extra) are imported here, when
such a file arrives. python-docx and python-pptx read XML with lxml without resolving
entities, and calamine knows only XML's five predefined ones; and a part that declares a
DTD never reaches them.

- Word: a page per hard page break (``w:br w:type="page"``) or page Word last rendered
  (``w:lastRenderedPageBreak``); two marks with no text between make one break.
  Heading styles (and Title) become Markdown headings and labels.
- PowerPoint: a page per slide, labelled ``Slide N``: its title, text, tables and
  speaker notes (a paragraph opening ``Notes:``).
- Excel: a page per sheet, labelled ``Sheet NAME``, its rows written one by one.
Tables, in all three, are written row by row with their headers (``_tables.Rows``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import re
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any

from agentcore.knowledge.ingest._extraction import Pages, fold_spaces, invalid_file, reading
from agentcore.knowledge.ingest._tables import Rows

__all__ = ["docx_pages", "pptx_pages", "xlsx_pages"]

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_P = "{http://schemas.openxmlformats.org/presentationml/2006/main}"
_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
_TABLE = "http://schemas.openxmlformats.org/drawingml/2006/table"  # a graphic frame's table
# the elements of a shape tree python-pptx reads as shapes
_SHAPES = frozenset(
    _P + tag for tag in ("sp", "grpSp", "graphicFrame", "cxnSp", "pic", "contentPart")
)
_MC_FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"
_PAGE = object()  # a page break among a paragraph's pieces
_HEADING_STYLE = re.compile(r"heading\s*([1-9])", re.IGNORECASE)
# Word's parts that hold no reading text: what was deleted, field codes, the duplicate
# of a drawing for old readers
_SKIPPED = frozenset({_W + "del", _W + "delText", _W + "instrText", _MC_FALLBACK})


def _reading(kind: str) -> contextlib.AbstractContextManager[None]:
    """A parser's failures as 422 ``invalid_file`` (``reading``)."""
    return reading(invalid_file(f"The file is not a readable {kind} (corrupt or truncated)."))


# Word ---------------------------------------------------------------------------------


def docx_pages(data: bytes, pages: Pages) -> None:
    """A Word document's body onto ``pages``."""
    import docx

    with _reading("Word document"):
        document = docx.Document(io.BytesIO(data))
        styles = {style.style_id: style.name or "" for style in document.styles}
        _blocks(document.element.body, styles, pages)


def _blocks(parent: Any, styles: dict[str, str], pages: Pages) -> None:
    for block in parent.iterchildren():
        tag = block.tag
        if tag == _W + "p":
            _paragraph(block, styles, pages)
        elif tag == _W + "tbl":
            _table(block, pages)
        elif tag in (_W + "sdt", _W + "sdtContent", _W + "customXml"):
            _blocks(block, styles, pages)  # content controls hold paragraphs and tables


def _paragraph(paragraph: Any, styles: dict[str, str], pages: Pages) -> None:
    level = _heading_level(paragraph, styles)
    listed = paragraph.find(f"{_W}pPr/{_W}numPr") is not None or _style(
        paragraph, styles
    ).lower().startswith("list")
    text: list[str] = []
    for piece in _pieces(paragraph):
        if isinstance(piece, str):
            text.append(piece)
        else:  # a page break
            _write_paragraph("".join(text), level, listed, pages)
            text = []
            pages.next_page(keep_empty=False)
    _write_paragraph("".join(text), level, listed, pages)


def _write_paragraph(text: str, level: int, listed: bool, pages: Pages) -> None:
    text = fold_spaces(text)
    if not text:
        return
    if level:
        pages.label(text)
        pages.paragraph("#" * level + " " + text)
    elif listed:
        pages.line("- " + text)
    else:
        pages.paragraph(text)


def _heading_level(paragraph: Any, styles: dict[str, str]) -> int:
    """1-6 for a heading (Title is 1; Heading N is N, deeper ones 6), else 0."""
    name = _style(paragraph, styles)
    if name.lower() == "title":
        return 1
    found = _HEADING_STYLE.fullmatch(name.strip())
    return min(int(found.group(1)), 6) if found else 0


def _style(paragraph: Any, styles: dict[str, str]) -> str:
    """The name of ``paragraph``'s style (``Heading 1``), ``""`` for the default."""
    style = paragraph.find(f"{_W}pPr/{_W}pStyle")
    return styles.get(style.get(_W + "val", ""), "") if style is not None else ""


def _pieces(element: Any) -> Iterator[str | object]:
    """The text of ``element`` in reading order, with ``_PAGE`` where a page breaks."""
    for child in element.iterchildren():
        tag = child.tag
        if not isinstance(tag, str) or tag in _SKIPPED:
            continue  # a comment or processing instruction, or no reading text
        if tag == _W + "t":
            yield child.text or ""
        elif tag == _W + "tab":
            yield "\t"
        elif tag in (_W + "br", _W + "cr"):
            yield _PAGE if child.get(_W + "type") == "page" else "\n"
        elif tag == _W + "lastRenderedPageBreak":
            yield _PAGE
        elif tag == _W + "noBreakHyphen":
            yield "-"
        else:
            yield from _pieces(child)
            if tag == _W + "p":  # a paragraph of a cell or a text box
                yield "\n"


def _table(table: Any, pages: Pages) -> None:
    rows = Rows(pages)
    broken = False  # a page ended inside the table: the next page starts after the row
    # a cell spanning columns is followed by an empty value for each more it covers, so
    # the values after it keep their header's names; never past the table's grid (a
    # span of a hundred million would be as many values)
    columns = min(len(table.findall(f"{_W}tblGrid/{_W}gridCol")) or _MAX_COLUMNS, _MAX_COLUMNS)
    for row in table.iterchildren(_W + "tr"):
        values: list[str] = []
        for cell in row.iterchildren(_W + "tc"):
            pieces = list(_pieces(cell))
            broken = broken or any(piece is _PAGE for piece in pieces)
            values.append("".join(p for p in pieces if isinstance(p, str)))
            covered = min(_span(cell), columns - len(values) + 1)
            values.extend([""] * (covered - 1))
        rows.add(values)
        if broken:
            rows.close()
            pages.next_page(keep_empty=False)
            rows, broken = Rows(pages), False
    rows.close()


_MAX_COLUMNS = 1_000  # a table's columns as read (Word makes at most 63)


def _span(cell: Any) -> int:
    """How many grid columns a table cell covers (1 when its ``gridSpan`` is no number)."""
    span = cell.find(f"{_W}tcPr/{_W}gridSpan")
    value = span.get(_W + "val", "1") if span is not None else "1"
    return int(value) if value.isascii() and value.isdigit() and len(value) < 10 else 1


# PowerPoint ---------------------------------------------------------------------------


def pptx_pages(data: bytes, pages: Pages) -> None:
    """A presentation's slides onto ``pages``, one each.

    python-pptx opens the package and finds each slide's part and notes; the slides'
    XML is then walked directly (python-pptx's shape objects answer each property with
    an XPath query), as python-pptx reads it: the title is the slide's placeholder of
    index 0, a paragraph's text its runs, line breaks and fields.
    """
    import pptx

    with _reading("PowerPoint presentation"):
        presentation = pptx.Presentation(io.BytesIO(data))
        for number, slide in enumerate(presentation.slides, 1):
            notes = slide.notes_slide.element if slide.has_notes_slide else None
            _slide(number, slide.element, notes, pages)


def _slide(number: int, slide: Any, notes: Any, pages: Pages) -> None:
    if number > 1:
        pages.next_page()
    pages.label(f"Slide {number}")
    shapes = _tree(slide)
    title = next((shape for shape in shapes if _is_title(shape)), None)
    heading = _folded_text(title)
    if heading:
        pages.paragraph("# " + heading)
    for shape in _flattened(shapes):
        if shape is not title:
            _shape(shape, pages)
    if notes is not None:  # the notes' body placeholder
        body = (shape for shape in _tree(notes) if _placeholder(shape, "type", "obj") == "body")
        text = _folded_text(next(body, None))
        if text:
            pages.paragraph("Notes: " + text)


def _tree(part: Any) -> list[Any]:
    """The shapes of a slide's (or a notes slide's) shape tree, in order."""
    return _members(part.find(f"{_P}cSld/{_P}spTree"))


def _folded_text(shape: Any) -> str:
    """The text of an autoshape (a title, the notes' body) on one line; ``""`` for none
    or for another kind of shape (a picture placeholder has no text)."""
    if shape is None or shape.tag != _P + "sp":
        return ""
    return fold_spaces("\n".join(_paragraphs(shape.find(_P + "txBody"))))


def _members(tree: Any) -> list[Any]:
    """The shapes of a shape tree or group, in order."""
    return [] if tree is None else [child for child in tree if child.tag in _SHAPES]


def _flattened(shapes: list[Any]) -> Iterator[Any]:
    """Every shape, those of groups in their group's place."""
    for shape in shapes:
        if shape.tag == _P + "grpSp":
            yield from _flattened(_members(shape))
        else:
            yield shape


def _is_title(shape: Any) -> bool:
    """Whether ``shape`` is the placeholder of index 0 (``idx`` absent, ``0``, ``00``)."""
    index = _placeholder(shape, "idx", "0")
    return index is not None and index.strip().isdigit() and int(index) == 0


def _placeholder(shape: Any, attribute: str, default: str) -> str | None:
    """``attribute`` of ``shape``'s placeholder (``default`` when unset), ``None`` for a
    shape that is no placeholder."""
    ph = shape[0].find(f"{_P}nvPr/{_P}ph") if len(shape) else None
    return None if ph is None else ph.get(attribute, default)


def _shape(shape: Any, pages: Pages) -> None:
    if shape.tag == _P + "graphicFrame":
        data = shape.find(f"{_A}graphic/{_A}graphicData")
        table = data.find(_A + "tbl") if data is not None and data.get("uri") == _TABLE else None
        if table is not None:
            rows = Rows(pages)
            for row in table.iterchildren(_A + "tr"):
                cells = row.iterchildren(_A + "tc")
                rows.add(["\n".join(_paragraphs(cell.find(_A + "txBody"))) for cell in cells])
            rows.close()
    elif shape.tag == _P + "sp":
        lines = [fold_spaces(text) for text in _paragraphs(shape.find(_P + "txBody"))]
        pages.paragraph("\n".join(line for line in lines if line))


def _paragraphs(body: Any) -> list[str]:
    """The text of each paragraph of a text body (``None``: none): its runs and fields,
    a line break as ``\\v``."""
    if body is None:
        return []
    paragraphs = []
    for paragraph in body.iterchildren(_A + "p"):
        text = []
        for piece in paragraph.iterchildren(_A + "r", _A + "fld", _A + "br"):
            if piece.tag == _A + "br":
                text.append("\v")
            else:
                run = piece.find(_A + "t")
                text.append((run.text or "") if run is not None else "")
        paragraphs.append("".join(text))
    return paragraphs


# Excel --------------------------------------------------------------------------------


def xlsx_pages(data: bytes, pages: Pages) -> None:
    """A workbook's sheets onto ``pages``, one each, row by row.

    calamine reads a whole sheet at once (``_zipguard`` has bounded its grid); its rows
    then come one by one, so the text budget and the CPU budget stop a sheet between two
    rows. A sheet's grid runs from its first cell to its last, never to the dimensions it
    declares; rows above its first cell come empty and are skipped.
    """
    import python_calamine

    with _reading("Excel workbook"):
        workbook = python_calamine.CalamineWorkbook.from_filelike(io.BytesIO(data))
        with workbook:
            for number, sheet in enumerate(workbook.sheets_metadata, 1):
                if number > 1:
                    pages.next_page()
                pages.label(f"Sheet {sheet.name}")
                pages.paragraph("# " + sheet.name)
                if sheet.typ == python_calamine.SheetTypeEnum.WorkSheet:  # a chart has no cells
                    _sheet(workbook.get_sheet_by_name(sheet.name), pages)


def _sheet(sheet: Any, pages: Pages) -> None:
    start = sheet.start
    if start is None:  # no cells
        return
    rows = Rows(pages, first_column=start[1], specs=_CELL_SPECS, as_text=_CELLS_AS_TEXT)
    cells = sheet.iter_rows()
    while batch := list(islice(cells, _ROWS_AT_ONCE)):
        rows.add_many(batch, _cell_text)  # an empty row is skipped (a 0 or FALSE is a value)
    rows.close()


_ROWS_AT_ONCE = 256  # a sheet's rows taken from calamine and written at once


# the cells a row's line template converts as ``_cell_text`` writes them
_CELL_SPECS = {str: "s", float: ".15g", int: "s", dt.date: "s"}
# a run's dates written by their own method: ``%s`` of a date calls it by name
_CELLS_AS_TEXT: dict[type, Callable[[Any], str]] = {dt.date: dt.date.isoformat}


def _cell_text(value: Any) -> str:
    """A cell's value as a reader sees it: ``3``, ``2.5``, ``2024-03-01``, ``TRUE``."""
    if type(value) is str:  # most cells: first, and without isinstance's walk
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        return f"{value:.15g}"
    if isinstance(value, dt.datetime):
        return value.date().isoformat() if value.time() == dt.time() else value.isoformat(" ")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    return str(value)  # text, an int, an error (``#DIV/0!``), a duration (``1 day, 6:00:00``)
