"""Sentence frequencies kept per document: always equal to a full recount, never recounted."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import Recorder, core_with, summed_rows
from pdfs import make_pdf

from agentcore import AgentCore
from agentcore.chat_models import ChatRequest, ChatResult
from agentcore.knowledge.terms import TermCounter, TermStats, count_terms
from agentcore.knowledge.text import stems as tokenizer

tokens_of = tokenizer.tokens_of

BOTH_STORES = pytest.mark.parametrize(
    "store_kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.slow)], indirect=True
)

TEXTS = {
    "fleet.md": "# Fleet\n\nThe turbine blades are stored in Rotterdam. Each blade weighs "
    "nine tonnes.\n\nBlades are inspected every spring.",
    "canteen.txt": "The canteen opens at eight. Breakfast is served until ten. The canteen "
    "closes at four on Fridays.",
    "empty-ish.txt": "... !!! 1234 ... The end.",
}
PDF_PAGES = [
    "The emergency generator is tested on the first Monday of each month.",
    "The generator room key is kept at the front desk. Spare fuel is stored outside.",
]


def recount(core: AgentCore, ws: Any) -> tuple[int, Counter[str]]:
    """Sentence counts over every chunk the workspace holds now, from scratch."""
    texts = [
        text
        for _document, _ids, chunk_texts in core.store.iter_chunk_texts(
            ws.organization_id, ws.environment
        )
        for text in chunk_texts
    ]
    counts = count_terms(texts, tokens_of)
    return counts.sentences, counts.stems


def stored(core: AgentCore, ws: Any, stems: list[str]) -> tuple[int, dict[str, int]]:
    sentences, counts = core.store.term_counts(ws.organization_id, ws.environment, stems)
    return sentences, counts


def assert_equal_to_recount(core: AgentCore, ws: Any, also: list[str]) -> None:
    sentences, expected = recount(core, ws)
    got_sentences, got = stored(core, ws, [*expected, *also])
    assert got_sentences == sentences
    assert {stem: n for stem, n in got.items() if n} == dict(expected)


@BOTH_STORES
def test_counts_equal_a_full_recount_after_ingests_and_deletes(core: AgentCore) -> None:
    ws = core.workspace("acme", "test")
    other = core.workspace("acme", "live")  # another workspace never leaks in
    other.knowledge.ingest_text("z.txt", "Zeppelins are stored in hangars.")
    ids = {name: ws.knowledge.ingest_text(name, text).id for name, text in TEXTS.items()}
    pdf = ws.knowledge.ingest_file(make_pdf(PDF_PAGES), filename="ops.pdf")
    gone = ["zeppelin", "hangar"]
    assert_equal_to_recount(core, ws, gone)
    sentences, counts = stored(core, ws, ["blade", "canteen", "generator"])
    assert sentences > 0 and counts["blade"] == 3 and counts["canteen"] == 2

    ws.knowledge.delete(ids["fleet.md"])
    assert_equal_to_recount(core, ws, [*gone, "blade", "turbine"])
    assert stored(core, ws, ["blade"])[1].get("blade", 0) == 0

    ws.knowledge.delete(pdf.id)
    ws.knowledge.ingest_text("again.md", TEXTS["fleet.md"])  # the same text again
    assert_equal_to_recount(core, ws, gone)

    for document_id in (ids["canteen.txt"], ids["empty-ish.txt"]):
        ws.knowledge.delete(document_id)
    assert_equal_to_recount(core, ws, gone)
    # the other workspace still has its own
    assert stored(core, other, ["zeppelin"])[1] == {"zeppelin": 1}


@BOTH_STORES
def test_background_ingestion_counts_too(core: AgentCore) -> None:
    ws = core.workspace("acme", "test")
    queued = ws.knowledge.ingest_text("c.txt", TEXTS["canteen.txt"], wait=False)
    assert queued.status == "processing"
    assert stored(core, ws, ["canteen"]) == (0, {})  # nothing counts before it is ready
    core.start()
    for _ in range(600):
        if ws.knowledge.get(queued.id).status != "processing":
            break
        time.sleep(0.05)
    assert ws.knowledge.get(queued.id).status == "ready"
    assert stored(core, ws, ["canteen"]) == (3, {"canteen": 2})
    assert_equal_to_recount(core, ws, [])


def test_a_document_that_is_no_longer_processing_stores_no_counts(tmp_path: Path) -> None:
    core = core_with(tmp_path)
    try:
        ws = core.workspace("acme", "test")
        document = ws.knowledge.ingest_text("b.txt", "Blades are heavy.")  # ready already
        before = stored(core, ws, ["blade", "x"])
        vectors = np.ones((1, core.embedders["hashing-v1"].dimension), dtype=np.float32)
        written = core.store.complete_document(
            ws.organization_id,
            ws.environment,
            document,
            [("x x x.", [1], [0])],
            "hashing-v1",
            vectors,
            np.ones(1, dtype=bool),
            term_counts=(5, {"x": 4}),
        )
        assert written is None
        assert stored(core, ws, ["blade", "x"]) == before == (1, {"blade": 1})
    finally:
        core.close()


def test_counts_survive_reopening_the_file(tmp_path: Path) -> None:
    core = core_with(tmp_path)
    ws = core.workspace("acme", "test")
    ws.knowledge.ingest_text("fleet.md", TEXTS["fleet.md"])
    expected = stored(core, ws, ["blade", "rotterdam"])
    core.close()
    again = core_with(tmp_path)  # the same SQLite file
    try:
        ws = again.workspace("acme", "test")
        assert stored(again, ws, ["blade", "rotterdam"]) == expected
        assert expected[1] == {"blade": 3, "rotterdam": 1}
        assert_equal_to_recount(again, ws, [])
    finally:
        again.close()


def test_term_stats_for_a_question(tmp_path: Path) -> None:
    core = core_with(tmp_path)
    try:
        ws = core.workspace("acme", "test")
        assert ws.knowledge.term_stats("Where are the blades?") == TermStats(0)  # empty workspace
        ws.knowledge.ingest_text("fleet.md", TEXTS["fleet.md"])
        stats = ws.knowledge.term_stats("Where are the turbine blades stored?")
        assert stats.sentences == 4  # heading, and three sentences
        assert dict(stats.counts) == {"turbine": 1, "blade": 3, "stor": 1}
        # no content words: nothing to look up
        assert ws.knowledge.term_stats("Where is it?") == TermStats(0)
        assert ws.knowledge.term_stats("") == TermStats(0)
        # a run far past max_token_chars is cut as embedders cut it, not refused
        assert ws.knowledge.term_stats("x" * 100_000 + " blades").counts == {"blade": 3}
    finally:
        core.close()


def test_chat_hands_the_workspace_counts_to_the_model(tmp_path: Path) -> None:
    recorder = Recorder("recorder", lambda request: ChatResult(text="ok"))
    core = core_with(tmp_path, recorder)
    try:
        ws = core.workspace("acme", "test")
        ws.knowledge.ingest_text("fleet.md", TEXTS["fleet.md"])
        ws.knowledge.ingest_text("canteen.txt", TEXTS["canteen.txt"])
        agent = ws.agents.create(name="Ops", role="support", model="recorder")
        ws.chat.send(agent.id, "How much does a turbine blade weigh?")
        [request] = recorder.requests
        assert isinstance(request, ChatRequest)
        assert request.term_stats == TermStats(7, {"turbine": 1, "blade": 3, "weigh": 1})
    finally:
        core.close()


def test_a_reopened_core_chats_with_the_sums_the_store_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restart's first chat reads the workspace's sums from the store instead of
    summing every document's row, and hands the model the same counts."""
    question = "How much does a turbine blade weigh?"
    recorder = Recorder("recorder", lambda request: ChatResult(text="ok"))
    with core_with(tmp_path, recorder) as core:
        ws = core.workspace("acme", "test")
        ws.knowledge.ingest_text("fleet.md", TEXTS["fleet.md"])
        ws.knowledge.ingest_text("canteen.txt", TEXTS["canteen.txt"])
        agent = ws.agents.create(name="Ops", role="support", model="recorder")
        ws.chat.send(agent.id, question)
    summed = summed_rows(monkeypatch)
    again = Recorder("recorder", lambda request: ChatResult(text="ok"))
    with core_with(tmp_path, again) as core:
        core.workspace("acme", "test").chat.send(agent.id, question)
    assert summed == []  # no document's row summed
    [first, *_], [after] = recorder.requests, again.requests
    assert isinstance(first, ChatRequest) and isinstance(after, ChatRequest)
    assert (
        after.term_stats == first.term_stats == TermStats(7, {"turbine": 1, "blade": 3, "weigh": 1})
    )


def test_count_terms_counts_each_stem_once_per_sentence() -> None:
    counts = count_terms(
        ["Blades, blades and more blades. The canteen opens.", "", "!!!", "Blades again."],
        tokens_of,
    )
    # "!!!" is a sentence without stems: it still counts as a sentence
    assert counts.sentences == 4
    assert counts.stems == Counter({"blade": 2, "canteen": 1, "open": 1})
    assert count_terms([], tokens_of).sentences == 0
    counter = TermCounter(tokens_of)
    assert counter.stems("Blades? BLADES! turbine blades") == ["blade", "turbine"]
    assert counter.count(["Ärzte öffnen die Praxis. Ärzte schließen sie."]).stems["ärzte"] == 2


def test_tokens_of_is_tokens_of_each_text() -> None:
    # the one-pass batch form must never drift from the per-text form chat reads with
    from agentcore.plugins.hashing_embedder import HashingEmbedder

    embedder = HashingEmbedder(dimension=8)
    texts = [
        "The turbine blades are stored in Rotterdam.",
        "",
        "   ",
        "Ärzte öffnen die Praxis; Πού φυλάσσονται τα πτερύγια;",
        "涡轮叶片存放在鹿特丹。",
        "x" * 500 + " running runs ran",
        "The the THE and of.",
    ]
    assert embedder.tokens_of(texts) == [embedder.tokens(text) for text in texts]
    assert embedder.tokens_of([]) == []
