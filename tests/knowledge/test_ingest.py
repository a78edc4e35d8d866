"""Ingestion: text, Markdown and PDF uploads to pages; every bad file is a clear 4xx."""

from __future__ import annotations

import pytest
from fpdf import FPDF
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentcore.errors import (
    AgentCoreError,
    PayloadTooLarge,
    UnsupportedMediaType,
    ValidationFailed,
)
from agentcore.knowledge._chunking import chunk_pages
from agentcore.knowledge.ingest._parsing import (
    ParsedDocument,
    clean_pdf_text,
    parse_document,
    parse_text,
)

LIMITS = {"max_bytes": 1_000_000, "max_pages": 50}

FILLER = (
    "This page talks about the weather, the harbour and the old market square. "
    "Visitors often walk along the river before lunch. "
)


def make_pdf(pages: list[str], *, user_password: str | None = None) -> bytes:
    """A PDF with one page per entry (core font, so latin-1 text only)."""
    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    for text in pages:
        pdf.add_page()
        if text:
            pdf.multi_cell(0, 6, text)
    if user_password is not None:
        pdf.set_encryption(owner_password="owner-secret", user_password=user_password)
    return bytes(pdf.output())


def parse(
    data: bytes, filename: str = "doc.pdf", content_type: str | None = None
) -> ParsedDocument:
    return parse_document(data, filename, content_type, **LIMITS)


def assert_error(exc: AgentCoreError, status: int, code: str) -> None:
    assert (exc.status, exc.code, exc.param) == (status, code, "file")


# --- happy paths ---------------------------------------------------------------


def test_pdf_pages_keep_their_numbers_and_facts_land_on_them() -> None:
    pages = [
        FILLER * 3 + "The lighthouse keeper is named Adelheid Brun.",
        "",  # an empty page keeps numbering true
        FILLER * 2 + "The ferry to the island leaves at seven fifteen every morning.",
    ]
    doc = parse(make_pdf(pages), content_type="application/pdf")
    assert doc.content_type == "application/pdf"
    assert doc.source == "doc.pdf"
    assert len(doc.pages) == 3
    assert doc.pages[1] == ""
    chunks = chunk_pages(doc.pages, target_chars=300, overlap_chars=60)
    keeper = [c for c in chunks if "Adelheid Brun" in c.text]
    ferry = [c for c in chunks if "seven fifteen" in c.text]
    assert keeper and all(c.pages == [1] for c in keeper)
    assert ferry and all(c.pages == [3] for c in ferry)
    assert all(2 not in c.pages for c in chunks)


def test_sentence_across_a_page_break_carries_both_pages() -> None:
    pages = [
        FILLER + "The combination of the old vault is known only to",
        "the night porter, who keeps it in a sealed envelope. " + FILLER,
    ]
    doc = parse(make_pdf(pages))
    chunks = chunk_pages(doc.pages, target_chars=300, overlap_chars=0)
    [spanning] = [c for c in chunks if "known only to the night porter" in c.text]
    assert spanning.pages == [1, 2]


def test_pdf_text_is_cleaned() -> None:
    assert clean_pdf_text("the infor-\nmation  age") == "the information age"
    assert clean_pdf_text("ﬁrst\u00a0line\nsecond line") == "first line second line"
    # A blank line, or a short line ending a sentence, ends a paragraph.
    long_line = "word " * 15
    text = f"{long_line}\n{long_line}\nend of it.\n{long_line}\nlast."
    assert clean_pdf_text(text).count("\n\n") == 1


FULL_LINE = "words that fill a whole line of the page as printed text does " * 2


@pytest.mark.parametrize(
    "heading", ["Leaving Acme", "3.2 Results", "Working hours", "A", "FAQ and contacts"]
)
def test_a_pdf_heading_is_a_paragraph_of_its_own(heading: str) -> None:
    text = f"{heading}\nGive four weeks of notice, {FULL_LINE}\n{FULL_LINE}\nthe end."
    paragraphs = clean_pdf_text(text).split("\n\n")
    assert paragraphs[0] == f"# {heading}"  # marked as Word's and HTML's headings are
    assert paragraphs[1].startswith("Give four weeks of notice,")
    # after a paragraph too, and on the page's first line alike
    text = f"{FULL_LINE}\nlast line.\n{heading}\nThe {FULL_LINE}"
    assert clean_pdf_text(text).split("\n\n")[1] == f"# {heading}"


@pytest.mark.parametrize(
    "text",
    [
        "Dear Ana,\nThe parcel arrived.",  # ends in a comma: the line goes on
        "Leaving Acme\ngive four weeks.",  # the next line does not start a sentence
        "the manager\nSays so.",  # a heading starts with a capital or a digit
        "Leaving Acme -\nGive four weeks.",  # a dash joins it to the next line
        f"Leaving Acme and a line longer than half of a full one\n{FULL_LINE[:70]}",
    ],
)
def test_a_short_line_that_goes_on_is_no_heading(text: str) -> None:
    assert "\n\n" not in clean_pdf_text(text)


def test_a_short_line_inside_a_paragraph_is_no_heading() -> None:
    text = f"{FULL_LINE}\nLeaving Acme\nGive four weeks."
    assert "\n\n" not in clean_pdf_text(text)


def test_pdf_detected_by_magic_whatever_the_label() -> None:
    data = make_pdf(["Magic bytes decide."])
    for filename, content_type in [("x.txt", "text/plain"), ("noext", None), ("a.bin", "")]:
        doc = parse(data, filename, content_type)
        assert doc.content_type == "application/pdf"
        assert "Magic bytes decide." in doc.pages[0]


def test_pdf_with_empty_user_password_is_accepted() -> None:
    doc = parse(make_pdf(["Readable by anyone."], user_password=""))
    assert "Readable by anyone." in doc.pages[0]


def test_text_and_markdown() -> None:
    text = "\ufeffFirst page.\r\nStill first.\fSecond page.".encode()
    doc = parse(text, "notes.txt", "text/plain; charset=utf-8")
    assert doc == ParsedDocument(
        "notes.txt", "text/plain", ["First page.\nStill first.", "Second page."]
    )
    md = parse(b"# Title\n\nBody\f text", "C:\\fakepath\\readme.md", None)
    assert md.content_type == "text/markdown"
    assert md.source == "readme.md"
    assert md.pages == ["# Title\n\nBody\n text"]
    # No extension, no label: UTF-8 text is text.
    assert parse("Grüße".encode(), "README", "application/octet-stream").pages == ["Grüße"]


def test_parse_text() -> None:
    doc = parse_text(" handbook.md ", "# Rules\n\nBe kind.")
    assert doc == ParsedDocument("handbook.md", "text/markdown", ["# Rules\n\nBe kind."])
    # JSON text is read as a file of its source's name (docs/guide.md#documents)
    assert parse_text("faq", "a\fb").pages == ["a", "b"]
    assert parse_text("notes.txt", "A.\fB.").pages == ["A.", "B."]
    assert parse_text("notes.markdown", "A.\fB.").pages == ["A.\nB."]
    with pytest.raises(ValidationFailed) as blank:
        parse_text("faq", " \n ")
    assert (blank.value.code, blank.value.param) == ("no_text", "text")
    with pytest.raises(ValidationFailed) as nameless:
        parse_text("  ", "text")
    assert nameless.value.param == "source"


# --- every bad file, with its status and code ----------------------------------


def test_too_large() -> None:
    with pytest.raises(PayloadTooLarge) as exc:
        parse_document(b"x" * 11, "a.txt", max_bytes=10, max_pages=5)
    assert_error(exc.value, 413, "file_too_large")


def test_empty_file() -> None:
    with pytest.raises(ValidationFailed) as exc:
        parse(b"", "a.pdf", "application/pdf")
    assert_error(exc.value, 422, "empty_file")


@pytest.mark.parametrize(
    ("filename", "content_type", "data"),
    [
        ("photo.png", "image/png", b"\x89PNG\r\n\x1a\n...."),
        ("archive.zip", "application/zip", b"PK\x03\x04 zip bytes"),
        ("old.xls", "application/vnd.ms-excel", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1 ole2"),
        ("blob", None, b"\x00\x01\x02\xff binary"),
        ("image.svg", "image/svg+xml", b"<svg></svg>"),
    ],
)
def test_unsupported_type(filename: str, content_type: str | None, data: bytes) -> None:
    with pytest.raises(UnsupportedMediaType) as exc:
        parse(data, filename, content_type)
    assert_error(exc.value, 415, "unsupported_file_type")
    assert "Word (.docx), PowerPoint (.pptx), Excel (.xlsx), CSV, HTML" in exc.value.detail


@pytest.mark.parametrize(
    "data",
    [
        b"%PDF-1.7\nthis is not really a pdf at all",
        make_pdf(["Cut short."])[:200],
        b"%PDF-1.4\n" + bytes(range(256)) * 4,
    ],
    ids=["garbage", "truncated", "binary-junk"],
)
def test_invalid_pdf(data: bytes) -> None:
    with pytest.raises(ValidationFailed) as exc:
        parse(data, "broken.pdf", "application/pdf")
    assert_error(exc.value, 422, "invalid_pdf")


def test_labelled_pdf_without_header_is_invalid() -> None:
    with pytest.raises(ValidationFailed) as exc:
        parse(b"just some text", "fake.pdf", None)
    assert_error(exc.value, 422, "invalid_pdf")


def test_encrypted_pdf() -> None:
    with pytest.raises(ValidationFailed) as exc:
        parse(make_pdf(["Top secret."], user_password="hunter2"))
    assert_error(exc.value, 422, "encrypted_pdf")


def test_no_text() -> None:
    with pytest.raises(ValidationFailed) as exc:
        parse(make_pdf(["", ""]))
    assert_error(exc.value, 422, "no_text")
    with pytest.raises(ValidationFailed) as blank_text:
        parse(b" \n\t\f ", "blank.txt")
    assert_error(blank_text.value, 422, "no_text")


def test_too_many_pages() -> None:
    with pytest.raises(PayloadTooLarge) as exc:
        parse_document(make_pdf(["a", "b", "c"]), "x.pdf", max_bytes=10**6, max_pages=2)
    assert_error(exc.value, 413, "too_many_pages")


@pytest.mark.parametrize("data", ["café".encode("latin-1"), b"ok \xff\xfe", b"nul\x00byte"])
def test_invalid_encoding(data: bytes) -> None:
    with pytest.raises(ValidationFailed) as exc:
        parse(data, "notes.txt", "text/plain")
    assert_error(exc.value, 422, "invalid_encoding")


_VALID = make_pdf([FILLER * 4, FILLER * 4])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cut=st.integers(min_value=5, max_value=len(_VALID)),
    flips=st.lists(st.tuples(st.integers(0, len(_VALID) - 1), st.integers(0, 255)), max_size=8),
)
def test_damaged_pdfs_fail_only_with_our_errors(cut: int, flips: list[tuple[int, int]]) -> None:
    data = bytearray(_VALID[:cut])
    for position, value in flips:
        if 5 <= position < len(data):  # keep the %PDF- header so it is read as a PDF
            data[position] = value
    try:
        doc = parse(bytes(data), "damaged.pdf", "application/pdf")
    except (ValidationFailed, PayloadTooLarge) as exc:
        assert exc.param == "file"
        assert exc.code in {"invalid_pdf", "encrypted_pdf", "no_text", "too_many_pages"}
    else:
        assert all(isinstance(page, str) for page in doc.pages)
