"""Scanned PDF pages: listed in a document's warnings, and read by OCR when it is on.

Real PDFs made here (fpdf2 pages of text, and pages that hold only a Pillow-rendered
image of their words, as a scanner makes them), parsed in real worker processes and
served over HTTP; OCR by the real ``tesseract`` command (those tests are skipped where
it is not installed) or by a plugin engine that fails on purpose.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import helpers
import pytest
from helpers import FastApi, assert_problem, open_with, wait_for, where_cited
from ingest_plugins import BrokenOcr
from pdfs import filler, make_form_image_pdf, make_pdf, make_scanned_pdf

from agentcore import AgentCore
from agentcore.events import Event
from agentcore.knowledge.ingest import parse_document
from agentcore.knowledge.ocr import OcrUnavailable
from agentcore_starlette import create_app

api = helpers.api  # the faster `api` fixture (uvicorn and ASGI, acme/test read+write key)

pytestmark = pytest.mark.timeout(240)

DOCS = "/v1/knowledge/documents"
FACT = "The Zephyrine observatory records four hundred and twelve meteor showers every decade."
QUERY = "How many meteor showers does the Zephyrine observatory record?"
TESSERACT = shutil.which("tesseract") is not None
NO_TESSERACT = "needs the tesseract command on PATH (apt-get install tesseract-ocr)"


@functools.cache
def mixed_pdf() -> bytes:
    """Five pages: text, a scan, text, a scan of ``FACT``, text."""
    pages = [filler(8, 1), filler(8, 2), filler(8, 3), FACT, filler(8, 5)]
    return make_scanned_pdf(pages, scanned={2, 4})


def upload(api: Any, name: str, data: bytes) -> Any:
    return api.post(DOCS, files={"file": (name, data, "application/pdf")})


def warnings_of(document: dict[str, Any]) -> list[tuple[str, list[int]]]:
    return [(warning["code"], warning["pages"]) for warning in document["warnings"]]


# without OCR: the scanned pages are listed ------------------------------------------


def test_a_mixed_pdf_lists_its_scanned_pages(api: Any, core: AgentCore) -> None:
    response = upload(api, "mixed.pdf", mixed_pdf())
    assert response.status_code == 201, response.text
    document = response.json()
    assert warnings_of(document) == [("no_text", [2, 4])]
    assert "`ocr` setting" in document["warnings"][0]["detail"]
    assert document["pages"] == 5
    assert api.get(f"{DOCS}/{document['id']}").json()["warnings"] == document["warnings"]
    listed = api.get(DOCS).json()["documents"]
    assert [d["warnings"] for d in listed] == [document["warnings"]]
    # the text pages are searchable as ever; the scan's words are not
    found = api.post("/v1/knowledge/search", json={"query": QUERY, "top_k": 5}).json()
    assert all(4 not in result["pages"] for result in found["results"])
    # the same document, in Python
    stored = core.workspace("acme").knowledge.get(document["id"])
    assert [(w.code, w.pages) for w in stored.warnings] == [("no_text", [2, 4])]


def test_a_pdf_of_text_has_no_warnings(api: Any, core: AgentCore) -> None:
    response = upload(api, "text.pdf", make_pdf([filler(8, 1), "", filler(8, 2)]))
    assert response.status_code == 201, response.text
    assert response.json()["warnings"] == []  # a blank page is no scan
    text = api.post(DOCS, json={"source": "notes.md", "text": "Plain words."}).json()
    assert text["warnings"] == []
    knowledge = core.workspace("acme").knowledge
    assert knowledge.ingest_file(make_pdf([filler(4, 9)]), filename="py.pdf").warnings == []


def test_a_pdf_of_scans_alone_is_still_refused_without_ocr(api: Any) -> None:
    response = upload(api, "scan.pdf", make_scanned_pdf([FACT, filler(3, 1)], scanned={1, 2}))
    assert_problem(response, 422, "no_text", param="file")
    assert "scanned PDF needs OCR" in response.json()["detail"]
    assert api.get(DOCS).json()["documents"] == []


def test_an_image_drawn_through_a_form_is_a_scan_and_an_unshown_one_is_not() -> None:
    parsed = parse_document(make_form_image_pdf(), "forms.pdf", max_bytes=10**6, max_pages=10)
    assert parsed.pages[0] and parsed.pages[1:] == ["", ""]
    assert [(w.code, w.pages) for w in parsed.warnings] == [("no_text", [2])]


@pytest.mark.both_stores
@pytest.mark.parametrize("workers", [1, 0], ids=["worker process", "thread"])
def test_a_background_job_keeps_the_warnings_and_announces_them(
    store_url: str, workers: int
) -> None:
    with open_with(store_url, ingest_workers=workers) as core:
        heard: list[Event] = []
        core.events.subscribe("document.ready", heard.append)
        core.start()
        knowledge = core.workspace("acme").knowledge
        queued = knowledge.ingest_file(mixed_pdf(), filename="mixed.pdf", wait=False)
        assert queued.status == "processing" and queued.warnings == []
        ready = wait_for(lambda: (d := knowledge.get(queued.id)).status == "ready" and d)
        assert [(w.code, w.pages) for w in ready.warnings] == [("no_text", [2, 4])]
        event = wait_for(lambda: heard and heard[0])
        assert event.data["document_id"] == queued.id
        assert event.data["warnings"] == [w.model_dump(mode="json") for w in ready.warnings]


# OCR ------------------------------------------------------------------------------


@contextmanager
def served(store: str | Path, *plugins: object, **settings: Any) -> Iterator[FastApi]:
    """The API (over ASGI, an acme/test read+write key) of a started core on ``store``
    with ``plugins`` and ``settings``: its uploads are parsed in worker processes."""
    with open_with(store, *plugins, **settings) as core:
        core.start()
        core.create_organization("acme")
        key = core.keys.create("acme", "test", ("read", "write")).secret
        yield FastApi(create_app(core), None, key)


@pytest.mark.both_stores
@pytest.mark.tesseract
@pytest.mark.skipif(not TESSERACT, reason=NO_TESSERACT)
def test_ocr_reads_scanned_pages_which_are_then_searched_and_cited(store_url: str) -> None:
    # time to spare for tesseract on a loaded machine (a page may take 5 s by default)
    with served(store_url, ocr="tesseract", ingest_page_cpu_seconds=30.0) as api:
        response = upload(api, "mixed.pdf", mixed_pdf())
        assert response.status_code == 201, response.text
        document = response.json()
        assert warnings_of(document) == [("ocr", [2, 4])]
        assert "OCR (tesseract)" in document["warnings"][0]["detail"]
        search = api.post("/v1/knowledge/search", json={"query": QUERY, "top_k": 1})
        best = search.json()["results"][0]
        assert 4 in best["pages"] and "four hundred and twelve" in best["chunk"]
        agent = api.post("/v1/agents", json={"name": "Astronomer"}).json()
        answer = api.post("/v1/chat/message", json={"agentId": agent["id"], "message": QUERY})
        assert answer.status_code == 200, answer.text
        assert "four hundred and twelve" in answer.json()["response"]
        assert where_cited(answer.json()["citations"]) == [{"source": "mixed.pdf", "pages": [4]}]
        # a file of scans alone is read too
        scans = upload(api, "scans.pdf", make_scanned_pdf([filler(2, 7), FACT], scanned={1, 2}))
        assert scans.status_code == 201, scans.text
        assert warnings_of(scans.json()) == [("ocr", [1, 2])]


@pytest.mark.tesseract
@pytest.mark.skipif(not TESSERACT, reason=NO_TESSERACT)
def test_tesseract_out_of_time_is_killed_and_leaves_the_warning(tmp_path: Path) -> None:
    # a page may take 0.1 s: tesseract takes longer than that to start
    with served(tmp_path / "slow.db", ocr="tesseract", ingest_page_cpu_seconds=0.1) as api:
        response = upload(api, "mixed.pdf", mixed_pdf())
        assert response.status_code == 201, response.text
        document = response.json()
        assert warnings_of(document) == [("no_text", [2, 4])]
        assert "OCR (tesseract) read no text" in document["warnings"][0]["detail"]
        assert "it took more than 0.1 s" in document["warnings"][0]["detail"]


@pytest.mark.parametrize(
    ("mode", "reason"),
    [("raise", "the scanner glass is dirty"), ("timeout", "it took more than 0.5 s")],
)
def test_an_ocr_engine_that_fails_leaves_the_warning(
    tmp_path: Path, mode: str, reason: str
) -> None:
    engine = BrokenOcr(mode)  # rebuilt in the worker process that parses the upload
    with served(
        tmp_path / "broken.db", engine, ocr=engine.name, ingest_page_cpu_seconds=0.5
    ) as api:
        response = upload(api, "mixed.pdf", mixed_pdf())
        assert response.status_code == 201, response.text
        document = response.json()
        assert warnings_of(document) == [("no_text", [2, 4])]
        detail = document["warnings"][0]["detail"]
        assert "OCR (broken-ocr) read no text" in detail and reason in detail
        # a file of scans alone: the clear 422, never a 500
        refused = upload(api, "scan.pdf", make_scanned_pdf([FACT], scanned={1}))
        assert_problem(refused, 422, "no_text", param="file")
        assert "OCR (broken-ocr)" in refused.json()["detail"] and reason in refused.json()["detail"]


def test_an_unknown_ocr_engine_stops_the_core_from_opening(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(OcrUnavailable, match=r"'abbyy' is not registered \(registered: "):
        AgentCore.open(tmp_path / "a.db", ocr="abbyy")
    assert issubclass(OcrUnavailable, ValueError)
    # the built-in engine without its command: the error says what it needs
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(OcrUnavailable, match="tesseract command is on PATH"):
        AgentCore.open(tmp_path / "a.db", ocr="tesseract")
    monkeypatch.setenv("AGENTCORE_OCR", "")  # set, but empty: no OCR
    with AgentCore.open(tmp_path / "a.db") as core:
        assert core.settings.ocr is None and core.ocr is None
