"""Document metadata and filtered search through the Python API, on both stores.

Metadata is stored with a document and returned with it and its search results; a
PATCH replaces it and every process's next search sees it; bad metadata stores
nothing; filters select by it before the top k is taken, in every mode, in memory and
with pgvector; and nothing of it crosses workspaces.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from ingest_plugins import MisbehavingEmbedder

from agentcore import AgentCore
from agentcore._cancellation import Cancellation
from agentcore.errors import NotFound, PermissionDenied, ValidationFailed
from agentcore.workspace import Workspace

pytestmark = pytest.mark.both_stores

HR = [
    (
        "leave.txt",
        "Employees get twenty five vacation days per year.",
        {"team": "hr", "year": 2024},
    ),
    ("parental.txt", "Parental leave lasts sixteen weeks.", {"team": "hr", "year": 2022}),
]
IT = [
    ("laptops.txt", "Laptops are replaced every three years.", {"team": "it", "year": 2024}),
    ("portal.txt", "Reset a password on the XK-4471-Q portal.", {"team": "it", "public": True}),
]


def fill(ws: Workspace) -> dict[str, str]:
    """The teams' documents; their ids by source."""
    return {
        source: ws.knowledge.ingest_text(source, text, metadata=meta).id
        for source, text, meta in HR + IT
    }


def sources(results: Any) -> set[str]:
    return {r.source for r in results}


@pytest.fixture
def ws(core: AgentCore) -> Workspace:
    return core.workspace("acme")


def test_metadata_is_stored_returned_and_searchable(ws: Workspace) -> None:
    ids = fill(ws)
    leave = ws.knowledge.get(ids["leave.txt"])
    assert leave.metadata == {"team": "hr", "year": 2024}
    listed = {d.source: d.metadata for d in ws.knowledge.list(limit=10).documents}
    assert listed["portal.txt"] == {"team": "it", "public": True}
    result = ws.knowledge.search("vacation days", top_k=1).results[0]
    assert (result.source, result.metadata) == ("leave.txt", {"team": "hr", "year": 2024})
    untagged = ws.knowledge.ingest_text("plain.txt", "No attributes here.")
    assert untagged.metadata == {} and ws.knowledge.get(untagged.id).metadata == {}


@pytest.mark.parametrize("mode", ["vector", "keyword", "hybrid"])
def test_filters_select_documents_in_every_mode(ws: Workspace, mode: str) -> None:
    fill(ws)
    it = {"type": "eq", "key": "team", "value": "it"}
    found = ws.knowledge.search("vacation password laptops leave", mode=mode, filter=it, top_k=10)
    assert sources(found.results) == {"laptops.txt", "portal.txt"}
    recent = {
        "type": "and",
        "filters": [
            {"type": "gte", "key": "year", "value": 2024},
            {"type": "ne", "key": "team", "value": "it"},
        ],
    }
    found = ws.knowledge.search(
        "vacation password laptops leave", mode=mode, filter=recent, top_k=10
    )
    assert sources(found.results) == {"leave.txt"}
    none = {"type": "in", "key": "team", "value": ["legal"]}
    assert ws.knowledge.search("vacation", mode=mode, filter=none).results == []


def test_a_selective_filter_fills_top_k(ws: Workspace) -> None:
    fill(ws)
    for n in range(12):  # many documents that match the query better
        ws.knowledge.ingest_text(f"noise{n}.txt", f"Vacation days vacation days vacation {n}.")
    hr = {"type": "eq", "key": "team", "value": "hr"}
    found = ws.knowledge.search("vacation days", top_k=2, filter=hr).results
    assert sources(found) == {"leave.txt", "parental.txt"}


def test_an_update_replaces_metadata_and_search_sees_it_in_another_process(
    pair: tuple[AgentCore, AgentCore],
) -> None:
    a, b = pair
    wa, wb = a.workspace("acme"), b.workspace("acme")
    ids = fill(wa)
    it = {"type": "eq", "key": "team", "value": "it"}
    assert sources(wb.knowledge.search("vacation", filter=it, top_k=10).results) == {
        "laptops.txt",
        "portal.txt",
    }
    updated = wa.knowledge.update(ids["leave.txt"], metadata={"team": "it"})
    assert updated.metadata == {"team": "it"} and updated.status == "ready"
    # b's tables were current before the update: its very next search sees it
    assert "leave.txt" in sources(wb.knowledge.search("vacation", filter=it, top_k=10).results)
    year = {"type": "eq", "key": "year", "value": 2024}
    assert "leave.txt" not in sources(
        wb.knowledge.search("vacation", filter=year, top_k=10).results
    )
    result = wb.knowledge.search("vacation days", top_k=1).results[0]
    assert result.metadata == {"team": "it"}
    cleared = wa.knowledge.update(ids["leave.txt"], metadata={})
    assert cleared.metadata == {} and wb.knowledge.get(ids["leave.txt"]).metadata == {}


def test_bad_metadata_stores_nothing(ws: Workspace) -> None:
    with pytest.raises(ValidationFailed) as refused:
        ws.knowledge.ingest_text("a.txt", "Some text.", metadata={"owner": {"name": "ana"}})
    assert refused.value.param == "metadata.owner"
    with pytest.raises(ValidationFailed):
        ws.knowledge.ingest_file(
            b"Some text.", filename="a.txt", metadata={"k" * 65: 1}, wait=False
        )
    assert ws.knowledge.list().documents == []
    document = ws.knowledge.ingest_text("a.txt", "Some text.", metadata={"team": "hr"})
    with pytest.raises(ValidationFailed) as refused:
        ws.knowledge.update(document.id, metadata={f"k{i}": i for i in range(17)})
    assert refused.value.param == "metadata"
    assert ws.knowledge.get(document.id).metadata == {"team": "hr"}


def test_metadata_and_filters_stay_in_their_workspace(core: AgentCore) -> None:
    acme, other, live = (
        core.workspace("acme"),
        core.workspace("other"),
        core.workspace("acme", "live"),
    )
    ids = fill(acme)
    other.knowledge.ingest_text("theirs.txt", "Vacation days are plenty.", metadata={"team": "hr"})
    hr = {"type": "eq", "key": "team", "value": "hr"}
    assert sources(other.knowledge.search("vacation", filter=hr, top_k=10).results) == {
        "theirs.txt"
    }
    assert live.knowledge.search("vacation", filter=hr, top_k=10).results == []
    for stranger in (other, live):
        with pytest.raises(NotFound):
            stranger.knowledge.update(ids["leave.txt"], metadata={"team": "x"})
    assert acme.knowledge.get(ids["leave.txt"]).metadata["team"] == "hr"


def test_updating_metadata_needs_write_scope(core: AgentCore) -> None:
    ids = fill(core.workspace("acme"))
    reader = core.workspace("acme", scopes=["read"])
    with pytest.raises(PermissionDenied):
        reader.knowledge.update(ids["leave.txt"], metadata={})
    with pytest.raises(NotFound):
        core.workspace("acme").knowledge.update("doc_missing", metadata={})


@pytest.fixture
def pgvector_core(store_kind: str, store_url: str) -> Iterator[AgentCore]:
    if store_kind != "postgres":
        pytest.skip("pgvector is PostgreSQL's")
    with AgentCore.open(store_url, vector_search="pgvector") as core:
        yield core


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_filters_with_pgvector(pgvector_core: AgentCore, mode: str) -> None:
    ws = pgvector_core.workspace("acme")
    fill(ws)
    hr = {"type": "eq", "key": "team", "value": "hr"}
    found = ws.knowledge.search("password laptops vacation", mode=mode, filter=hr, top_k=10)
    assert sources(found.results) == {"leave.txt", "parental.txt"}
    keyword = ws.knowledge.search("XK-4471-Q", mode="keyword").results
    assert [r.source for r in keyword] == ["portal.txt"] and -1 <= keyword[0].score <= 1
    nothing = {"type": "eq", "key": "team", "value": "legal"}
    assert ws.knowledge.search("vacation", mode=mode, filter=nothing).results == []
    # the filter is in the SQL, before its LIMIT: rows that rank higher do not crowd it out
    for n in range(40):
        ws.knowledge.ingest_text(f"noise{n}.txt", f"Vacation days vacation days vacation {n}.")
    found = ws.knowledge.search("vacation days", mode=mode, top_k=2, filter=hr)
    assert sources(found.results) == {"leave.txt", "parental.txt"}
    unfiltered = ws.knowledge.search("vacation days", mode=mode, top_k=2)
    assert sources(unfiltered.results) <= {f"noise{n}.txt" for n in range(40)}


def test_pgvector_ties_and_scores_are_the_in_memory_index_s(
    store_kind: str, store_url: str, pgvector_core: AgentCore
) -> None:
    # 40 equal chunks: ties go to the lowest chunk ids, as in memory (PostgreSQL's top-N
    # sort picked any of them); and a text searched for itself scores at most 1 (the
    # float32 re-score reached 1.0000002 unclipped)
    ws = pgvector_core.workspace("acme")
    for n in range(40):
        ws.knowledge.ingest_text(f"d{n}.txt", "Employees get twenty five vacation days a year.")
    with AgentCore.open(store_url) as memory:
        expected = memory.workspace("acme").knowledge.search("vacation days", top_k=3).results
    found = ws.knowledge.search("vacation days", top_k=3).results
    assert [r.document_id for r in found] == [r.document_id for r in expected]
    assert [r.source for r in found] == ["d0.txt", "d1.txt", "d2.txt"]
    words = [
        "leave",
        "policy",
        "laptop",
        "portal",
        "password",
        "vacation",
        "parental",
        "team",
        "office",
        "week",
    ]
    rng = random.Random(7)
    texts = [" ".join(rng.choices(words, k=12 + n % 9)) + f" {n}." for n in range(40)]
    for n, text in enumerate(texts):
        ws.knowledge.ingest_text(f"p{n}.txt", text)
    best = max(ws.knowledge.search(text, top_k=1).results[0].score for text in texts)
    assert -1.0 <= best <= 1.0


def test_numbers_beyond_2_53_are_refused_at_every_entry(ws: Workspace) -> None:
    # float64 holds every integer up to 2**53 exactly; beyond it, 2**53 + 1 would equal
    # 2**53, and a 310-digit integer made every later filtered search a 500 (OverflowError).
    # Floats are bounded alike, so the OpenAPI schema states the bound (minimum, maximum):
    # JSON Schema counts 1e300 as an integer
    for big in (2**53 + 1, -(2**53) - 1, 10**309, 1e300, -1e17):
        with pytest.raises(ValidationFailed) as refused:
            ws.knowledge.ingest_text("a.txt", "Some text.", metadata={"n": big})
        assert refused.value.param == "metadata.n"
        with pytest.raises(ValidationFailed) as refused:
            ws.knowledge.ingest_file(b"Some text.", filename="a.txt", metadata={"n": big})
        assert refused.value.param == "metadata.n"
        for spec, param in [
            ({"type": "eq", "key": "n", "value": big}, "filter.value"),
            ({"type": "lt", "key": "n", "value": big}, "filter.value"),
            ({"type": "in", "key": "n", "value": [1, big]}, "filter.value.1"),
        ]:
            with pytest.raises(ValidationFailed) as refused:
                ws.knowledge.search("text", filter=spec)
            assert refused.value.param == param
    assert ws.knowledge.list().documents == []
    top = ws.knowledge.ingest_text("top.txt", "Some text.", metadata={"n": 2**53})
    with pytest.raises(ValidationFailed) as refused:
        ws.knowledge.update(top.id, metadata={"n": 2**53 + 1})
    assert refused.value.param == "metadata.n"
    bottom = ws.knowledge.ingest_text("bottom.txt", "Some text.", metadata={"n": -(2**53)})
    assert ws.knowledge.get(bottom.id).metadata == {"n": -(2**53)}
    found = ws.knowledge.search("text", filter={"type": "eq", "key": "n", "value": 2**53})
    assert sources(found.results) == {"top.txt"}
    assert (
        ws.knowledge.search("text", filter={"type": "eq", "key": "n", "value": 2**53 - 1}).results
        == []
    )


def test_large_integers_stored_by_older_versions_compare_exactly(core: AgentCore) -> None:
    ws = core.workspace("acme")
    ids = {
        name: ws.knowledge.ingest_text(f"{name}.txt", "Some text.", metadata={"n": 2**53}).id
        for name in ("exact", "above", "huge", "float")
    }
    ws.knowledge.ingest_text("hr.txt", "Some text.", metadata={"team": "hr"})
    # what an older version stored: its metadata was not bounded
    for name, value in [("above", 2**53 + 1), ("huge", 10**309), ("float", 1e300)]:
        core.store.update_metadata(ws.organization_id, ws.environment, ids[name], {"n": value})
    assert ws.knowledge.get(ids["huge"]).metadata == {"n": 10**309}

    def found(spec: dict[str, Any]) -> set[str]:
        results = ws.knowledge.search("text", filter=spec, top_k=10).results
        return {r.source.removesuffix(".txt") for r in results}

    # once a 500 for every filtered search of the workspace
    assert found({"type": "eq", "key": "team", "value": "hr"}) == {"hr"}
    assert found({"type": "eq", "key": "n", "value": 2**53}) == {"exact"}
    assert found({"type": "in", "key": "n", "value": [2**53, 1.0]}) == {"exact"}
    assert found({"type": "ne", "key": "n", "value": 2**53}) == {"above", "huge", "float", "hr"}
    assert found({"type": "gt", "key": "n", "value": 2**53}) == {"above", "huge", "float"}
    assert found({"type": "lte", "key": "n", "value": 2**53}) == {"exact"}


class GatedEmbedder(MisbehavingEmbedder):
    """Embeds a passage holding its trigger only once ``go`` is set, after setting
    ``embedding``: a test acts while a job is being indexed (in-process jobs only)."""

    def __init__(self) -> None:
        super().__init__("gated")
        self.embedding = threading.Event()
        self.go = threading.Event()

    def embed(self, texts: Sequence[str], kind: str = "passage") -> npt.NDArray[np.float32]:
        if kind == "passage" and any(self.trigger in text for text in texts):
            self.embedding.set()
            self.go.wait(60)
        return super().embed(texts, kind)


def test_metadata_patched_while_indexing_is_what_the_ready_document_says(store_url: str) -> None:
    gated = GatedEmbedder()
    with AgentCore.open(store_url, plugins=[gated], embedder=gated.name) as core:
        ws = core.workspace("acme")
        queued = ws.knowledge.ingest_text(
            "a.txt", "Vacation days. TRIGGER.", metadata={"team": "hr"}, wait=False
        )
        job = core.store.claim_ingest_job(now=time.time(), lease_seconds=60)
        assert job is not None
        done: list[Any] = []
        worker = threading.Thread(
            target=lambda: done.append(core.pipeline.run_ingest_job(job, Cancellation()))
        )
        worker.start()
        assert gated.embedding.wait(60)  # the job has read its document
        patched = ws.knowledge.update(queued.id, metadata={"team": "legal"})
        assert (patched.status, patched.metadata) == ("processing", {"team": "legal"})
        gated.go.set()
        worker.join(60)
        [completed] = done
        # the document a waiting caller gets and the document.ready event (outbox and
        # listeners) say what is stored, not what the job read when it started
        assert ws.knowledge.get(queued.id).metadata == {"team": "legal"}
        assert completed.document.metadata == {"team": "legal"}
        assert completed.document.status == "ready"
        assert completed.event.data["metadata"] == {"team": "legal"}
        assert completed.event.data["document_id"] == queued.id
