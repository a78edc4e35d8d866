"""Word, PowerPoint, Excel, CSV and HTML uploads: their pages, labels and table rows, how
each is recognised, and hostile files refused quickly (a zip bomb, billion laughs)."""

from __future__ import annotations

import datetime
import io
import resource
import sys
import threading
import zipfile

import docx
import openpyxl
import pptx
import pytest
from docx.oxml import OxmlElement
from office_files import (
    PAGE,
    make_docx,
    make_laughs_docx,
    make_lying_docx,
    make_pptx,
    make_xlsx,
    make_xlsx_of_sheet,
    make_zip_bomb,
    sheet_xml,
)

from agentcore import Cancellation, Cancelled
from agentcore.errors import AgentCoreError, PayloadTooLarge
from agentcore.knowledge._chunking import Label, chunk_pages
from agentcore.knowledge.ingest import TextBudget, WorkBudget, _markup, parse_document
from agentcore.knowledge.ingest._parsing import CSV, DOCX, HTML, PPTX, XLSX, ParsedDocument
from agentcore.knowledge.ingest._sheetgrid import PIECE_BYTES, QuickGrid, SheetGrid
from agentcore.knowledge.ingest._zipguard import ArchiveLimits, _declares_dtd, verify_archive

LIMITS = {"max_bytes": 50 * 1024 * 1024, "max_pages": 100}


def parse(
    data: bytes, filename: str, content_type: str | None = None, **extra: object
) -> ParsedDocument:
    return parse_document(data, filename, content_type, **LIMITS, **extra)


def refusal(
    data: bytes, filename: str, content_type: str | None = None, **extra: object
) -> AgentCoreError:
    with pytest.raises(AgentCoreError) as caught:
        parse(data, filename, content_type, **extra)
    assert caught.value.param == "file"
    return caught.value


def labels_of(document: ParsedDocument) -> list[tuple[int, str]]:
    return [(label.page, label.text) for label in document.labels]


# Word -----------------------------------------------------------------------------------


def test_word_pages_split_at_page_breaks_and_headings_label_their_text() -> None:
    document = parse(
        make_docx(
            [
                ("h1", "Travel policy"),
                "Trips abroad need the approval of a director.",
                ("h2", "Expenses"),
                "Meals are refunded up to thirty euros a day.",
                PAGE,
                "Hotels are refunded up to one hundred and twenty euros a night.",
                ("h2", "Managers"),
                [["Manager", "Site"], ["Ana Lima", "Porto"], ["Rui Costa", "Lisbon"]],
            ]
        ),
        "policy.docx",
    )
    assert document.content_type == DOCX
    assert len(document.pages) == 2
    assert document.pages[0].startswith("# Travel policy\n\nTrips abroad")
    assert "## Expenses\n\nMeals are refunded" in document.pages[0]
    assert document.pages[1].startswith("Hotels are refunded")
    # a table: each row with its header, the header row itself not repeated as data
    assert (
        "- Manager: Ana Lima; Site: Porto\n- Manager: Rui Costa; Site: Lisbon" in document.pages[1]
    )
    assert labels_of(document) == [(1, "Travel policy"), (1, "Expenses"), (2, "Managers")]
    chunks = chunk_pages(document.pages, labels=document.labels, target_chars=80, overlap_chars=0)
    hotel = next(c for c in chunks if "Hotels" in c.text)
    assert (hotel.pages, hotel.location) == ([2], "Expenses")  # the heading still in force
    rui = next(c for c in chunks if "Rui Costa" in c.text)
    assert (rui.pages, rui.location) == ([2], "Managers")


def test_word_rendered_page_breaks_count_and_a_doubled_mark_is_one_break() -> None:
    document = docx.Document()
    document.add_paragraph("The first page tells of the harbour.")
    # Word marks where it last laid a page out; after a hard break it marks the next page too
    document.add_paragraph().add_run().add_break(docx.enum.text.WD_BREAK.PAGE)
    second = document.add_paragraph()
    second.add_run()._r.append(OxmlElement("w:lastRenderedPageBreak"))
    second.add_run("The second page tells of the market.")
    third = document.add_paragraph("The third page starts mid-paragraph: ")
    third.add_run()._r.append(OxmlElement("w:lastRenderedPageBreak"))
    third.add_run("the lighthouse.")
    out = io.BytesIO()
    document.save(out)
    pages = parse(out.getvalue(), "story.docx").pages
    assert pages == [
        "The first page tells of the harbour.",
        "The second page tells of the market.\n\nThe third page starts mid-paragraph:",
        "the lighthouse.",
    ]


def _docx_with_merged_cell(span: str | None = None) -> bytes:
    """A table whose second row's first cell spans two columns (its ``gridSpan`` set to
    ``span`` when given, as a hostile file may write it)."""
    document = docx.Document()
    table = document.add_table(rows=2, cols=3)
    for column, name in enumerate(["Name", "Role", "Site"]):
        table.cell(0, column).text = name
    merged = table.cell(1, 0).merge(table.cell(1, 1))
    merged.text = "Ana (lead)"
    table.cell(1, 2).text = "Porto"
    if span is not None:
        merged._tc.tcPr.find(docx.oxml.ns.qn("w:gridSpan")).set(docx.oxml.ns.qn("w:val"), span)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def test_a_word_cell_spanning_columns_keeps_the_next_values_under_their_headers() -> None:
    assert parse(_docx_with_merged_cell(), "team.docx").pages == ["- Name: Ana (lead); Site: Porto"]


@pytest.mark.parametrize("span", ["100000000", "99999999999999999999", "x", "0", "-4"])
def test_a_word_cell_claiming_a_huge_or_broken_span_is_read_within_the_grid(span: str) -> None:
    # a hundred million columns would be as many values: 1.6 GB and ten seconds
    peak = _peak_rss_mb()
    pages = parse(_docx_with_merged_cell(span), "team.docx").pages
    assert _peak_rss_mb() - peak < 50
    # past the grid the cell covers what is left of it; a broken span covers one column
    assert pages == [WITHIN_GRID.get(span, "- Name: Ana (lead); Role: Porto")]


WITHIN_GRID = {"100000000": "- Name: Ana (lead); Column 4: Porto"}


# PowerPoint -----------------------------------------------------------------------------


def test_each_slide_is_a_page_with_its_title_body_table_and_notes() -> None:
    deck = make_pptx(
        [
            ("Welcome", "Agenda for the quarterly review", "Greet the board first."),
            ("Revenue", "Revenue grew eleven percent", None),
            ("Regions", "Sales by region", "Mention the new northern office."),
        ],
        table=[["Region", "Sales"], ["North", "1,200"], ["South", "900"]],
    )
    document = parse(deck, "review.pptx")
    assert document.content_type == PPTX
    assert len(document.pages) == 3
    assert labels_of(document) == [(1, "Slide 1"), (2, "Slide 2"), (3, "Slide 3")]
    assert document.pages[0] == (
        "# Welcome\n\nAgenda for the quarterly review\n\nNotes: Greet the board first."
    )
    assert document.pages[1] == "# Revenue\n\nRevenue grew eleven percent"
    assert "- Region: North; Sales: 1,200\n- Region: South; Sales: 900" in document.pages[2]
    assert document.pages[2].endswith("Notes: Mention the new northern office.")


def test_a_slide_is_read_as_python_pptx_reads_it() -> None:
    """Groups (nested too) in their place, a table's blank and merged cells, line breaks,
    runs, multi-paragraph titles and notes; a slide without a title placeholder, one
    whose title is empty, and one whose notes slide holds no text."""
    deck = pptx.Presentation()
    first = deck.slides.add_slide(deck.slide_layouts[1])
    first.shapes.title.text = "Quarter  review\nline two"
    body = first.placeholders[1].text_frame
    body.text = "First para"
    paragraph = body.add_paragraph()
    paragraph.text = "second\vwith break"
    paragraph.add_run().text = "  run  tail "
    body.add_paragraph()
    group = first.shapes.add_group_shape()
    group.shapes.add_textbox(0, 0, 10, 10).text_frame.text = "in group"
    group.shapes.add_group_shape().shapes.add_textbox(0, 0, 10, 10).text_frame.text = "nested"
    group.shapes.add_shape(1, 0, 0, 10, 10)  # a shape without text
    table = first.shapes.add_table(3, 3, 0, 0, 100_000, 100_000).table
    for row in range(3):
        for column in range(3):
            table.cell(row, column).text = "" if (row, column) == (1, 1) else f"c{row}{column}"
    table.cell(2, 0).merge(table.cell(2, 1))
    first.notes_slide.notes_text_frame.text = "notes  here\nsecond line"
    blank = deck.slides.add_slide(deck.slide_layouts[6])
    blank.shapes.add_textbox(0, 0, 10, 10).text_frame.text = "blank slide text"
    deck.slides.add_slide(deck.slide_layouts[5]).shapes.title.text = ""
    last = deck.slides.add_slide(deck.slide_layouts[1])
    last.placeholders[1].text = "body only"
    assert last.notes_slide.notes_text_frame.text == ""
    out = io.BytesIO()
    deck.save(out)
    document = parse(out.getvalue(), "deck.pptx")
    assert document.pages == [
        "# Quarter review line two\n\nFirst para\nsecond with break run tail\n\nin group"
        "\n\nnested\n\n- c00: c10; c02: c12\n- c00: c20 c21; c02: c22"
        "\n\nNotes: notes here second line",
        "blank slide text",
        "",
        "body only",
    ]
    assert labels_of(document) == [(n, f"Slide {n}") for n in range(1, 5)]


_PML = "{http://schemas.openxmlformats.org/presentationml/2006/main}"


def test_a_title_placeholder_is_found_by_its_index_however_it_is_written() -> None:
    deck = pptx.Presentation()
    for index in ("00", None):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = f"Title {index}"
        slide.placeholders[1].text = "Body"
        if index is not None:
            slide.shapes.title.element.find(f".//{_PML}ph").set("idx", index)
    out = io.BytesIO()
    deck.save(out)
    document = parse(out.getvalue(), "titles.pptx")
    assert document.pages == ["# Title 00\n\nBody", "# Title None\n\nBody"]


# Excel ----------------------------------------------------------------------------------


def test_each_sheet_is_a_page_its_rows_written_with_their_headers() -> None:
    workbook = make_xlsx(
        {
            "Warehouses": [
                ["Warehouse list, March"],  # a title above the header
                ["Manager", "Site", "Opened", "Open"],
                ["Ana", "Porto", datetime.date(2019, 5, 2), True],
                ["Rui", None, 2.50, False],
            ],
            "Empty": [],
        }
    )
    document = parse(workbook, "sites.xlsx")
    assert document.content_type == XLSX
    assert labels_of(document) == [(1, "Sheet Warehouses"), (2, "Sheet Empty")]
    assert document.pages[0] == (
        "# Warehouses\n\nWarehouse list, March\n"
        "- Manager: Ana; Site: Porto; Opened: 2019-05-02; Open: TRUE\n"
        "- Manager: Rui; Opened: 2.5; Open: FALSE"
    )
    assert document.pages[1] == "# Empty"


def test_sheet_values_of_every_kind_are_written_as_a_reader_sees_them() -> None:
    """Whatever their type, spacing or emptiness, and whatever the header names hold
    (``%``, braces), each value is written folded, empty ones left out."""
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.title = "Tricky"
    sheet.append(["Report title"])
    sheet.append(["Name %s", "Val {0}", "When", "Flag", "", "Note"])
    for row in [
        ["Ana", 1.0, datetime.date(2024, 3, 1), True, "x", "plain"],
        [" Bob", 0.1 + 0.2, datetime.datetime(2024, 3, 1, 10, 30), False, None, "two  spaces"],
        ["Cy ", 12345678901234567890, datetime.datetime(2024, 3, 1), None, 5, "tab\there"],
        ["Di", -2.5e-7, datetime.time(10, 30), "", "", "new\nline"],
        ["Ed", 3, datetime.date(2020, 1, 1), "y", "z", "nbsp\u00a0here"],
        ["Fa", 1e16, "text", "a ; b", "semi;colon", "end "],
        ["Gi", 42.0, datetime.date(2021, 5, 5), "q", "r", "s", "extra col", "more"],
        [None] * 6,
        ["   ", 7.25, datetime.date(2021, 5, 6), "w", "v", "u"],
        ["Ho", 8, datetime.timedelta(days=1, hours=6), "k", "l", "m"],
    ]:
        sheet.append(row)
    out = io.BytesIO()
    workbook.save(out)
    document = parse(out.getvalue(), "tricky.xlsx")
    head = "- Name %s: "
    assert document.pages == [
        "# Tricky\n\nReport title\n"
        f"{head}Ana; Val {{0}}: 1; When: 2024-03-01; Flag: TRUE; Column 5: x; Note: plain\n"
        f"{head}Bob; Val {{0}}: 0.3; When: 2024-03-01 10:30:00; Flag: FALSE;"
        " Note: two spaces\n"
        f"{head}Cy; Val {{0}}: 1.23456789012346e+19; When: 2024-03-01; Column 5: 5;"
        " Note: tab here\n"
        f"{head}Di; Val {{0}}: -2.5e-07; When: 10:30:00; Note: new line\n"
        f"{head}Ed; Val {{0}}: 3; When: 2020-01-01; Flag: y; Column 5: z; Note: nbsp here\n"
        f"{head}Fa; Val {{0}}: 1e+16; When: text; Flag: a ; b; Column 5: semi;colon;"
        " Note: end\n"
        f"{head}Gi; Val {{0}}: 42; When: 2021-05-05; Flag: q; Column 5: r; Note: s;"
        " Column 7: extra col; Column 8: more\n"
        "- Val {0}: 7.25; When: 2021-05-06; Flag: w; Column 5: v; Note: u\n"
        f"{head}Ho; Val {{0}}: 8; When: 1 day, 6:00:00; Flag: k; Column 5: l; Note: m"
    ]


def test_a_one_column_sheet_takes_its_first_row_as_the_header() -> None:
    document = parse(make_xlsx({"Single": [["only"], ["one"], ["column"], [3.0]]}), "one.xlsx")
    assert document.pages == ["# Single\n\n- only: one\n- only: column\n- only: 3"]


def test_rows_written_in_batches_still_heed_a_cancellation() -> None:
    cancellation = Cancellation()
    cancellation.cancel("test")
    rows = "".join(f"{n},row {n}\n" for n in range(1_000))
    with pytest.raises(Cancelled):
        parse(("id,name\n" + rows).encode(), "rows.csv", cancellation=cancellation)


def test_the_chunk_of_row_9000_of_a_long_sheet_says_its_columns() -> None:
    rows = [["Manager", "Site", "Stock"]] + [[f"M{n}", f"Site {n}", n * 3] for n in range(1, 9_501)]
    document = parse(make_xlsx({"Stock": [["Other"], ["x", "y"]], "Warehouses": rows}), "big.xlsx")
    chunks = chunk_pages(
        document.pages, labels=document.labels, target_chars=700, overlap_chars=150
    )
    assert len(chunks) > 100
    row = next(c for c in chunks if "Manager: M9000;" in c.text)
    assert "Manager: M9000; Site: Site 9000; Stock: 27000" in row.text
    assert (row.pages, row.location) == ([2], "Sheet Warehouses")
    # every chunk of the sheet names the columns of every value it holds
    for chunk in chunks[1:]:
        assert chunk.text.count("Manager: ") == chunk.text.count("Stock: ") > 0


def test_a_sheet_that_expands_past_the_text_budget_stops_with_413() -> None:
    rows = [["Name", "Note"]] + [[f"N{n}", "x" * 40] for n in range(5_000)]
    error = refusal(
        make_xlsx({"Big": rows}),
        "big.xlsx",
        budget=TextBudget(page_chars=1_000_000, total_chars=20_000),
    )
    assert (error.status, error.code) == (413, "too_large")
    assert "by sheet 1" in error.detail


# the budget's stop may land in a destructor (a ZipFile's __del__), which Python reports
# and ignores; the stop is raised again at the next poll (cpu_budget.py says why)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_reading_past_the_cpu_budget_is_too_complex() -> None:
    # 100,000 rows (written here as XML: openpyxl would take seconds) take calamine and
    # the rows' writing over a second of CPU, ten times the budget
    cells = "".join(
        f'<row r="{n}"><c r="A{n}" t="inlineStr"><is><t>N{n}</t></is></c>'
        f'<c r="B{n}" t="inlineStr"><is><t>note {n}</t></is></c></row>'
        for n in range(1, 100_001)
    )
    work = WorkBudget(cpu_seconds=0.1, page_cpu_seconds=5, page_operators=10, page_xobjects=10)
    error = refusal(make_xlsx_of_sheet(sheet_xml(cells)), "big.xlsx", work=work)
    assert (error.status, error.code) == (413, "too_complex")


def test_a_sheet_starting_past_column_a_names_blank_headers_by_their_column() -> None:
    cells = (
        '<row r="4"><c r="C4" t="inlineStr"><is><t>Site</t></is></c><c r="E4" t="inlineStr">'
        '<is><t>Stock</t></is></c></row><row r="5"><c r="C5" t="inlineStr"><is><t>Porto</t>'
        '</is></c><c r="D5"><v>7</v></c><c r="E5"><v>12.5</v></c></row>'
    )
    document = parse(make_xlsx_of_sheet(sheet_xml(cells)), "stock.xlsx")
    assert document.pages == ["# Data\n\n- Site: Porto; Column 4: 7; Stock: 12.5"]


# calamine makes a sheet one grid from its first cell to its last: two cells far apart
# would ask it for 17 billion (550 GB), and a failed allocation aborts the process
_FAR = '<row r="1048576"><c r="XFD1048576"><v>1</v></c></row>'
_SPREADSHEET = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"


def _mismatched(xml: bytes) -> bytes:
    """``xml`` no longer well-formed (its last end tag misnamed), as calamine still reads it."""
    return xml.replace(b"</worksheet>", b"</worksheets>")


@pytest.mark.parametrize(
    "xml",
    [
        sheet_xml('<row r="1"><c r="A1"><v>1</v></c></row>' + _FAR),  # as Excel writes
        sheet_xml("<row><c><v>1</v></c></row>" + _FAR),  # a cell placed by the one before
        sheet_xml('<row r="1"><c r="A1"><v>1</v></c><c r="B1" r="XFD1048576"><v>2</v></c></row>'),
        _mismatched(sheet_xml('<row r="1"><c r="A1"><v>1</v></c></row>' + _FAR)),
        (  # prefixed tags
            f'<x:worksheet xmlns:x="{_SPREADSHEET}"><x:sheetData><x:row r="1"><x:c r="A1">'
            '<x:v>1</x:v></x:c></x:row><x:row r="1048576"><x:c r="XFD1048576"><x:v>1</x:v>'
            "</x:c></x:row></x:sheetData></x:worksheet>"
        ).encode(),
    ],
    ids=["references", "no-reference", "two-references", "not-well-formed", "prefixed"],
)
def test_a_sheet_of_cells_far_apart_is_refused_before_calamine_reads_it(xml: bytes) -> None:
    error = refusal(make_xlsx_of_sheet(xml), "far.xlsx")
    assert (error.status, error.code) == (413, "too_large")
    assert "10,000,000 cells" in error.detail and "xl/worksheets/sheet1.xml" in error.detail


def _v(n: int) -> str:
    return f"<v>{n}</v>"


@pytest.mark.parametrize(
    ("xml", "exact"),
    [
        (
            sheet_xml(
                f'<row r="2"><c r="B2">{_v(1)}</c><c r="D2">{_v(2)}</c></row>'
                f'<row r="5"><c r="C5">{_v(3)}</c></row>'
            ),
            True,
        ),
        (sheet_xml(f"<row><c>{_v(1)}</c><c>{_v(2)}</c></row><row><c>{_v(3)}</c></row>"), True),
        (
            sheet_xml(
                f'<row r="3"><c r="C3">{_v(1)}</c><c>{_v(2)}</c><c>{_v(3)}</c></row>'
                f'<row/><row><c s="1">{_v(4)}</c></row><row r="9"><c>{_v(5)}</c></row>'
            ),
            True,
        ),
        (  # a row before <sheetData> does not count; a <c> nested in another element does
            (
                f'<worksheet xmlns="{_SPREADSHEET}"><sheetPr><row r="900"/></sheetPr><sheetData>'
                f'<row><c>{_v(1)}</c><x><c>{_v(2)}</c></x></row><row><c r="D4">{_v(3)}</c></row>'
                "</sheetData></worksheet>"
            ).encode(),
            True,
        ),
        (
            _mismatched(
                sheet_xml(
                    f'<row r="2"><c r="B2">{_v(1)}</c></row><row><c>{_v(2)}</c><c>{_v(3)}</c></row>'
                )
            ),
            False,
        ),
    ],
    ids=["references", "no-references", "mixed", "outside-sheetData", "not-well-formed"],
)
def test_the_grid_measured_is_never_smaller_than_the_one_calamine_builds(
    xml: bytes, exact: bool
) -> None:
    import python_calamine

    data = make_xlsx_of_sheet(xml)
    sheet = python_calamine.CalamineWorkbook.from_filelike(io.BytesIO(data)).get_sheet_by_name(
        "Data"
    )
    built = sheet.height * sheet.width
    assert built > 1
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        with pytest.raises(PayloadTooLarge):
            verify_archive(archive, ArchiveLimits(sheet_cells=built - 1), workbook=True)
        if exact:  # measured cell by cell, as calamine places them
            verify_archive(archive, ArchiveLimits(sheet_cells=built), workbook=True)


def _quick(xml: bytes, chunk: int = 64 * 1024) -> SheetGrid | None:
    grid = QuickGrid()
    for at in range(0, len(xml), chunk):
        grid.feed(xml[at : at + chunk])
    return grid.result()


def test_the_quick_bound_reads_the_lengths_of_references_in_any_chunking() -> None:
    cells = "".join(
        f'<row r="{n}"><c r="A{n}" s="1"><v>{n}</v></c><c r="AB{n}" t="s"><v>0</v></c></row>'
        for n in range(1, 1_200)
    )
    xml = sheet_xml(cells)
    whole = _quick(xml)
    assert whole == SheetGrid(0, 9_998, 0, 26 + 26 * 26 - 1, 2 * 1_199)  # 4 digits, 2 letters
    assert all(_quick(xml, size) == whole for size in (1, 7, 100, 4096))  # tags cut anywhere
    assert _quick(sheet_xml("")) == SheetGrid()
    # seven digits bound, eight are for the exact reading (calamine wraps them)
    assert _quick(sheet_xml('<row><c r="XFD1048576"/></row>')) == SheetGrid(
        0, 9_999_998, 0, 18_278 - 1, 1
    )
    assert _quick(sheet_xml('<row><c r="A12345678"/></row>')) is None


@pytest.mark.parametrize(
    ("references", "bound"),
    [
        (["A1", "B22", "C4444"], (9_998, 25)),  # one letter each: digits read at once
        (["AB1", "CD55"], (98, 26 + 26 * 26 - 1)),  # two letters each
        (["AB1", "C1234567"], (9_999_998, 26 + 26 * 26 - 1)),  # the most digits, fewer letters
        (["XFD1", "A55"], (98, 18_278 - 1)),
        (["AB12345678"], None),  # eight digits: the exact reading
        (["A1", "B"], None),  # no digit
        (["A1", "ABCD1"], None),  # four letters
    ],
)
def test_the_quick_bound_takes_the_most_letters_and_the_most_digits(
    references: list[str], bound: tuple[int, int] | None
) -> None:
    xml = sheet_xml(
        "<row>" + "".join(f'<c r="{ref}"><v>1</v></c>' for ref in references) + "</row>"
    )
    expected = None if bound is None else SheetGrid(0, bound[0], 0, bound[1], len(references))
    assert _quick(xml) == expected


@pytest.mark.parametrize(
    "cells",
    [
        '<row><c r="A1" s="1" r="XFD9"><v>1</v></c></row>',  # calamine places it at the last r
        '<row><c r="A1"><v>1</v></c><c r="B1"  r = "C9"><v>2</v></c></row>',
        "<row><c r='A1' r='D4'><v>1</v></c></row>",
        '<row><c r="A1"/><c s="1"><v>2</v></c></row>',  # placed after the cell before it
        "<row><c><v>2</v></c></row>",
        '<row><c r="a1"><v>1</v></c></row>',  # lower case: calamine reads it
        '<row><c  r="A1"><v>1</v></c></row>',
    ],
)
def test_the_quick_bound_leaves_cells_written_otherwise_to_the_exact_reading(cells: str) -> None:
    assert _quick(sheet_xml(cells)) is None
    data = make_xlsx_of_sheet(sheet_xml(cells))
    with zipfile.ZipFile(io.BytesIO(data)) as archive:  # measured exactly instead
        verify_archive(archive, ArchiveLimits(sheet_cells=10 * 18_278), workbook=True)


def test_the_quick_bound_finds_a_later_r_however_the_part_is_cut() -> None:
    # a ">" inside a value: a piece may end inside the tag, even between "r" and "="
    xml = sheet_xml('<row><c r="A1" s=">" r="XFD1048576"><v>1</v></c></row>')
    assert all(_quick(xml, size) is None for size in range(1, len(xml) + 1))


@pytest.mark.parametrize("shift", range(0, 60, 7))
def test_the_quick_bound_reads_a_part_of_many_pieces_wherever_they_end(shift: int) -> None:
    # the bound reads pieces of PIECE_BYTES or more, gathered from the 64 KiB the guard
    # inflates at a time: a later r and a long reference are found across their ends
    rows = "".join(f'<row r="{n}"><c r="A{n}" s="1"><v>{n}</v></c></row>' for n in range(2, 6000))
    head = f'<row r="1"><c r="A1" t="inlineStr"><is><t>{"x" * shift}</t></is></c></row>'
    usual = sheet_xml(head + rows)
    assert len(usual) > 2 * PIECE_BYTES
    whole = _quick(usual, len(usual))
    assert whole == SheetGrid(0, 9_998, 0, 25, 5_999)
    assert all(_quick(usual, size) == whole for size in (7, 4096, 65536, 200_000))
    position = PIECE_BYTES - 40  # the hostile tag straddles where a piece may end
    filler = usual[: usual.rindex(b"<row", 0, position)]
    for tail in (
        '<row><c r="A1" s=">" r="XFD1048576"><v>1</v></c></row>',
        '<row><c r="AAAA1"/></row>',
    ):
        hostile = filler + tail.encode() + b"</sheetData></worksheet>"
        assert all(_quick(hostile, size) is None for size in (7, 4096, 65536)), tail


def test_a_long_sheet_past_the_quick_bound_is_measured_exactly_not_refused() -> None:
    # a 200,000-row column: its bound (a million rows of 26 columns) passes the limit,
    # its grid (200,000 x 2 cells) does not
    xml = sheet_xml(
        '<row r="1"><c r="A1"><v>1</v></c><c r="B1"><v>1</v></c></row>'
        '<row r="200000"><c r="A200000"><v>2</v></c></row>'
    )
    bound = _quick(xml)
    assert bound is not None and bound.size > 10_000_000
    data = make_xlsx_of_sheet(xml)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        verify_archive(archive, ArchiveLimits(sheet_cells=400_000), workbook=True)
        with pytest.raises(PayloadTooLarge):
            verify_archive(archive, ArchiveLimits(sheet_cells=399_999), workbook=True)


@pytest.mark.parametrize(
    ("tail", "chunk", "declares"),
    [
        (b"<a>text</a><!", b"DOCTYPE x []><a/>", True),  # cut inside the declaration
        (b"<a>text</a><", b"!doctype x><a/>", True),
        (b"", "<!DOCTYPE x>".encode("utf-16-le"), True),
        (b"<a>Hello!</a>", b"<b>world!</b>", False),  # a ! in text only
        (b"<a>", b"<b>no bang at all</b>", False),
        (b"", b"<!-- a comment --><a/>", False),
    ],
)
def test_a_dtd_is_found_across_a_chunk_boundary(tail: bytes, chunk: bytes, declares: bool) -> None:
    assert _declares_dtd(tail[-24:], chunk) is declares


# CSV and HTML ---------------------------------------------------------------------------


def test_csv_rows_carry_their_header_whatever_the_delimiter() -> None:
    for separator in (",", ";", "\t"):
        data = (
            separator.join(["Manager", "Site"])
            + "\n"
            + separator.join(["Ana", '"Porto, north"'])
            + "\n"
        )
        document = parse(data.encode(), "sites.csv")
        assert document.content_type == CSV
        assert document.pages == ["- Manager: Ana; Site: Porto, north"]
        assert document.labels == []


REPORT_PAGE = b"""<!DOCTYPE html><html><head><title>Q3 &amp; Q4 report</title>
    <style>p { color: red }</style><script>var secret = "leak";</script></head>
    <body><header><nav><a href="/">Home</a></nav>Site banner</header>
    <noscript>Enable scripts</noscript><template><p>Hidden template</p></template>
    <main><article><header><h1>Results</h1></header>
    <p>Revenue grew&nbsp;11&#37; in the third quarter.</p>
    <h2>Expenses</h2><p>Travel costs fell by a third.</p>
    <table><tr><th>Region</th><th>Sales</th></tr><tr><td>North</td><td>1,200</td></tr></table>
    <p hidden>Not shown</p><input hidden><br/><img src="x.png"></article></main>
    <aside>Advertisement</aside><footer>Copyright 2024</footer></body></html>"""


def test_html_keeps_the_reading_text_and_its_headings_without_code_or_chrome() -> None:
    page = REPORT_PAGE
    document = parse(page, "report.html")
    assert document.content_type == HTML
    assert document.pages == [
        "# Q3 & Q4 report\n\n# Results\n\nRevenue grew 11% in the third quarter.\n\n"
        "## Expenses\n\nTravel costs fell by a third.\n\n- Region: North; Sales: 1,200"
    ]
    assert labels_of(document) == [(1, "Q3 & Q4 report"), (1, "Results"), (1, "Expenses")]
    chunks = chunk_pages(document.pages, labels=document.labels, target_chars=60, overlap_chars=0)
    assert [c.location for c in chunks if "Travel" in c.text] == ["Expenses"]


DECODED_PAGES = [
    "<!doctype html><p>Café à côté</p>".encode(),  # UTF-8, no charset declared
    '<!doctype html><meta charset="windows-1252"><p>Café à côté</p>'.encode("cp1252"),
    b"\xff\xfe" + "<!doctype html><p>Café à côté</p>".encode("utf-16-le"),  # a BOM
]


@pytest.mark.parametrize("data", DECODED_PAGES, ids=["utf-8", "meta-charset", "utf-16-bom"])
def test_html_is_decoded_as_a_browser_decodes_it(data: bytes) -> None:
    assert parse(data, "page.html").pages == ["Café à côté"]


@pytest.mark.parametrize(
    "page",
    [REPORT_PAGE, *DECODED_PAGES],
    ids=["report", "utf-8", "meta-charset", "utf-16-bom"],
)
def test_a_page_read_as_a_stream_of_tags_reads_as_lexbor_reads_it(
    page: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    read = parse(page, "page.html")
    monkeypatch.setattr(_markup, "_LEXBOR_DEPTH", -1)  # every page read without lexbor
    streamed = parse(page, "page.html")
    assert (streamed.pages, streamed.labels) == (read.pages, read.labels)


def test_a_page_nested_too_deep_for_lexbor_is_read_as_a_stream_of_tags(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # lexbor's tree costs time quadratic in its depth: a minute for these 2 MB
    deep = 200_000
    page = (
        "<!doctype html><title>Deep</title><body>"
        + "<div>" * deep
        + "<script>var x;</script>Found at the bottom."
        + "</div>" * deep
    ).encode()
    assert _markup._nesting_bound(page) > _markup._LEXBOR_DEPTH

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("lexbor was asked to build the tree")

    monkeypatch.setattr("selectolax.lexbor.LexborHTMLParser", refused)
    assert parse(page, "deep.html").pages == ["# Deep\n\nFound at the bottom."]


def test_the_nesting_bound_counts_only_elements_that_nest() -> None:
    bound = _markup._nesting_bound
    many = 6_000  # past the few tags that cannot nest deep whatever they are
    assert bound(b"<p>a<li>b<br><img src=x><td>c</TD>" * many) == 0
    assert bound(b"<div><span>x</span></div>" * many) == 2
    assert bound(b"<DIV><Section>" * many) == 2 * many  # never closed
    assert bound(b"<optgroupx><optgroup><colgroup>" * many) == many  # a longer name
    assert bound(b"<div>" * 100) == 0  # too few tags to reckon


# how a file is recognised ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("filename", "content_type", "expected"),
    [
        ("upload", None, DOCX),  # by the bytes alone
        ("upload", "application/octet-stream", DOCX),
        ("report.pdf", "application/pdf", DOCX),  # the bytes win over a wrong label
        ("report.bin", "application/zip", DOCX),
    ],
)
def test_an_office_file_is_known_by_its_bytes(
    filename: str, content_type: str | None, expected: str
) -> None:
    assert parse(make_docx(["Hello there."]), filename, content_type).content_type == expected


@pytest.mark.parametrize(
    ("data", "filename", "content_type", "expected"),
    [
        (b"  <!doctype HTML><p>Hi there.</p>", "upload", None, HTML),  # sniffed
        (b"<html><body>Hi there.</body></html>", "notes.txt", "text/plain", HTML),
        (b"<p>Hi there.</p>", "fragment", "text/html", HTML),  # declared
        (b"<p>Hi there.</p>", "page.htm", None, HTML),  # by extension
        (b"<p>Hi there.</p>", "page.txt", None, "text/plain"),
        (b"a,b\n1,2\n", "data", "text/csv; charset=utf-8", CSV),
        (b"a,b\n1,2\n", "data.csv", "application/vnd.ms-excel", CSV),  # Windows' label
        (b"a,b\n1,2\n", "data.csv", None, CSV),
    ],
)
def test_text_formats_are_known_by_sniffing_label_or_extension(
    data: bytes, filename: str, content_type: str | None, expected: str
) -> None:
    assert parse(data, filename, content_type).content_type == expected


def test_labelled_office_files_that_are_not_readable_are_422() -> None:
    good = make_docx(["Hello there."])
    for data, name in [
        (b"Just some words.", "report.docx"),
        (good[: len(good) // 2], "report.docx"),  # truncated: no directory
        (good[:30] + b"\x00" * 200 + good[230:], "report.docx"),  # corrupt member data
    ]:
        error = refusal(data, name)
        assert (error.status, error.code) == (422, "invalid_file"), name


def test_an_unknown_format_is_415_listing_every_readable_one() -> None:
    error = refusal(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40, "photo.png", "image/png")
    assert (error.status, error.code) == (415, "unsupported_file_type")
    for name in (
        "PDF",
        "Word (.docx)",
        "PowerPoint (.pptx)",
        "Excel (.xlsx)",
        "CSV",
        "HTML",
        "Markdown",
    ):
        assert name in error.detail


@pytest.mark.parametrize(
    ("module", "data", "filename"),
    [
        ("python_calamine", make_xlsx({"A": [["a", "b"], [1, 2]]}), "a.xlsx"),
        ("selectolax", b"<!doctype html><p>Hi there.</p>", "upload"),  # sniffed
        ("selectolax", b"<p>Hi there.</p>", "page.html"),  # by extension
    ],
)
def test_without_the_office_extra_an_office_or_html_upload_is_415_naming_it(
    monkeypatch: pytest.MonkeyPatch, module: str, data: bytes, filename: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # as if it were not installed
    error = refusal(data, filename)
    assert (error.status, error.code) == (415, "unsupported_file_type")
    assert "office extra" in error.detail and "agentcore-service[office]" in error.detail


# hostile files ----------------------------------------------------------------------------


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_a_zip_bomb_is_refused_before_it_is_inflated() -> None:
    bomb = make_zip_bomb()  # about 2 MB holding 1.6 GB of document XML
    assert len(bomb) < 2_500_000
    peak = _peak_rss_mb()
    error = refusal(bomb, "bomb.docx")
    assert (error.status, error.code) == (413, "too_large")
    assert _peak_rss_mb() - peak < 200


def test_an_archive_that_lies_about_its_sizes_is_never_inflated_past_them() -> None:
    peak = _peak_rss_mb()
    error = refusal(make_lying_docx(), "liar.docx")  # declares 1 KiB, holds 1.6 GB
    assert (error.status, error.code) == (422, "invalid_file")
    assert _peak_rss_mb() - peak < 200


def _long_sheet(rows: int = 60_000) -> bytes:
    """A workbook whose sheet inflates to a few MB: inflated on a thread of its own."""
    cells = "".join(f'<row r="{n}"><c r="A{n}"><v>{n}</v></c></row>' for n in range(1, rows))
    return make_xlsx_of_sheet(sheet_xml(cells))


def _inflating_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "agentcore-inflate"]


def test_a_large_member_is_inflated_ahead_and_measured_as_a_small_one() -> None:
    data = _long_sheet()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.getinfo("xl/worksheets/sheet1.xml").file_size > 2 * 1024 * 1024
        verify_archive(archive, ArchiveLimits(), workbook=True)
        with pytest.raises(PayloadTooLarge, match="sheet of more than"):
            verify_archive(archive, ArchiveLimits(sheet_cells=59_000), workbook=True)
    assert parse(data, "long.xlsx").pages[0].count("\n- ") > 50_000
    assert not _inflating_threads()


def test_where_no_thread_can_start_the_reader_inflates_the_member_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refused(thread: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refused)
    data = _long_sheet()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        verify_archive(archive, ArchiveLimits(), workbook=True)
        with pytest.raises(PayloadTooLarge, match="sheet of more than"):
            verify_archive(archive, ArchiveLimits(sheet_cells=59_000), workbook=True)


def test_a_refusal_while_a_large_member_inflates_stops_its_thread() -> None:
    data = _long_sheet()
    calls = 0

    def cancel_later() -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise Cancelled("stop")

    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        with pytest.raises(PayloadTooLarge, match="more than 1,048,576 bytes"):
            verify_archive(archive, ArchiveLimits(total_bytes=1024 * 1024), workbook=True)
        assert not _inflating_threads()  # it stopped with its reader, chunks ahead
        with pytest.raises(Cancelled):
            verify_archive(archive, ArchiveLimits(), cancel_later, workbook=True)
        assert not _inflating_threads()


def test_a_large_member_that_cannot_be_inflated_is_invalid_not_a_crash() -> None:
    data = bytearray(_long_sheet())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as archive:
        member = archive.getinfo("xl/worksheets/sheet1.xml")
        start = member.header_offset + 30 + len(member.filename) + len(member.extra)
    middle = start + member.compress_size // 2
    data[middle : middle + 64] = bytes(64)  # corrupt deflate data, or a wrong checksum
    with (
        zipfile.ZipFile(io.BytesIO(bytes(data))) as archive,
        pytest.raises(AgentCoreError) as raised,
    ):
        verify_archive(archive, ArchiveLimits(), workbook=True)
    assert (raised.value.status, raised.value.code) == (422, "invalid_file")
    assert not _inflating_threads()


def test_an_archive_of_too_many_members_is_refused_from_its_directory() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        for n in range(10_001):
            archive.writestr(f"word/m{n}.xml", "")
    error = refusal(out.getvalue(), "many.docx")
    assert (error.status, error.code) == (413, "too_large")
    assert "members" in error.detail


def test_billion_laughs_are_refused_without_being_expanded() -> None:
    peak = _peak_rss_mb()
    error = refusal(make_laughs_docx(), "laughs.docx")
    assert (error.status, error.code) == (422, "invalid_file")
    assert "DTD" in error.detail
    assert _peak_rss_mb() - peak < 200


# labels in the chunker --------------------------------------------------------------------


def test_a_labelled_part_starts_a_chunk_located_by_its_label() -> None:
    pages = ["Alpha one. Alpha two.", "Beta one. Beta two. Beta three.", "Gamma one."]
    labels = [Label(1, 0, "First"), Label(2, 10, "Second half"), Label(3, 0, "Third")]
    chunks = chunk_pages(pages, labels=labels, target_chars=25, overlap_chars=10)
    assert [(c.text, c.pages, c.location) for c in chunks] == [
        ("Alpha one. Alpha two.", [1], "First"),
        ("Beta one.", [2], "First"),  # page 2 starts before its label
        ("Beta two. Beta three.", [2], "Second half"),  # nothing carried over a part's start
        ("Gamma one.", [3], "Third"),
    ]
    one = "One short page. Then a second sentence."
    assert chunk_pages([one], labels=[Label(1, 0, "Only")])[0].location == "Only"
    assert chunk_pages([one])[0].location is None
    inner = chunk_pages([one], labels=[Label(1, 0, "A"), Label(1, 16, "B")])
    assert [(c.text, c.location) for c in inner] == [
        ("One short page.", "A"),
        ("Then a second sentence.", "B"),
    ]


def test_each_value_of_a_row_is_written_on_one_line_with_its_column() -> None:
    """Whatever whitespace a cell holds (line breaks, tabs, Unicode spaces, NULs), the row
    is one line of ``name: value`` pairs, each value folded as ``fold_spaces`` folds it,
    whether the row's line template wrote it or its values one by one."""
    import random

    from agentcore.knowledge.ingest._extraction import Pages, fold_spaces
    from agentcore.knowledge.ingest._tables import Rows

    pieces = [
        *("a", "b", ";", "%s", "{}", " ", "  ", "\t", "\n", "\r", "\x0b", "\x1f", "\u00a0"),
        *("\u2003", "\x00", "\u200b", "\u2028"),
    ]
    chance = random.Random(7)
    for _ in range(3_000):
        row = [
            "".join(chance.choices(pieces, k=chance.randint(0, 5)))
            for _ in range(chance.randint(2, 4))
        ]
        pages = Pages("sheet", "Sheet")
        rows = Rows(pages)
        rows.add(["h1", "h2", "h3", "h4"])
        rows.add(row)
        rows.close()
        [text], _ = pages.finish()
        folded = [fold_spaces(value) for value in row]
        pairs = [f"h{n}: {v}" for n, v in enumerate(folded, 1) if v]
        expected = "h1; h2; h3; h4" if not pairs else "- " + "; ".join(pairs)
        assert text == expected, row


@pytest.mark.parametrize("seed", range(4))
def test_rows_written_at_once_are_the_lines_written_one_by_one(seed: int) -> None:
    """``Rows.add_many`` writes what ``add`` writes row by row, for runs of rows its one
    template fits (a sheet's usual rows) and for those it does not: a blank or padded
    value, a line break or a control character in one, a value of another type in a
    column, non-ASCII text, rows of two widths, titles above the header."""
    import random

    from agentcore.knowledge.ingest._extraction import Pages
    from agentcore.knowledge.ingest._office import _CELL_SPECS, _CELLS_AS_TEXT, _cell_text
    from agentcore.knowledge.ingest._tables import Rows

    chance = random.Random(seed)
    odd = ["", " x", "x ", "a  b", "a\nb", "a\tb", "\x7f", "é", "Ω ω", None, True, 2, 3.0]
    odd += [datetime.datetime(2024, 5, 1), datetime.datetime(2024, 5, 1, 9, 30)]

    def usual(column: int, n: int) -> object:
        return [f"name {n}", float(n) + 0.25, datetime.date(2024, 1, 1 + n % 28)][column % 3]

    width = 1 + seed
    table: list[list[object]] = [["Title"], [f"col {c}" for c in range(width)]]
    # every other run of 64 rows holds one odd value (each in turn) or a shorter row
    for run in range(2 * len(odd) + 2):
        rows = [[usual(column, 64 * run + n) for column in range(width)] for n in range(64)]
        if run % 2:
            row = rows[chance.randrange(64)]
            if run // 2 < len(odd):
                row[chance.randrange(width)] = odd[run // 2]
            else:
                row.pop()
        table += rows
    if (width - 1) % 3 == 0:  # the last column holds text: a run whose last line ends padded
        table[2 + 63][-1] = "x "

    def written(at_once: bool) -> str:
        pages = Pages("sheet", "Sheet")
        rows = Rows(pages, specs=_CELL_SPECS, as_text=_CELLS_AS_TEXT)
        if at_once:
            rows.add_many(table[:2], _cell_text)  # the titles and the header
            for start in range(2, len(table), 64):
                rows.add_many(table[start : start + 64], _cell_text)
        else:
            for row in table:
                rows.add(row, _cell_text)
        rows.close()
        [text], _ = pages.finish()
        return text

    one_by_one = written(False)
    assert one_by_one.count("\n- ") > 64 * 2 * len(odd) - 10  # the rows, with their columns
    assert written(True) == one_by_one
