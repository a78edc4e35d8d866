"""Bounded ingestion: chunk caps, token caps for embedders, cancellation that stores nothing."""

from __future__ import annotations

import queue
import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pytest
from conftest import ServerThread
from helpers import assert_problem
from pdfs import filler, make_pdf, make_pdf_bomb

import agentcore
from agentcore import AgentCore, Cancellation, Cancelled, DeadlineExceeded, PayloadTooLarge
from agentcore.knowledge._chunking import chunk_pages
from agentcore.knowledge.embedders import bounded_text
from agentcore.knowledge.ingest import TextBudget, parse_document
from agentcore.knowledge.vectors._embedding import EMBED_BATCH
from agentcore.plugins.hashing_embedder import HashingEmbedder
from agentcore.schema import VerifyResponse
from agentcore_starlette import create_app
from agentcore_starlette.routes import ROUTES
from agentcore_starlette.routing import ApiRoute, Call

pytestmark = pytest.mark.timeout(120)  # the quadratic cases used to run for hours


class RecordingEmbedder:
    """The default embedder, recording what it is fed; ``on_call`` may act on each call."""

    name = "recording"
    dimension = 1024

    def __init__(self, on_call: Any = None) -> None:
        self.inner = HashingEmbedder()
        self.batches: list[list[str]] = []
        self.on_call = on_call

    def embed(self, texts: Sequence[str], kind: str = "passage") -> npt.NDArray[np.float32]:
        self.batches.append(list(texts))
        if self.on_call is not None:
            self.on_call(len(self.batches))
        return self.inner.embed(texts, kind="passage")


class EmbedderPlugin:
    def __init__(self, embedder: Any) -> None:
        self.embedder = embedder

    @agentcore.hookimpl
    def agentcore_register_embedders(self, register: Any, settings: Any) -> None:
        register(self.embedder)


def open_core(path: Path, embedder: Any, **settings: Any) -> AgentCore:
    return AgentCore.open(
        path, embedder=embedder.name, plugins=[EmbedderPlugin(embedder)], **settings
    )


def table_counts(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as conn:
        return {
            table: conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
            for table in ("documents", "chunks", "vector_segments")
        }


def longest_run(text: str) -> int:
    return max((len(run) for run in re.findall(r"\S+", text)), default=0)


# chunking ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "text",
    [
        "!" * 400_000,  # one punctuation run: the sentence regex used to be quadratic here
        "A. " * 150_000,  # 150k one-letter sentences: packing used to re-sum each chunk
        "x" * 400_000,  # one giant token
        "a\n\n" * 150_000,  # 150k paragraphs
    ],
)
def test_hostile_text_chunks_in_linear_time(text: str) -> None:
    chunks = chunk_pages([text], target_chars=700, overlap_chars=150)
    assert chunks and all(0 < len(chunk.text) <= 700 for chunk in chunks)


def test_chunking_stops_past_max_chunks() -> None:
    text = "Word " * 10_000  # about 70 chunks of 700 characters
    assert len(chunk_pages([text], max_chunks=100)) < 100
    with pytest.raises(PayloadTooLarge) as caught:
        chunk_pages([text], max_chunks=10)
    assert caught.value.code == "too_many_chunks"


def test_chunking_checks_the_cancellation() -> None:
    cancellation = Cancellation()
    cancellation.cancel("test")
    with pytest.raises(Cancelled):
        chunk_pages(["Some text. " * 10], cancellation=cancellation)


def test_bounded_text_cuts_only_long_runs() -> None:
    assert bounded_text("short words stay", 8) == "short words stay"
    assert bounded_text("a " + "x" * 20 + "\ny", 8) == "a xxxxxxxx\ny"
    assert bounded_text("x" * 8, 8) == "x" * 8  # the boundary itself is kept whole
    assert bounded_text("x" * 9, 8) == "x" * 8


# the embedder path ------------------------------------------------------------------


def test_embedders_get_bounded_tokens_in_batches(tmp_path: Path) -> None:
    embedder = RecordingEmbedder()
    with open_core(tmp_path / "a.db", embedder, max_token_chars=32) as core:
        ws = core.workspace("acme")
        blob = "QUJD" * 150_000  # 600 kB of base64-like text without whitespace
        document = ws.knowledge.ingest_file(blob.encode(), filename="blob.txt", wait=True)
    assert document.status == "ready" and document.chunks > EMBED_BATCH
    assert max(len(batch) for batch in embedder.batches) <= EMBED_BATCH
    assert max(longest_run(text) for batch in embedder.batches for text in batch) == 32


def test_a_search_query_is_bounded_like_the_passages(tmp_path: Path) -> None:
    embedder = RecordingEmbedder()
    with open_core(tmp_path / "a.db", embedder, max_token_chars=16) as core:
        ws = core.workspace("acme")
        ws.knowledge.ingest_text("a.txt", "token " + "y" * 40)
        embedder.batches.clear()
        assert ws.knowledge.search("y" * 40).results  # the long token still matches
    assert embedder.batches == [["y" * 16]]


def test_too_many_chunks_is_a_413_and_stores_nothing(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    with AgentCore.open(db, max_document_chunks=3) as core:
        ws = core.workspace("acme")
        with pytest.raises(PayloadTooLarge) as caught:
            ws.knowledge.ingest_text("long.txt", "A sentence of words. " * 500)
        assert caught.value.code == "too_many_chunks"
        assert ws.knowledge.ingest_text("short.txt", "Short enough.").status == "ready"
    assert table_counts(db)["documents"] == 1


def test_too_many_chunks_over_http(tmp_path: Path) -> None:
    with AgentCore.open(tmp_path / "a.db", max_document_chunks=2, rate_limit_test=1e6) as core:
        core.create_organization("acme")
        key = core.keys.create("acme", "test", ["read", "write"]).secret
        with ServerThread(create_app(core)) as server:
            response = httpx.post(
                server.url + "/v1/knowledge/documents",
                headers={"Authorization": f"Bearer {key}"},
                files={"file": ("long.txt", b"Words and more words. " * 200, "text/plain")},
            )
    assert_problem(response, 413, "too_many_chunks", param="file")


# cancellation -------------------------------------------------------------------------


@pytest.mark.parametrize("reason", ["client disconnected", "deadline"])
def test_cancelled_ingestion_stores_nothing(tmp_path: Path, reason: str) -> None:
    cancellation = Cancellation()

    def cancel_on_second_batch(calls: int) -> None:
        if calls == 2:
            cancellation.cancel(reason)

    embedder = RecordingEmbedder(cancel_on_second_batch)
    db = tmp_path / "a.db"
    with open_core(db, embedder) as core:
        ws = core.workspace("acme")
        text = "Paragraph text with words. " * 20_000  # several batches
        expected = DeadlineExceeded if reason == "deadline" else Cancelled
        with pytest.raises(expected):
            ws.knowledge.ingest_file(
                text.encode(), filename="big.txt", wait=True, cancellation=cancellation
            )
        assert len(embedder.batches) == 2  # stopped at the next checkpoint
        assert ws.knowledge.list().documents == []
        assert ws.knowledge.search("paragraph words").results == []
    assert table_counts(db) == {"documents": 0, "chunks": 0, "vector_segments": 0}


def test_a_passed_deadline_stops_before_anything_is_stored(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    with AgentCore.open(db) as core:
        ws = core.workspace("acme")
        with pytest.raises(DeadlineExceeded):
            ws.knowledge.ingest_text("a.txt", "Some words.", cancellation=Cancellation(timeout=0))
    assert table_counts(db)["documents"] == 0


# the HTTP adapter fires the cancellation -----------------------------------------------


def waiting_route(seen: queue.Queue[str]) -> ApiRoute:
    def wait_for_cancellation(call: Call) -> VerifyResponse:
        """Waits until the request is cancelled; records why."""
        call.cancellation.wait(30)
        seen.put(call.cancellation.reason)
        return call.workspace.verify()

    return ApiRoute(
        method="POST",
        path="/test/wait",
        handler=wait_for_cancellation,
        response=VerifyResponse,
        summary="Wait",
        scope="any",
        tag="test",
    )


@pytest.fixture
def waiting_server(tmp_path: Path) -> Iterator[tuple[str, str, queue.Queue[str]]]:
    seen: queue.Queue[str] = queue.Queue()
    with AgentCore.open(tmp_path / "a.db", rate_limit_test=1e6) as core:
        core.create_organization("acme")
        key = core.keys.create("acme", "test", ["read", "write"]).secret
        app = create_app(core, routes=[*ROUTES, waiting_route(seen)], request_deadline=1.0)
        with ServerThread(app) as server:
            yield server.url, key, seen


def test_a_client_disconnect_cancels_the_work(
    waiting_server: tuple[str, str, queue.Queue[str]],
) -> None:
    url, key, seen = waiting_server
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(url + "/v1/test/wait", headers={"Authorization": f"Bearer {key}"}, timeout=0.3)
    assert seen.get(timeout=60) == "client disconnected"


def test_a_passed_request_deadline_cancels_the_work(
    waiting_server: tuple[str, str, queue.Queue[str]],
) -> None:
    url, key, seen = waiting_server
    response = httpx.post(
        url + "/v1/test/wait", headers={"Authorization": f"Bearer {key}"}, timeout=20
    )
    assert_problem(response, 504, "deadline_exceeded")
    assert seen.get(timeout=60) == "deadline"


def test_uncancelled_work_is_not_disturbed(tmp_path: Path) -> None:
    done = threading.Event()
    embedder = RecordingEmbedder(lambda calls: done.set())
    with open_core(tmp_path / "a.db", embedder, rate_limit_test=1e6) as core:
        core.create_organization("acme")
        key = core.keys.create("acme", "test", ["read", "write"]).secret
        with ServerThread(create_app(core)) as server:
            response = httpx.post(
                server.url + "/v1/knowledge/documents",
                headers={"Authorization": f"Bearer {key}"},
                files={"file": ("a.txt", b"Plain words in a file.", "text/plain")},
            )
    assert response.status_code == 201 and response.json()["status"] == "ready"
    assert done.is_set()


def test_huge_paragraphs_are_searched_in_bounded_blocks() -> None:
    from agentcore.knowledge._chunking import BLOCK_CHARS, _blocks

    words = ("word " * (BLOCK_CHARS // 2))[: BLOCK_CHARS * 3]
    for text in (words, "x" * (BLOCK_CHARS * 3 + 5), "short text"):
        pieces = list(_blocks(text, 0, len(text)))
        assert pieces[0][0] == 0 and pieces[-1][1] == len(text)
        assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:], strict=False))
        assert all(0 < end - start <= BLOCK_CHARS for start, end in pieces)
    # with whitespace about, every cut falls just after it
    assert all(words[end - 1] == " " for _, end in list(_blocks(words, 0, len(words)))[:-1])


# PDF text budgets ------------------------------------------------------------------------

BUDGET = TextBudget(page_chars=100_000, total_chars=1_000_000)


def parse_pdf(data: bytes, budget: TextBudget | None = BUDGET, **kwargs: Any) -> Any:
    return parse_document(
        data, "doc.pdf", max_bytes=50 * 1024 * 1024, max_pages=5_000, budget=budget, **kwargs
    )


def test_a_pdf_bomb_stops_at_the_page_budget() -> None:
    bomb = make_pdf_bomb(pages=50)  # each page extracts to ~3.5 MB of text
    with pytest.raises(PayloadTooLarge) as caught:
        parse_pdf(bomb)
    assert (caught.value.code, caught.value.param, caught.value.status) == (
        "too_large",
        "file",
        413,
    )
    assert "Page 1 " in caught.value.detail and "100,000" in caught.value.detail


def test_the_total_budget_counts_every_page() -> None:
    pages = [filler(40, seed) for seed in range(6)]  # ~2,500 characters a page
    document = make_pdf(pages)
    assert len(parse_pdf(document, TextBudget(page_chars=5_000, total_chars=50_000)).pages) == 6
    with pytest.raises(PayloadTooLarge) as caught:
        parse_pdf(document, TextBudget(page_chars=5_000, total_chars=8_000))
    assert caught.value.code == "too_large"
    assert "8,000" in caught.value.detail and "by page 4" in caught.value.detail


def test_a_page_just_within_its_budget_is_kept() -> None:
    document = make_pdf([filler(40, 1)])
    text = parse_pdf(document, None).pages[0]
    raw = len(text)  # cleaned text: the raw extraction is at least this long
    with pytest.raises(PayloadTooLarge):
        parse_pdf(document, TextBudget(page_chars=raw // 2, total_chars=10 * raw))
    assert parse_pdf(document, TextBudget(page_chars=2 * raw, total_chars=10 * raw)).pages == [text]


def test_pdf_extraction_checks_the_cancellation_between_pages() -> None:
    cancellation = Cancellation()
    cancellation.cancel("shutdown")
    with pytest.raises(Cancelled):
        parse_pdf(make_pdf(["One page of words."]), cancellation=cancellation)
    with pytest.raises(DeadlineExceeded):
        parse_pdf(make_pdf(["One page of words."]), cancellation=Cancellation(timeout=0))


def test_the_core_refuses_a_pdf_bomb_quickly_in_process(tmp_path: Path) -> None:
    """Not started, the core parses in the calling thread: the budget still holds."""
    bomb = make_pdf_bomb(text_bytes=400_000)  # ~350,000 characters a page: see below
    with AgentCore.open(tmp_path / "a.db", max_pdf_page_chars=100_000) as core:
        ws = core.workspace("acme")
        with pytest.raises(PayloadTooLarge) as caught:
            ws.knowledge.ingest_file(bomb, filename="bomb.pdf")
        # past the page limit long before parsing costs the page's CPU budget
        assert caught.value.code == "too_large"
        assert ws.knowledge.list().documents == []
    assert table_counts(tmp_path / "a.db") == {"documents": 0, "chunks": 0, "vector_segments": 0}
