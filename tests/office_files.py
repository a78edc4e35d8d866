"""Small real Office files for tests, made with python-docx, python-pptx and openpyxl, and
hostile ones made with zipfile: a zip bomb, a billion-laughs document, a lying archive,
a workbook whose cells all show one long shared string.

``make_docx(blocks)`` writes headings (``("h1", "Expenses")``), paragraphs (a plain
string), page breaks (``PAGE``) and tables (a list of rows); ``make_pptx(slides)`` one
slide per ``(title, body, notes)``, ``make_xlsx({sheet: rows})`` one sheet per entry,
``make_xlsx_of_sheet(xml)`` a workbook whose one sheet is the worksheet XML given,
``make_xlsx_of_strings(table, xml)`` one with a shared strings part too.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from typing import Any

import docx
import openpyxl
import pptx
from docx.enum.text import WD_BREAK

__all__ = [
    "PAGE",
    "SLIDES",
    "make_docx",
    "make_laughs_docx",
    "make_lying_docx",
    "make_pptx",
    "make_shared_strings_bomb",
    "make_xlsx",
    "make_xlsx_of_sheet",
    "make_xlsx_of_strings",
    "make_zip_bomb",
    "shared_cells_xml",
    "shared_strings_xml",
    "sheet_xml",
]

PAGE = object()
"""A hard page break in ``make_docx``'s blocks."""

SLIDES: list[tuple[str, str, str | None]] = [
    ("Welcome", "The quarterly review opens with the safety record.", None),
    ("Parking", "Visitors park behind the north gate of the campus.", None),
    (
        "Generators",
        "The emergency generator is tested every Tuesday at seven by the facilities team.",
        "Remind the board that the test is noisy.",
    ),
]
"""Three slides for ``make_pptx``: the third's text (a generator tested on Tuesdays)
answers a question no other slide does, and it has speaker notes."""

MiB = 1024 * 1024


def make_docx(blocks: list[Any]) -> bytes:
    """A Word document of ``blocks``: ``str`` paragraphs, ``(hN, text)`` headings,
    ``PAGE`` breaks and tables (lists of rows, the first its header)."""
    document = docx.Document()
    for block in blocks:
        if block is PAGE:
            document.add_paragraph().add_run().add_break(WD_BREAK.PAGE)
        elif isinstance(block, tuple):
            document.add_heading(block[1], int(block[0][1:]))
        elif isinstance(block, list):
            table = document.add_table(rows=len(block), cols=len(block[0]))
            for r, row in enumerate(block):
                for c, value in enumerate(row):
                    table.cell(r, c).text = value
        else:
            document.add_paragraph(block)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def make_pptx(
    slides: list[tuple[str, str, str | None]], table: list[list[str]] | None = None
) -> bytes:
    """A deck with a slide per ``(title, body, notes)``; ``table`` goes on the last."""
    deck = pptx.Presentation()
    for title, body, notes in slides:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
        if notes:
            slide.notes_slide.notes_text_frame.text = notes
    if table:
        shape = deck.slides[-1].shapes.add_table(
            len(table), len(table[0]), 0, 0, 4_000_000, 800_000
        )
        for r, row in enumerate(table):
            for c, value in enumerate(row):
                shape.table.cell(r, c).text = value
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def make_xlsx(sheets: dict[str, list[list[Any]]]) -> bytes:
    """A workbook with a sheet per entry, its rows as given (the first its header)."""
    workbook = openpyxl.Workbook(write_only=True)
    for name, rows in sheets.items():
        sheet = workbook.create_sheet(name)
        for row in rows:
            sheet.append(row)
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def sheet_xml(cells: str) -> bytes:
    """Worksheet XML whose ``<sheetData>`` holds ``cells`` (rows and cells as written)."""
    return (
        '<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
        f"<sheetData>{cells}</sheetData></worksheet>"
    ).encode()


def make_xlsx_of_sheet(xml: bytes, strings: bytes | None = None) -> bytes:
    """A workbook of one sheet, ``Data``, whose worksheet XML is ``xml``; with
    ``strings``, that XML as its shared strings part (``xl/sharedStrings.xml``)."""
    original = zipfile.ZipFile(io.BytesIO(make_xlsx({"Data": [["x"]]})))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in original.namelist():
            data = xml if name == "xl/worksheets/sheet1.xml" else original.read(name)
            archive.writestr(name, data)
        if strings is not None:
            archive.writestr("xl/sharedStrings.xml", strings)
    return out.getvalue()


def make_xlsx_of_strings(strings: bytes, xml: bytes) -> bytes:
    """A workbook whose shared strings part is ``strings`` and whose one sheet is ``xml``."""
    return make_xlsx_of_sheet(xml, strings)


def shared_strings_xml(strings: list[str], prefix: str = "") -> bytes:
    """A shared strings part of ``strings`` in order (its tags prefixed ``prefix:``, as
    the Open XML SDK writes them, when given)."""
    tag = f"{prefix}:" if prefix else ""
    namespace = f"xmlns{':' + prefix if prefix else ''}"
    items = "".join(f"<{tag}si><{tag}t>{text}</{tag}t></{tag}si>" for text in strings)
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><{tag}sst {namespace}='
        f'"http://schemas.openxmlformats.org/spreadsheetml/2006/main">{items}</{tag}sst>'
    ).encode()


def shared_cells_xml(indexes: list[int], columns: int = 100) -> bytes:
    """Worksheet XML of cells of type ``s`` showing the shared strings ``indexes``, in
    rows of ``columns`` cells."""
    rows = []
    for start in range(0, len(indexes), columns):
        number = start // columns + 1
        cells = "".join(
            f'<c r="{_column_name(column)}{number}" t="s"><v>{index}</v></c>'
            for column, index in enumerate(indexes[start : start + columns])
        )
        rows.append(f'<row r="{number}">{cells}</row>')
    return sheet_xml("".join(rows))


def _column_name(column: int) -> str:
    name = ""
    column += 1
    while column:
        column, rest = divmod(column - 1, 26)
        name = chr(65 + rest) + name
    return name


def make_shared_strings_bomb(cells: int = 200_000, string_bytes: int = 50_000) -> bytes:
    """A workbook of about 400 KB whose ``cells`` cells all show one shared string of
    ``string_bytes`` bytes: calamine would copy it into each (10 GB by default)."""
    table = shared_strings_xml(["word " * (string_bytes // 5)])
    return make_xlsx_of_strings(table, shared_cells_xml([0] * cells))


def _with_document_xml(
    xml_member: tuple[bytes, int, int] | bytes, *, sizes: tuple[int, int] | None = None
) -> bytes:
    """A real .docx whose ``word/document.xml`` is replaced: by XML (compressed here), or
    by ``(raw deflate stream, crc, inflated size)``; ``sizes`` overrides the declared
    ``(compressed, inflated)`` sizes. The archive is written by hand: zipfile cannot
    take a member already compressed."""
    original = zipfile.ZipFile(io.BytesIO(make_docx(["Hello."])))
    members: list[tuple[str, bytes, int, int]] = []  # name, deflated, crc, size
    for name in original.namelist():
        if name == "word/document.xml":
            if isinstance(xml_member, bytes):
                packer = zlib.compressobj(9, zlib.DEFLATED, -15)
                deflated = packer.compress(xml_member) + packer.flush()
                members.append((name, deflated, zlib.crc32(xml_member), len(xml_member)))
            else:
                members.append((name, *xml_member))
        else:
            data = original.read(name)
            packer = zlib.compressobj(9, zlib.DEFLATED, -15)
            members.append(
                (name, packer.compress(data) + packer.flush(), zlib.crc32(data), len(data))
            )
    out = io.BytesIO()
    directory = []
    for name, deflated, crc, size in members:
        packed, unpacked = (len(deflated), size)
        if name == "word/document.xml" and sizes is not None:
            packed, unpacked = sizes
        encoded = name.encode()
        header = struct.pack(
            "<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0, crc, packed, unpacked, len(encoded), 0
        )
        directory.append(
            struct.pack(
                "<IHHHHHHIIIHHHHHII",
                0x02014B50,
                20,
                20,
                0,
                8,
                0,
                0,
                crc,
                packed,
                unpacked,
                len(encoded),
                0,
                0,
                0,
                0,
                0,
                out.tell(),
            )
            + encoded
        )
        out.write(header + encoded + deflated)
    start = out.tell()
    out.write(b"".join(directory))
    out.write(
        struct.pack(
            "<IHHHHIIH",
            0x06054B50,
            0,
            0,
            len(directory),
            len(directory),
            out.tell() - start,
            start,
            0,
        )
    )
    return out.getvalue()


_XML_HEAD = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
    b"<w:body><w:p><w:r><w:t>"
)
_XML_TAIL = b"</w:t></w:r></w:p></w:body></w:document>"


def _bomb_stream(total: int) -> tuple[bytes, int, int]:
    """A deflate stream of document XML holding ``total`` bytes of text, with its CRC and
    inflated size, made in a second: a 16 MiB block is compressed once (level 9, ending
    in a full flush, so its bytes stand alone) and repeated."""
    block = b"a" * (16 * MiB)
    count = total // len(block)

    def part(data: bytes, final: bool) -> bytes:
        packer = zlib.compressobj(9, zlib.DEFLATED, -15)
        return packer.compress(data) + packer.flush(zlib.Z_FINISH if final else zlib.Z_FULL_FLUSH)

    crc = zlib.crc32(_XML_HEAD)
    for _ in range(count):
        crc = zlib.crc32(block, crc)
    crc = zlib.crc32(_XML_TAIL, crc)
    stream = part(_XML_HEAD, False) + part(block, False) * count + part(_XML_TAIL, True)
    return stream, crc, len(_XML_HEAD) + count * len(block) + len(_XML_TAIL)


def make_zip_bomb(total: int = 1600 * MiB) -> bytes:
    """A .docx of about 2 MB whose document XML inflates to ``total`` bytes, sizes told
    truly."""
    return _with_document_xml(_bomb_stream(total))


def make_lying_docx(total: int = 1600 * MiB) -> bytes:
    """The zip bomb with its document XML declared as 1 KiB inflated."""
    stream, crc, _ = _bomb_stream(total)
    return _with_document_xml((stream, crc, 1024), sizes=(len(stream), 1024))


def make_laughs_docx(levels: int = 9) -> bytes:
    """A .docx whose document XML defines the billion laughs: ``levels`` entities each
    ten of the one before (10**levels "lol"s, were they expanded)."""
    entities = ['<!ENTITY lol0 "lol">'] + [
        f'<!ENTITY lol{n} "{f"&lol{n - 1};" * 10}">' for n in range(1, levels + 1)
    ]
    xml = (
        '<?xml version="1.0"?><!DOCTYPE w:document [' + "".join(entities) + "]>"
        '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
        f"<w:body><w:p><w:r><w:t>&lol{levels};</w:t></w:r></w:p></w:body></w:document>"
    )
    return _with_document_xml(xml.encode())
