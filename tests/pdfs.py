"""Small real PDFs for tests, made with fpdf2 (core Helvetica font, no files on disk).

``make_pdf(pages)`` gives one PDF page per string, the text wrapped with
``multi_cell`` (blank lines start new paragraphs). The core fonts only know Latin-1,
so text outside it is refused with ``ValueError`` rather than silently mangled.
``make_encrypted_pdf`` and ``make_drawing_pdf`` give the two awkward cases ingestion
must refuse: a password-protected file and a page with no text at all.
``make_scanned_pdf`` gives pages as a scanner does: an image of the words, no text layer.
"""

from __future__ import annotations

import random
import textwrap
import zlib
from collections.abc import Collection
from datetime import UTC, datetime

from fpdf import FPDF
from PIL import Image, ImageDraw, ImageFont

__all__ = [
    "filler",
    "make_drawing_bomb",
    "make_drawing_pdf",
    "make_encrypted_pdf",
    "make_form_image_pdf",
    "make_form_text_pdf",
    "make_pdf",
    "make_pdf_bomb",
    "make_scanned_pdf",
    "make_stream_pdf",
    "make_xobject_bomb",
    "scan_of",
]


def _new_pdf() -> FPDF:
    pdf = FPDF(format="A4", unit="mm")
    pdf.set_auto_page_break(auto=True, margin=15)
    pdf.set_margins(20, 20, 20)
    # a fixed date: the same pages give the same bytes (unencrypted)
    pdf.set_creation_date(datetime(2024, 1, 1, tzinfo=UTC))
    return pdf


def _write_pages(pdf: FPDF, pages: list[str]) -> None:
    pdf.set_font("Helvetica", size=11)
    for text in pages:
        try:
            text.encode("latin-1")
        except UnicodeEncodeError as exc:
            raise ValueError(f"core PDF fonts only support Latin-1 text: {exc}") from None
        pdf.add_page()
        for number, paragraph in enumerate(text.split("\n\n")):
            if number:
                pdf.ln(4)
            if paragraph.strip():
                pdf.multi_cell(0, 6, paragraph.strip(), new_x="LMARGIN", new_y="NEXT")


def make_pdf(pages: list[str], *, user_password: str | None = None) -> bytes:
    """A PDF with one page per string (wrapped; a long string may flow onto more pages).

    :param pages: the text of each page; ``"\\n\\n"`` separates paragraphs.
    :param user_password: encrypt the file so it opens only with this password.
    """
    if not pages:
        raise ValueError("a PDF needs at least one page")
    pdf = _new_pdf()
    if user_password is not None:
        pdf.set_encryption(owner_password="owner-" + user_password, user_password=user_password)
    _write_pages(pdf, pages)
    return bytes(pdf.output())


def make_encrypted_pdf(pages: list[str], password: str = "secret") -> bytes:
    """A PDF that cannot be opened without ``password``."""
    return make_pdf(pages, user_password=password)


def make_drawing_pdf(pages: int = 1) -> bytes:
    """A valid PDF whose pages hold only a drawn rectangle: no extractable text."""
    pdf = _new_pdf()
    for _ in range(pages):
        pdf.add_page()
        pdf.set_line_width(0.8)
        pdf.rect(30, 40, 120, 80, style="D")
    return bytes(pdf.output())


def scan_of(text: str) -> Image.Image:
    """``text`` as a scanner sees it: black letters 56 pixels high on white, wrapped,
    on a page 1,240 pixels wide (an A4 page at 150 dpi)."""
    font = ImageFont.load_default(size=56)
    lines = textwrap.wrap(text, 32) or [""]
    image = Image.new("L", (1240, 160 + 80 * len(lines)), 255)
    draw = ImageDraw.Draw(image)
    for number, line in enumerate(lines):
        draw.text((80, 80 + 80 * number), line, fill=0, font=font)
    return image


def make_scanned_pdf(pages: list[str], scanned: Collection[int]) -> bytes:
    """A PDF with one page per string: the pages numbered in ``scanned`` (1-based) hold
    only an image of their words (``scan_of``), the others their text."""
    pdf = _new_pdf()
    for number, text in enumerate(pages, start=1):
        if number in scanned:
            pdf.add_page()
            pdf.image(scan_of(text), x=0, y=0, w=pdf.w)
        else:
            _write_pages(pdf, [text])
    return bytes(pdf.output())


_SUBJECTS = [
    "The committee",
    "Our accountant",
    "The night porter",
    "A senior engineer",
    "The gardener",
    "Every intern",
    "The regional manager",
    "The librarian",
]
_VERBS = [
    "reviewed",
    "painted",
    "repaired",
    "catalogued",
    "inspected",
    "postponed",
    "described",
    "measured",
]
_OBJECTS = [
    "the quarterly budget",
    "the north staircase",
    "a broken radiator",
    "the customer archive",
    "the delivery vans",
    "the spring timetable",
    "the warehouse shelves",
    "the printer queue",
]
_WHEN = [
    "before lunch",
    "on Monday",
    "in the annex",
    "after the audit",
    "during the storm",
    "with great care",
]


def filler(sentences: int, seed: int) -> str:
    """``sentences`` bland office sentences, the same for the same ``seed``."""
    rng = random.Random(seed)
    return " ".join(
        f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_WHEN)}."
        for _ in range(sentences)
    )


# The codes a text bomb (``make_pdf_bomb``) may be refused with under the default limits.
# Its first page costs about as much CPU to parse (``ingest_page_cpu_seconds``, 5 s) as it
# takes to pass its text limit (``max_pdf_page_chars``): on a busy or slower machine the
# CPU budget can stop it first. Either is the budget holding; which one is the machine's.
TEXT_BOMB_REFUSALS = frozenset({"too_large", "too_complex"})


def make_pdf_bomb(pages: int = 4_999, text_bytes: int = 4_000_000, seed: int = 7) -> bytes:
    """A small PDF whose extracted text is enormous: a decompression bomb for text extraction.

    Hand-written (no library): ``pages`` page objects whose ``/Contents`` all reference
    one Flate-compressed content stream of about ``text_bytes`` of ``(words) Tj``
    operators, so each page extracts to the whole stream's text. With the defaults the
    file is about 680 KB and would extract to ``pages`` x ~3.5 MB (~17 GB) of text.
    """
    rng = random.Random(seed)
    # a thousand distinct lines repeated in random order: the stream compresses ~50:1
    pool = [b"(" + filler(1, seed + n).encode() + b") Tj T*" for n in range(1024)]
    lines = [b"BT /F1 9 Tf 20 780 Td 11 TL"]
    size = 0
    while size < text_bytes:
        line = rng.choice(pool)
        lines.append(line)
        size += len(line) + 1
    lines.append(b"ET")
    return _stream_pdf(b"\n".join(lines), pages)


def make_drawing_bomb(pages: int = 4_999, operators: int = 266_000, text: bool = False) -> bytes:
    """A small PDF whose pages cost seconds each to parse and extract to nothing.

    ``pages`` pages share one Flate stream of ``operators`` ``cm`` (transform)
    operators (about 480 KB with the defaults); ``text`` adds one shown letter, so a
    reader cannot skip the stream as one that shows no text.
    """
    shown = b"BT /F1 9 Tf 20 700 Td (x) Tj ET\n" if text else b""
    return _stream_pdf(shown + b"\n".join([b"1 0 0 1 0.5 0.5 cm"] * operators), pages)


def make_xobject_bomb(pages: int = 4_999, depth: int = 5, fanout: int = 10) -> bytes:
    """A small PDF of nested form XObjects: each page draws X0 ``fanout`` times, X0
    draws X1 ``fanout`` times, and so on ``depth`` levels down (10^5 drawings a page
    with the defaults, from about 760 KB)."""
    first_form = 3
    first_page = first_form + depth
    page_stream = first_page + pages
    kids = " ".join(f"{first_page + n} 0 R" for n in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {pages} /MediaBox [0 0 612 792] >>".encode(),
    ]
    for level in range(depth):
        if level < depth - 1:
            body = b"\n".join([b"q 0.9 0 0 0.9 1 1 cm /X%d Do Q" % (level + 1)] * fanout)
            resources = (
                f" /Resources << /XObject << /X{level + 1} {first_form + level + 1} 0 R >> >>"
            )
        else:
            body, resources = b"0 0 10 10 re S", ""
        objects.append(
            b"<< /Type /XObject /Subtype /Form /BBox [0 0 612 792]%s %s"
            % (resources.encode(), _flate_stream(body))
        )
    page = (
        f"<< /Type /Page /Parent 2 0 R /Resources << /XObject << /X0 {first_form} 0 R >> >>"
        f" /Contents {page_stream} 0 R >>"
    ).encode()
    objects += [page] * pages
    objects.append(b"<< %s" % _flate_stream(b"\n".join([b"q /X0 Do Q"] * fanout)))
    return _pdf_file(objects)


def make_form_text_pdf(repeat: int) -> bytes:
    """One page that shows its text only through a form XObject: the form draws one
    line of words ``repeat`` times."""
    line = b"(" + filler(1, 3).encode() + b") Tj T*"
    form = b"BT /F1 9 Tf 20 780 Td 11 TL\n" + b"\n".join([line] * repeat) + b"\nET"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [5 0 R] /Count 1 /MediaBox [0 0 612 792] >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Type /XObject /Subtype /Form /BBox [0 0 612 792]"
        b" /Resources << /Font << /F1 3 0 R >> >> " + _flate_stream(form),
        b"<< /Type /Page /Parent 2 0 R /Resources << /XObject << /X0 4 0 R >> >>"
        b" /Contents 6 0 R >>",
        b"<< " + _flate_stream(b"q /X0 Do Q"),
    ]
    return _pdf_file(objects)


def make_form_image_pdf() -> bytes:
    """Three pages: text; an image drawn only through a form XObject (a scan, with no
    text); and a blank page whose resources hold that form but whose content draws
    nothing (not a scan: the image is never shown)."""
    gray = bytes(range(64)) * 64  # a 64 x 64 gradient: no words
    text = b"BT /F1 12 Tf 72 720 Td (" + filler(1, 5).encode() + b") Tj ET"
    resources = b"/Resources << /Font << /F1 3 0 R >> /XObject << /X0 5 0 R >> >>"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [6 0 R 7 0 R 8 0 R] /Count 3 /MediaBox [0 0 612 792] >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Type /XObject /Subtype /Image /Width 64 /Height 64 /ColorSpace /DeviceGray"
        b" /BitsPerComponent 8 " + _flate_stream(gray),
        b"<< /Type /XObject /Subtype /Form /BBox [0 0 612 792]"
        b" /Resources << /XObject << /Im0 4 0 R >> >> "
        + _flate_stream(b"q 612 0 0 792 0 0 cm /Im0 Do Q"),
        b"<< /Type /Page /Parent 2 0 R " + resources + b" /Contents 9 0 R >>",
        b"<< /Type /Page /Parent 2 0 R " + resources + b" /Contents 10 0 R >>",
        b"<< /Type /Page /Parent 2 0 R " + resources + b" /Contents 11 0 R >>",
        b"<< " + _flate_stream(text),
        b"<< " + _flate_stream(b"q /X0 Do Q"),
        b"<< " + _flate_stream(b"0 0 10 10 re S"),
    ]
    return _pdf_file(objects)


def _flate_stream(content: bytes) -> bytes:
    """The end of a stream object's dictionary (its length and filter), then the
    Flate-compressed ``content``."""
    data = zlib.compress(content, 9)
    return b"/Length %d /Filter /FlateDecode >>\nstream\n" % len(data) + data + b"\nendstream"


def make_stream_pdf(content: bytes) -> bytes:
    """One page whose content stream is ``content`` (Flate-compressed, so a stream of
    tens of MB is a small file): for the parser's and the worker's limits."""
    return _stream_pdf(content, 1)


def _stream_pdf(content: bytes, pages: int) -> bytes:
    """A hand-written PDF (no library) of ``pages`` pages that all show one
    Flate-compressed content stream, ``content``, in Helvetica."""
    font, contents, first_page = 3, 4, 5
    kids = " ".join(f"{first_page + n} 0 R" for n in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        # the page size and font are inherited by every page from here
        f"<< /Type /Pages /Kids [{kids}] /Count {pages} /MediaBox [0 0 612 792]"
        f" /Resources << /Font << /F1 {font} 0 R >> >> >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< " + _flate_stream(content),
    ]
    page = f"<< /Type /Page /Parent 2 0 R /Contents {contents} 0 R >>".encode()
    objects += [page] * pages
    return _pdf_file(objects)


def _pdf_file(objects: list[bytes]) -> bytes:
    """A PDF of ``objects`` (numbered from 1; the first is the catalog), with its
    cross-reference table and trailer."""
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)
