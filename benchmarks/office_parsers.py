"""Word, PowerPoint, Excel and HTML text extraction: each candidate parser's speed, memory and DTD handling.

Builds four files in a temporary folder: a .docx of about 200 pages (python-docx:
headings, paragraphs of about 100 words, a table every 20 pages), a .pptx of 200 slides
(python-pptx: title, five bullets on two levels, speaker notes, a table every 10th slide),
a .xlsx of one sheet of 100,000 rows x 8 columns (XlsxWriter, which like Excel keeps the
strings in a shared-strings table, where openpyxl writes them inline: ids, unique SKUs,
names, categories, amounts, dates, quantities, descriptions) and an HTML page of about 2 MB
(generated: a `<nav>` of links, `<style>` and `<script>` blocks among the sections of an
article with lists and tables, a footer). Every heading, paragraph, table cell, title,
bullet, note, thousandth row and nav/script/style block carries a marker word
(``zqcell0042``), so the table can say what each candidate found.

Each candidate extracts all the text of its format in a fresh Python process: the
process times the candidate's imports, reads its peak RSS so far (VmHWM; ``ru_maxrss``
is inherited from the parent across the exec), extracts, and reports the wall and CPU
time of the extraction and the peak RSS it added above that baseline. The median of
``--runs`` runs is shown; the candidates' order rotates per run. ``chars`` is the text's
length with whitespace runs collapsed to one space, so the candidates' separators do not
count. Candidates:

| format | candidates |
|---|---|
| docx | python-docx (paragraphs and tables in body order), docx2python, mammoth (raw text), zipfile + lxml iterparse of word/document.xml |
| pptx | python-pptx (shapes, groups, tables, notes), zipfile + lxml iterparse of the slides and notes in presentation order |
| xlsx | openpyxl ``read_only=True``, python-calamine, zipfile + lxml iterparse of the sheets with the shared strings |
| html | selectolax (lexbor, ``encoding=True``), lxml.html, BeautifulSoup (html.parser), trafilatura (default and ``fast=True``); each drops script, style and nav (trafilatura finds the main content itself) |

The raw readers parse with ``resolve_entities=False, no_network=True, load_dtd=False``.
Then each Office candidate reads two probe files of its format, again each in a fresh
process: one whose main XML part declares an internal entity and an external one naming
a local file (does the text hold the entity's value, or the file's?), and one "billion
laughs" part (10^9 expansions, the process limited to 1.5 GB of address space and 60 s).
openpyxl reads through defusedxml when that is installed, so it is probed both ways.

Also shown: each candidate's version, import time and installed size (its distribution's
files, and with its installed dependencies). Release dates are not in an installed
package's metadata, so the script does not print them.

Run: ``nice python benchmarks/office_parsers.py [--runs 3] [--formats docx,pptx,xlsx,html]
[--pages 200] [--slides 200] [--rows 100000] [--html-mb 2] [--no-probes] [--keep DIR]
[--json PATH]``. The libraries come from the ``bench`` extra.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import importlib.metadata
import io
import json
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MB = 1024 * 1024
MARKER = re.compile(r"\bzq([a-z]+)\d{4}\b")
# the value of the probes' internal entity, and the text of the local file the external one names
ENTITY_TEXT = "zqentity0001"
SECRET_TEXT = "zqsecret0001"
PROBE_LIMIT_BYTES = 1536 * MB
PROBE_TIMEOUT = 60.0

VOCABULARY = (
    "the of and to in is was for that with as on by at from this are be it an or which "
    "employees policy leave days manager request approval travel expenses receipt claim "
    "quarter revenue forecast budget region customer contract renewal invoice payment "
    "supplier delivery warehouse inventory safety training audit compliance report review "
    "project milestone deadline team meeting agenda decision risk mitigation owner status "
    "product release feature customer support ticket escalation response time service level"
)
WORDS = VOCABULARY.split()


# ---------------------------------------------------------------------------------------
# The files


def sentence(rng: random.Random, words: int) -> str:
    text = " ".join(rng.choice(WORDS) for _ in range(words))
    return text[0].upper() + text[1:] + "."


def paragraph(rng: random.Random, words: int) -> str:
    parts, left = [], words
    while left > 0:
        n = min(left, rng.randint(8, 20))
        parts.append(sentence(rng, n))
        left -= n
    return " ".join(parts)


class Markers:
    """Numbered marker words by kind, and how many of each kind were written."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def __call__(self, kind: str) -> str:
        n = self.counts.get(kind, 0)
        self.counts[kind] = n + 1
        return f"zq{kind}{n:04d}"


def noise_png(width: int, height: int, seed: int) -> bytes:
    """An RGB PNG of random pixels: about ``3 * width * height`` bytes that no zip shrinks."""
    import struct
    import zlib

    rng = random.Random(seed)
    raw = b"".join(b"\x00" + rng.randbytes(3 * width) for _ in range(height))

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 0))
        + chunk(b"IEND", b"")
    )


def build_docx(
    path: Path, pages: int, page_breaks: bool = False, pictures: int = 0
) -> dict[str, int]:
    """``pages`` of text; ``page_breaks``: a page break after each; ``pictures``: that
    many photo-sized (about 0.8 MB) pictures spread over the pages, as a large Word file
    holds."""
    import docx
    from docx.shared import Inches

    rng, mark = random.Random(1), Markers()
    doc = docx.Document()
    doc.add_heading(f"Operations handbook {mark('head')}", level=0)
    every = max(1, pages // pictures) if pictures else 0
    for page in range(pages):
        if every and page % every == every // 2 and page // every < pictures:
            picture = io.BytesIO(noise_png(512, 512, seed=page))
            doc.add_picture(picture, width=Inches(4))
        if page % 2 == 0:
            doc.add_heading(f"{sentence(rng, 5)[:-1]} {mark('head')}", level=1 + page % 4 // 2)
        for _ in range(5):
            # a run per sentence, some bold or italic, as edited text has
            para = doc.add_paragraph()
            for text in re.findall(r"[^.]+\.", paragraph(rng, 100)):
                run = para.add_run(text + " ")
                run.bold, run.italic = rng.random() < 0.1, rng.random() < 0.1
            para.add_run(mark("para"))
        if page % 20 == 10:
            table = doc.add_table(rows=15, cols=4)
            for row in table.rows:
                for cell in row.cells:
                    cell.text = f"{sentence(rng, 3)} {mark('cell')}"
        if page_breaks and page < pages - 1:
            doc.add_page_break()
    doc.save(str(path))
    return mark.counts


def build_pptx(path: Path, slides: int) -> dict[str, int]:
    import pptx
    from pptx.util import Inches

    rng, mark = random.Random(2), Markers()
    prs = pptx.Presentation()
    for number in range(slides):
        slide = prs.slides.add_slide(prs.slide_layouts[1])
        slide.shapes.title.text = f"{sentence(rng, 4)[:-1]} {mark('title')}"
        body = slide.placeholders[1].text_frame
        body.text = f"{sentence(rng, 8)} {mark('bullet')}"
        for level in (1, 1, 0, 1):
            para = body.add_paragraph()
            para.text = f"{sentence(rng, 8)} {mark('bullet')}"
            para.level = level
        if number % 10 == 5:
            shape = slide.shapes.add_table(5, 4, Inches(1), Inches(4.5), Inches(8), Inches(2))
            for row in shape.table.rows:
                for cell in row.cells:
                    cell.text = f"{rng.choice(WORDS)} {mark('cell')}"
        slide.notes_slide.notes_text_frame.text = f"{paragraph(rng, 40)} {mark('note')}"
    prs.save(str(path))
    return mark.counts


def build_xlsx(path: Path, rows: int) -> dict[str, int]:
    # XlsxWriter, not openpyxl: openpyxl writes every string inline in the sheet, and Excel
    # (like XlsxWriter) writes them once, to the shared-strings table every reader holds
    import xlsxwriter

    rng, mark = random.Random(3), Markers()
    wb = xlsxwriter.Workbook(str(path), {"default_date_format": "yyyy-mm-dd"})
    ws = wb.add_worksheet("orders")
    ws.write_row(
        0, 0, ["id", "sku", "name", "category", "amount", "date", "quantity", "description"]
    )
    names = [f"{a} {b}".title() for a, b in zip(WORDS, reversed(WORDS), strict=True)]
    categories = WORDS[20:40]
    start = datetime.date(2020, 1, 1)
    for i in range(rows):
        description = sentence(rng, rng.randint(3, 8))
        if i % 1000 == 999 or i == rows - 1:
            description += f" {mark('row')}"
        row = [
            i + 1,
            f"SKU-{i:07d}",
            rng.choice(names),
            rng.choice(categories),
            round(rng.uniform(1, 5000), 2),
            start + datetime.timedelta(days=rng.randrange(2000)),
            rng.randint(1, 500),
            description,
        ]
        ws.write_row(i + 1, 0, row)
    wb.close()
    return mark.counts


def build_html(path: Path, size: int) -> dict[str, int]:
    rng, mark = random.Random(4), Markers()
    out = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        "<title>Quarterly operations review</title>",
    ]

    def style() -> str:
        rules = "\n".join(
            f".c{rng.randrange(10**6)} > .x{i} {{ margin: {i}px; color: #{rng.randrange(16**6):06x}; }}"
            for i in range(150)
        )
        return f"<style>/* {mark('style')} */\n{rules}</style>"

    def script() -> str:
        body = "\n".join(
            f"  var v{i} = function(a) {{ return a * {i} + '{rng.choice(WORDS)}'; }};"
            for i in range(200)
        )
        return f"<script>\n  var label = '{mark('script')}';\n{body}\n</script>"

    def nav() -> str:
        links = "".join(
            f'<li><a href="/{rng.choice(WORDS)}/{i}">{rng.choice(WORDS).title()} {mark("nav")}</a></li>'
            for i in range(40)
        )
        return f'<nav class="menu"><ul>{links}</ul></nav>'

    out += [style(), style(), script(), "</head><body>", "<header>", nav(), "</header>"]
    out.append("<main><article><h1>Quarterly operations review</h1>")
    section = 0
    while sum(map(len, out)) < size:
        section += 1
        out.append(f"<section><h2>{sentence(rng, 5)[:-1]} {mark('head')}</h2>")
        for _ in range(6):
            out.append(f"<p>{paragraph(rng, 80)} <em>{mark('para')}</em></p>")
        items = "".join(f"<li>{sentence(rng, 6)} {mark('item')}</li>" for _ in range(5))
        out.append(f"<ul>{items}</ul>")
        if section % 3 == 0:
            cells = "".join(
                "<tr>"
                + "".join(f"<td>{rng.choice(WORDS)} {mark('cell')}</td>" for _ in range(4))
                + "</tr>"
                for _ in range(6)
            )
            out.append(f"<table><tbody>{cells}</tbody></table>")
        out.append("</section>")
        if section % 4 == 0:
            out += [script(), style()]
        if section % 10 == 0:
            out.append(f"<aside>{nav()}</aside>")
    out.append(f"</article></main><footer>{nav()}<p>Copyright example.</p></footer>")
    out.append(f"{script()}</body></html>\n")
    path.write_text("\n".join(out), encoding="utf-8")
    return mark.counts


def with_entities(xml: bytes, declarations: str, reference: str) -> bytes:
    """``xml`` with an internal DTD of ``declarations`` after its XML declaration, and its
    marker text ``zqprobe0000`` replaced by ``reference``."""
    end = xml.index(b"?>") + 2 if xml.startswith(b"<?xml") else 0
    match = re.compile(rb"<([A-Za-z_][\w:.-]*)").search(xml, end)
    assert match is not None and b"zqprobe0000" in xml
    doctype = f"<!DOCTYPE {match[1].decode()} [{declarations}]>".encode()
    return (xml[:end] + doctype + xml[end:]).replace(b"zqprobe0000", reference.encode())


def build_probes(folder: Path, fmt: str) -> dict[str, Path]:
    """The format's two probe files: ``entities`` (an internal entity and an external one
    naming a local file) and ``laughs`` (a billion laughs), each declared in the DTD of
    the XML part that holds the text (for xlsx, both the shared strings and the sheet)."""
    secret = folder / "secret.txt"
    secret.write_text(SECRET_TEXT, encoding="utf-8")
    plain = folder / f"probe.{fmt}"
    if fmt == "docx":
        import docx

        doc = docx.Document()
        doc.add_paragraph("zqprobe0000")
        doc.save(str(plain))
        parts = ["word/document.xml"]
    elif fmt == "pptx":
        import pptx

        prs = pptx.Presentation()
        prs.slides.add_slide(prs.slide_layouts[1]).shapes.title.text = "zqprobe0000"
        prs.save(str(plain))
        parts = ["ppt/slides/slide1.xml"]
    else:
        import xlsxwriter

        wb = xlsxwriter.Workbook(str(plain))
        wb.add_worksheet().write_row(0, 0, ["zqprobe0000", "zqprobe0001"])
        wb.close()
        parts = ["xl/sharedStrings.xml", "xl/worksheets/sheet1.xml"]
    entities = (
        f'<!ENTITY internal "{ENTITY_TEXT}"><!ENTITY external SYSTEM "{secret.as_uri()}">',
        "&internal; &external;",
    )
    laughs = "".join(
        f'<!ENTITY l{i} "{"".join(f"&l{i - 1};" for _ in range(10)) if i else "lol"}">'
        for i in range(10)
    )
    inline = b'<c r="B1" t="inlineStr"><is><t>zqprobe0000</t></is></c>'
    probes = {}
    for name, (declarations, reference) in {
        "entities": entities,
        "laughs": (laughs, "&l9;"),
    }.items():
        probe = folder / f"probe-{name}.{fmt}"
        with (
            zipfile.ZipFile(plain) as src,
            zipfile.ZipFile(probe, "w", zipfile.ZIP_DEFLATED) as dst,
        ):
            for info in src.infolist():
                data = src.read(info)
                if info.filename == "xl/worksheets/sheet1.xml":
                    data = data.replace(b'<c r="B1" t="s"><v>1</v></c>', inline)
                if info.filename in parts:
                    data = with_entities(data, declarations, reference)
                dst.writestr(info, data)
        probes[name] = probe
    return probes


# ---------------------------------------------------------------------------------------
# The candidates (each runs in its own process; imports happen there)

SAFE_XML = {"resolve_entities": False, "no_network": True, "load_dtd": False}
W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
S = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
P = "{http://schemas.openxmlformats.org/presentationml/2006/main}"
R = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
PR = "{http://schemas.openxmlformats.org/package/2006/relationships}"


def docx_python_docx(path: Path) -> str:
    import docx
    from docx.text.paragraph import Paragraph

    out = []
    for block in docx.Document(str(path)).iter_inner_content():
        if isinstance(block, Paragraph):
            out.append(block.text)
        else:
            out.extend("\t".join(cell.text for cell in row.cells) for row in block.rows)
    return "\n".join(out)


def docx_docx2python(path: Path) -> str:
    from docx2python import docx2python

    with docx2python(str(path)) as result:
        return str(result.text)


def docx_mammoth(path: Path) -> str:
    import mammoth

    with open(path, "rb") as file:
        return str(mammoth.extract_raw_text(file).value)


def iter_paragraphs(file: Any, ns: str) -> list[str]:
    """The text of each ``p`` element of ``ns`` in an XML stream, read with iterparse and
    freed as it goes (``t`` runs joined, ``tab`` and ``br`` kept)."""
    from lxml import etree

    out, runs = [], []
    tags = (ns + "t", ns + "tab", ns + "br", ns + "p")
    for _, el in etree.iterparse(file, events=("end",), tag=tags, **SAFE_XML):
        tag = el.tag
        if tag == ns + "t":
            runs.append(el.text or "")
        elif tag == ns + "p":
            out.append("".join(runs))
            runs = []
            el.clear()
            while el.getprevious() is not None:
                del el.getparent()[0]
        else:
            runs.append("\t" if tag == ns + "tab" else "\n")
    return out


def relationships(archive: zipfile.ZipFile, part: str) -> dict[str, tuple[str, str]]:
    """``part``'s relationships: id -> (type, target path inside the archive)."""
    import posixpath

    from lxml import etree

    folder, name = posixpath.split(part)
    rels = posixpath.join(folder, "_rels", name + ".rels")
    if rels not in archive.namelist():
        return {}
    root = etree.fromstring(archive.read(rels), etree.XMLParser(**SAFE_XML))
    found = {}
    for rel in root.iter(PR + "Relationship"):
        target = rel.get("Target", "")
        if rel.get("TargetMode") != "External":
            target = (
                target.lstrip("/")
                if target.startswith("/")
                else posixpath.normpath(posixpath.join(folder, target))
            )
        found[rel.get("Id", "")] = (rel.get("Type", "").rsplit("/", 1)[-1], target)
    return found


def docx_raw(path: Path) -> str:
    with zipfile.ZipFile(path) as archive, archive.open("word/document.xml") as file:
        return "\n".join(iter_paragraphs(file, W))


def pptx_python_pptx(path: Path) -> str:
    import pptx

    out: list[str] = []

    def shape_text(shape: Any) -> None:
        if hasattr(shape, "shapes"):  # a group
            for inner in shape.shapes:
                shape_text(inner)
        if shape.has_text_frame:
            out.append(shape.text_frame.text)
        if getattr(shape, "has_table", False):
            out.extend("\t".join(cell.text for cell in row.cells) for row in shape.table.rows)

    for slide in pptx.Presentation(str(path)).slides:
        for shape in slide.shapes:
            shape_text(shape)
        if slide.has_notes_slide:
            notes = slide.notes_slide.notes_text_frame
            if notes is not None:
                out.append(notes.text)
    return "\n".join(out)


def pptx_raw(path: Path) -> str:
    from lxml import etree

    out = []
    with zipfile.ZipFile(path) as archive:
        main = "ppt/presentation.xml"
        rels = relationships(archive, main)
        root = etree.fromstring(archive.read(main), etree.XMLParser(**SAFE_XML))
        for slide_id in root.iter(P + "sldId"):
            slide = rels[slide_id.get(R + "id", "")][1]
            parts = [slide]
            parts += [
                t for kind, t in relationships(archive, slide).values() if kind == "notesSlide"
            ]
            for part in parts:
                with archive.open(part) as file:
                    out += iter_paragraphs(file, A)
    return "\n".join(out)


def xlsx_openpyxl(path: Path) -> str:
    import openpyxl

    wb = openpyxl.load_workbook(str(path), read_only=True, data_only=True)
    out = []
    for ws in wb.worksheets:
        for row in ws.iter_rows(values_only=True):
            out.append("\t".join("" if value is None else str(value) for value in row))
    wb.close()
    return "\n".join(out)


def xlsx_calamine(path: Path) -> str:
    from python_calamine import CalamineWorkbook

    wb = CalamineWorkbook.from_path(str(path))
    out = []
    for name in wb.sheet_names:
        for row in wb.get_sheet_by_name(name).iter_rows():
            out.append("\t".join(str(value) for value in row))
    wb.close()
    return "\n".join(out)


def xlsx_raw(path: Path) -> str:
    from lxml import etree

    out = []
    with zipfile.ZipFile(path) as archive:
        main = "xl/workbook.xml"
        rels = relationships(archive, main)
        strings: list[str] = []
        for kind, target in rels.values():
            if kind == "sharedStrings":
                with archive.open(target) as file:
                    for _, si in etree.iterparse(file, tag=S + "si", **SAFE_XML):
                        # rich text runs joined; phonetic readings (rPh) left out
                        strings.append(
                            "".join(
                                t.text or ""
                                for t in si.iter(S + "t")
                                if t.getparent().tag != S + "rPh"
                            )
                        )
                        si.clear()
                        while si.getprevious() is not None:
                            del si.getparent()[0]
        root = etree.fromstring(archive.read(main), etree.XMLParser(**SAFE_XML))
        for sheet in root.iter(S + "sheet"):
            with archive.open(rels[sheet.get(R + "id", "")][1]) as file:
                for _, row in etree.iterparse(file, tag=S + "row", **SAFE_XML):
                    cells = []
                    for cell in row:
                        kind, value = cell.get("t"), ""
                        for part in cell:
                            if part.tag == S + "v":
                                value = part.text or ""
                        if kind == "s":
                            value = strings[int(value)]
                        elif kind == "inlineStr":
                            value = "".join(t.text or "" for t in cell.iter(S + "t"))
                        cells.append(value)
                    out.append("\t".join(cells))
                    row.clear()
                    while row.getprevious() is not None:
                        del row.getparent()[0]
    return "\n".join(out)


STRIP = ("script", "style", "nav")


def html_selectolax(path: Path) -> str:
    from selectolax.lexbor import LexborHTMLParser

    # encoding=True: the HTML Standard's sniffing (BOM, then <meta charset>), else UTF-8
    tree = LexborHTMLParser(path.read_bytes(), encoding=True)
    tree.strip_tags(list(STRIP))
    return str(tree.root.text(separator="\n")) if tree.root is not None else ""


def html_lxml(path: Path) -> str:
    import lxml.html

    root = lxml.html.document_fromstring(path.read_bytes())
    for el in root.xpath("|".join(f"//{tag}" for tag in STRIP)):
        el.drop_tree()
    return "\n".join(root.itertext())


def html_bs4(path: Path) -> str:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(path.read_bytes(), "html.parser")
    for el in soup(list(STRIP)):
        el.decompose()
    return str(soup.get_text("\n"))


def html_trafilatura(path: Path, fast: bool = False) -> str:
    import trafilatura

    return trafilatura.extract(path.read_bytes(), include_tables=True, fast=fast) or ""


@dataclass(frozen=True)
class Candidate:
    name: str
    fmt: str
    extract: Callable[[Path], str]
    modules: tuple[str, ...]  # imported (and timed) before the baseline
    dists: tuple[str, ...]  # the distributions it installs
    env: dict[str, str] = field(default_factory=dict)
    probe_only: bool = False


CANDIDATES = [
    Candidate("python-docx", "docx", docx_python_docx, ("docx",), ("python-docx",)),
    Candidate("docx2python", "docx", docx_docx2python, ("docx2python",), ("docx2python",)),
    Candidate("mammoth", "docx", docx_mammoth, ("mammoth",), ("mammoth",)),
    Candidate("zipfile + lxml iterparse", "docx", docx_raw, ("lxml.etree",), ("lxml",)),
    Candidate("python-pptx", "pptx", pptx_python_pptx, ("pptx",), ("python-pptx",)),
    Candidate("zipfile + lxml iterparse", "pptx", pptx_raw, ("lxml.etree",), ("lxml",)),
    Candidate("openpyxl read_only", "xlsx", xlsx_openpyxl, ("openpyxl",), ("openpyxl",)),
    Candidate(
        "openpyxl read_only, no defusedxml",
        "xlsx",
        xlsx_openpyxl,
        ("openpyxl",),
        ("openpyxl",),
        env={"OPENPYXL_DEFUSEDXML": "False"},
        probe_only=True,
    ),
    Candidate("python-calamine", "xlsx", xlsx_calamine, ("python_calamine",), ("python-calamine",)),
    Candidate("zipfile + lxml iterparse", "xlsx", xlsx_raw, ("lxml.etree",), ("lxml",)),
    Candidate(
        "selectolax (lexbor)", "html", html_selectolax, ("selectolax.lexbor",), ("selectolax",)
    ),
    Candidate("lxml.html", "html", html_lxml, ("lxml.html",), ("lxml",)),
    Candidate("BeautifulSoup html.parser", "html", html_bs4, ("bs4",), ("beautifulsoup4",)),
    Candidate("trafilatura", "html", html_trafilatura, ("trafilatura",), ("trafilatura",)),
    Candidate(
        "trafilatura fast=True",
        "html",
        lambda path: html_trafilatura(path, fast=True),
        ("trafilatura",),
        ("trafilatura",),
    ),
]


def peak_kib() -> int:
    """This process's peak RSS in KiB: VmHWM, the high-water mark of its own memory map.
    ``ru_maxrss`` would do but for one flaw: it carries the parent's peak across the
    fork-and-exec (a child of a 300 MB parent starts at 300 MB), so it is the fallback."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def measure(extract: Callable[[Path], str], modules: tuple[str, ...], path: Path) -> dict[str, Any]:
    """In this (fresh) process: import ``modules`` (timed), take the peak RSS so far as
    the baseline, run ``extract(path)``; its wall and CPU ms, the peak RSS MB it added,
    its text's length (whitespace runs as one) and the marker words it holds."""
    result: dict[str, Any] = {}
    baseline = 0
    started = time.perf_counter()
    try:
        for module in modules:
            importlib.import_module(module)
    except Exception as error:
        return {"error": f"not importable: {type(error).__name__}: {error}"[:160]}
    result["import_ms"] = (time.perf_counter() - started) * 1000
    try:
        baseline = peak_kib()
        started, cpu = time.perf_counter(), time.process_time()
        text = extract(path)
        result["wall_ms"] = (time.perf_counter() - started) * 1000
        result["cpu_ms"] = (time.process_time() - cpu) * 1000
        result["peak_mb"] = (peak_kib() - baseline) / 1024
        result["chars"] = len(" ".join(text.split()))
        found: dict[str, set[str]] = {}
        for match in MARKER.finditer(text):
            found.setdefault(match[1], set()).add(match[0])
        result["markers"] = {kind: len(seen) for kind, seen in found.items()}
        result["entity"], result["secret"] = ENTITY_TEXT in text, SECRET_TEXT in text
    except BaseException as error:  # a probe's MemoryError is a result too
        result["error"] = f"{type(error).__name__}: {str(error)[:120]}"
        result["peak_mb"] = (peak_kib() - baseline) / 1024
    return result


def child(index: int, path: Path) -> None:
    """Run candidate ``index`` on ``path`` in this (fresh) process; print a JSON line."""
    candidate = CANDIDATES[index]
    print(json.dumps(measure(candidate.extract, candidate.modules, path)))


def run_python(
    command: list[str],
    env: dict[str, str] | None = None,
    limit: bool = False,
    timeout: float = 600.0,
) -> dict[str, Any]:
    """``python *command`` in a fresh interpreter (``limit``: with 1.5 GB of address
    space): the JSON object its last line of output holds, or ``{"error": ...}``."""

    def set_limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (PROBE_LIMIT_BYTES, PROBE_LIMIT_BYTES))

    try:
        done = subprocess.run(
            [sys.executable, *command],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **(env or {})},
            preexec_fn=set_limit if limit else None,  # no threads started yet
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"error": f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"}
    return dict(json.loads(lines[-1]))


def run_child(
    index: int, path: Path, limit: bool = False, timeout: float = 600.0
) -> dict[str, Any]:
    """``child(index, path)`` in a fresh interpreter (``limit``: with 1.5 GB of address space)."""
    command = [__file__, "--child", str(index), str(path)]
    return run_python(command, CANDIDATES[index].env, limit, timeout)


# ---------------------------------------------------------------------------------------
# Installed sizes


def installed_bytes(dist: importlib.metadata.Distribution) -> int:
    total = 0
    for file in dist.files or []:
        with contextlib.suppress(OSError):
            total += Path(str(file.locate())).stat().st_size
    return total


def requirement_names(dist: importlib.metadata.Distribution) -> list[str]:
    """The names ``dist`` requires unconditionally (no extra) on this interpreter."""
    try:
        from packaging.requirements import Requirement
    except ImportError:
        return []
    names = []
    for line in dist.requires or []:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            names.append(requirement.name)
    return names


def sizes(names: tuple[str, ...]) -> tuple[str, float, float]:
    """The first distribution's version, and MB installed: ``names`` alone, and with
    their installed dependencies."""
    try:
        version = importlib.metadata.version(names[0])
    except importlib.metadata.PackageNotFoundError:
        return "not installed", float("nan"), float("nan")
    seen: dict[str, int] = {}
    todo = list(names)
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        seen[name] = installed_bytes(dist)
        todo += requirement_names(dist)
    own = sum(seen.get(re.sub(r"[-_.]+", "-", n).lower(), 0) for n in names)
    return version, own / MB, sum(seen.values()) / MB


# ---------------------------------------------------------------------------------------
# The report


def found_text(result: dict[str, Any], expected: dict[str, int]) -> str:
    found = result.get("markers", {})
    content = {k: n for k, n in expected.items() if k not in ("nav", "script", "style")}
    missing = [f"{k} {found.get(k, 0)}/{n}" for k, n in content.items() if found.get(k, 0) < n]
    leaked = [f"{k} {found[k]}" for k in ("nav", "script", "style") if found.get(k)]
    text = ", ".join(missing) if missing else "all"
    return text + (f"; kept {', '.join(leaked)}" if leaked else "")


def probe_text(entities: dict[str, Any], laughs: dict[str, Any]) -> tuple[str, str]:
    if entities.get("error", "").startswith("not importable"):
        return entities["error"], ""
    if "error" in entities:
        first = f"refused ({entities['error'][:60]})"
    elif entities.get("secret"):
        first = "**reads the local file**"
    elif entities.get("entity"):
        first = "expands internal, not external"
    else:
        first = "leaves both out"
    if "error" in laughs:
        second = f"refused, +{laughs.get('peak_mb', 0):.0f} MB ({laughs['error'][:60]})"
    else:
        second = f"not expanded, +{laughs.get('peak_mb', 0):.0f} MB"
    return first, second


def main(argv: list[str] | None = None) -> int:
    """Build the files, run every candidate ``--runs`` times, print one table per format."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3, help="runs; the median is shown")
    parser.add_argument("--formats", default="docx,pptx,xlsx,html")
    parser.add_argument("--pages", type=int, default=200, help="docx pages (500 words each)")
    parser.add_argument("--slides", type=int, default=200)
    parser.add_argument("--rows", type=int, default=100_000, help="xlsx rows")
    parser.add_argument("--html-mb", type=float, default=2.0)
    parser.add_argument("--no-probes", action="store_true", help="skip the DTD probes")
    parser.add_argument("--keep", type=Path, help="build the files here and keep them")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(int(args.child[0]), Path(args.child[1]))
        return 0

    formats = [f for f in args.formats.split(",") if f]
    if unknown := set(formats) - {"docx", "pptx", "xlsx", "html"}:
        parser.error(f"unknown formats: {', '.join(sorted(unknown))}")
    with tempfile.TemporaryDirectory(prefix="office-parsers-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        builders = {
            "docx": lambda p: build_docx(p, args.pages),
            "pptx": lambda p: build_pptx(p, args.slides),
            "xlsx": lambda p: build_xlsx(p, args.rows),
            "html": lambda p: build_html(p, int(args.html_mb * 1_000_000)),
        }
        files, expected, built = {}, {}, {}
        for fmt in formats:
            started = time.perf_counter()
            files[fmt] = folder / f"sample.{fmt}"
            expected[fmt] = builders[fmt](files[fmt])
            built[fmt] = time.perf_counter() - started
        probes = {}
        if not args.no_probes:
            probes = {f: build_probes(folder, f) for f in formats if f != "html"}

        load_before = os.getloadavg()
        results: dict[int, list[dict[str, Any]]] = {}
        for number in range(args.runs):
            for fmt in formats:
                indexes = [i for i, c in enumerate(CANDIDATES) if c.fmt == fmt and not c.probe_only]
                shift = number % len(indexes)
                for index in indexes[shift:] + indexes[:shift]:
                    results.setdefault(index, []).append(run_child(index, files[fmt]))
        probed: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
        for index, candidate in enumerate(CANDIDATES):
            if candidate.fmt in probes:
                files_ = probes[candidate.fmt]
                probed[index] = (
                    run_child(index, files_["entities"], limit=True, timeout=PROBE_TIMEOUT),
                    run_child(index, files_["laughs"], limit=True, timeout=PROBE_TIMEOUT),
                )
        load_after = os.getloadavg()

        print(
            f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, median of {args.runs} runs, "
            f"each a fresh process; load average {load_before[0]:.1f} before, {load_after[0]:.1f} after"
        )
        print("(release dates are not in an installed package's metadata, so none are shown)\n")
        report: dict[str, Any] = {
            "python": sys.version.split()[0],
            "runs": args.runs,
            "formats": {},
        }
        for fmt in formats:
            size = files[fmt].stat().st_size / MB
            if zipfile.is_zipfile(files[fmt]):
                with zipfile.ZipFile(files[fmt]) as archive:
                    unpacked = sum(info.file_size for info in archive.infolist()) / MB
                size_text = f"{size:.1f} MB zipped, {unpacked:.1f} MB unpacked"
            else:
                size_text = f"{size:.1f} MB"
            counts = ", ".join(f"{n} {k}" for k, n in expected[fmt].items())
            print(f"### {fmt}: {size_text} ({counts}; built in {built[fmt]:.0f} s)\n")
            print(
                "| library | version | median ms | CPU ms | peak RSS MB | chars | text found "
                "| import ms | installed MB (with deps) |"
            )
            print("|---|---|---:|---:|---:|---:|---|---:|---:|")
            rows = []
            for index, candidate in enumerate(CANDIDATES):
                if candidate.fmt != fmt or candidate.probe_only:
                    continue
                version, own, total = sizes(candidate.dists)
                runs = results[index]
                good = [r for r in runs if "error" not in r]
                row: dict[str, Any] = {"library": candidate.name, "version": version}
                if not good:
                    print(f"| {candidate.name} | {version} | failed: {runs[0]['error']} ||||||")
                    rows.append({**row, "error": runs[0]["error"]})
                    continue
                for key in ("wall_ms", "cpu_ms", "peak_mb", "import_ms"):
                    row[key] = statistics.median(r[key] for r in good)
                row.update(chars=good[0]["chars"], found=found_text(good[0], expected[fmt]))
                row.update(installed_mb=own, with_deps_mb=total, failed_runs=len(runs) - len(good))
                rows.append(row)
                print(
                    f"| {candidate.name} | {version} | {row['wall_ms']:,.0f} | {row['cpu_ms']:,.0f} "
                    f"| {row['peak_mb']:,.1f} | {row['chars']:,} | {row['found']} "
                    f"| {row['import_ms']:,.0f} | {own:.1f} ({total:.1f}) |"
                )
            report["formats"][fmt] = {
                "bytes": files[fmt].stat().st_size,
                "markers": expected[fmt],
                "rows": rows,
            }
            print()
        if probed:
            print(
                "### DTDs in the Office files' XML (each probe a fresh process, 1.5 GB address space)\n"
            )
            print("| format | library | internal + external (file) entity | billion laughs |")
            print("|---|---|---|---|")
            report["probes"] = []
            for index, (entities, laughs) in probed.items():
                candidate = CANDIDATES[index]
                first, second = probe_text(entities, laughs)
                print(f"| {candidate.fmt} | {candidate.name} | {first} | {second} |")
                report["probes"].append(
                    {
                        "format": candidate.fmt,
                        "library": candidate.name,
                        "entities": entities,
                        "laughs": laughs,
                    }
                )
            print()
        if args.json is not None:
            args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
            print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
