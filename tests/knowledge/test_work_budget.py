"""Reading a PDF is bounded by work, not only by text: operators, XObjects, CPU time.

The files are the drawing and XObject bombs of issue #36 (``tests/pdfs.py``): pages
that cost seconds to parse and extract to nothing, which no text budget sees.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
from pdfs import (
    filler,
    make_drawing_bomb,
    make_form_text_pdf,
    make_pdf,
    make_pdf_bomb,
    make_xobject_bomb,
)

from agentcore.errors import PayloadTooLarge, ValidationFailed
from agentcore.knowledge.ingest import TextBudget, WorkBudget, parse_document

TEXT = TextBudget(page_chars=1_000_000, total_chars=70_000_000)
LIMITS: dict[str, Any] = {
    "cpu_seconds": 3600.0,
    "page_cpu_seconds": 3600.0,
    "page_operators": 200_000,
    "page_xobjects": 1_000,
}


def work(**changes: Any) -> WorkBudget:
    return WorkBudget(**{**LIMITS, **changes})


def parse(data: bytes, budget: WorkBudget | None, text: TextBudget | None = TEXT) -> Any:
    return parse_document(
        data, "doc.pdf", max_bytes=50 * 1024 * 1024, max_pages=5_000, budget=text, work=budget
    )


def refusal(data: bytes, budget: WorkBudget) -> PayloadTooLarge:
    with pytest.raises(PayloadTooLarge) as caught:
        parse(data, budget)
    assert (caught.value.status, caught.value.param) == (413, "file")
    return caught.value


def test_a_page_of_a_quarter_million_operators_is_refused_before_it_is_parsed() -> None:
    refused = refusal(make_drawing_bomb(text=True), work())
    assert refused.code == "too_complex"
    assert "Page 1 " in refused.detail and "200,000" in refused.detail
    assert "max_pdf_page_operators" in refused.detail


def test_the_operator_limit_is_a_boundary() -> None:
    bomb = make_drawing_bomb(pages=2, operators=1_000, text=True)
    assert refusal(bomb, work(page_operators=999)).code == "too_complex"
    # 1,000 cm and the shown letter's five operators (BT Tf Td Tj ET)
    assert parse(bomb, work(page_operators=1_005)).pages == ["x", "x"]
    assert refusal(bomb, work(page_operators=1_004)).code == "too_complex"


def test_a_page_that_can_show_no_text_is_not_parsed() -> None:
    # 4,999 pages of 266k drawing operators and no text operator: nothing to read, and
    # no operator limit or CPU budget is reached, since nothing is parsed
    tight = work(page_operators=10_000_000, cpu_seconds=60.0, page_cpu_seconds=1.0)
    with pytest.raises(ValidationFailed) as caught:
        parse(make_drawing_bomb(), tight)
    assert caught.value.code == "no_text"


# a stop that lands in a callback whose errors Python ignores is reported as unraisable
# (and raised again): the page is stopped all the same
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_page_past_its_cpu_budget_is_stopped_mid_parse() -> None:
    # the operators are allowed; parsing them costs seconds of CPU (7 s here)
    bomb = make_drawing_bomb(pages=3, text=True)
    refused = refusal(bomb, work(page_operators=10_000_000, page_cpu_seconds=0.5))
    assert refused.code == "too_complex"
    assert "page 1 " in refused.detail and "ingest_page_cpu_seconds" in refused.detail


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_the_document_cpu_budget_counts_every_page() -> None:
    # each page draws 5,000 forms (pypdf's own cap per page), a third of a second each
    bomb = make_xobject_bomb(pages=200)
    refused = refusal(bomb, work(page_xobjects=1_000_000, cpu_seconds=1.5))
    assert refused.code == "too_complex"
    assert "1.5 s of CPU time by page" in refused.detail
    assert "page 1." not in refused.detail  # several pages fitted in the budget


def test_forms_drawn_by_forms_count_as_they_are_read() -> None:
    refused = refusal(make_xobject_bomb(), work())
    assert refused.code == "too_complex"
    assert "Page 1 " in refused.detail and "1,000 XObject" in refused.detail


def test_the_xobject_limit_is_a_boundary() -> None:
    shallow = make_xobject_bomb(pages=1, depth=2, fanout=10)  # the page: 10 + 10 x 10
    parse_shallow = pytest.raises(ValidationFailed)  # drawings only: no text, but read
    with parse_shallow:
        parse(shallow, work(page_xobjects=110))
    assert refusal(shallow, work(page_xobjects=109)).code == "too_complex"


def test_text_inside_a_form_counts_against_the_page_budget() -> None:
    # pypdf catches Exception around a form and logs it: the budget's stop must pass it
    document = make_form_text_pdf(repeat=2_000)  # ~130,000 characters, all in a form
    with pytest.raises(PayloadTooLarge) as caught:
        parse(document, work(), TextBudget(page_chars=10_000, total_chars=1_000_000))
    assert caught.value.code == "too_large"
    assert len(parse(document, work()).pages[0]) > 100_000


def test_the_text_bomb_is_still_a_text_budget_refusal() -> None:
    refused = refusal(make_pdf_bomb(pages=20), work())
    assert refused.code == "too_large" and "1,000,000 characters" in refused.detail


def test_an_ordinary_pdf_reads_the_same_within_the_budget() -> None:
    pages = [filler(30, seed) for seed in range(5)]
    document = make_pdf(pages)
    assert parse(document, work(cpu_seconds=30.0, page_cpu_seconds=5.0)).pages == (
        parse(document, None, None).pages
    )


def test_the_budget_grows_with_the_file() -> None:
    budget = WorkBudget.for_size(
        3 * 1024 * 1024,
        cpu_seconds=10.0,
        cpu_seconds_per_mib=5.0,
        page_cpu_seconds=2.0,
        page_operators=7,
        page_xobjects=8,
    )
    assert budget == WorkBudget(
        cpu_seconds=25.0, page_cpu_seconds=2.0, page_operators=7, page_xobjects=8
    )


def test_the_parsers_warnings_about_a_file_are_one_line(caplog: pytest.LogCaptureFixture) -> None:
    # every page draws 10 x 10^4 nested forms: pypdf warns once per page that it stopped
    bomb = make_xobject_bomb(pages=6)
    with caplog.at_level(logging.WARNING), pytest.raises(ValidationFailed):
        parse(bomb, work(page_xobjects=1_000_000))
    pypdf = [r for r in caplog.records if r.name.startswith("pypdf")]
    ours = [r for r in caplog.records if r.name == "agentcore.ingest"]
    assert pypdf == []
    assert len(ours) == 1
    assert "warned 6 time(s)" in ours[0].getMessage()
    assert "form XObject invocations" in ours[0].getMessage()


def test_the_parsers_warnings_on_other_threads_pass(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[str] = []

    def elsewhere() -> None:
        logging.getLogger("pypdf._page").warning("a warning of another reader")
        seen.append("done")

    bomb = make_xobject_bomb(pages=2)
    with caplog.at_level(logging.WARNING), pytest.raises(ValidationFailed):
        parse(bomb, work(page_xobjects=1_000_000))
    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert seen == ["done"]
    assert "a warning of another reader" in [r.getMessage() for r in caplog.records]
