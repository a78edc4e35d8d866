"""Embedder plugins and the knowledge index: switching re-embeds, mismatches refuse.

A second core opened on the same SQLite file with another configured embedder
re-embeds the workspace from the stored chunk texts; an embedder whose dimension
changed under the same name, or an unknown one, is a clear error and stores nothing.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from helpers import FastApi, assert_problem
from pdfs import filler, make_pdf

import agentcore
from agentcore import AgentCore
from agentcore.errors import AgentCoreError
from agentcore.knowledge.text import STOP_WORDS
from agentcore_starlette import create_app

_WORD = re.compile(r"[a-z0-9]+")


class BagOfWords:
    """A tiny deterministic embedder: word counts hashed into ``dimension`` buckets, unnormalised."""

    def __init__(self, name: str = "bow", dimension: int = 64) -> None:
        self.name = name
        self.dimension = dimension
        self.calls = 0

    def embed(self, texts: Sequence[str], kind: str = "passage") -> npt.NDArray[np.float32]:
        self.calls += 1
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                if word not in STOP_WORDS:
                    digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
                    out[row, int.from_bytes(digest, "little") % self.dimension] += 1.0
        return out


class EmbedderPlugin:
    """Registers the given embedders through the plugin hook."""

    def __init__(self, *embedders: Any) -> None:
        self.embedders = embedders

    @agentcore.hookimpl
    def agentcore_register_embedders(self, register: Any, settings: Any) -> None:
        for embedder in self.embedders:
            register(embedder)


def cosine(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


FACT = "The Zephyrine observatory records four hundred twelve meteor showers every decade."
QUERY = "How many meteor showers does the Zephyrine observatory record?"
PAGES = [filler(14, 1), filler(14, 2), f"{filler(6, 3)} {FACT} {filler(6, 4)}", filler(14, 5)]


def counts(db_path: Path) -> tuple[int, int, int]:
    conn = sqlite3.connect(db_path)
    try:
        return tuple(  # type: ignore[return-value]
            conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]  # noqa: S608
            for table in ("documents", "chunks", "vector_segments")
        )
    finally:
        conn.close()


def stored_dimensions(db_path: Path) -> set[tuple[str, int]]:
    conn = sqlite3.connect(db_path)
    try:
        return set(conn.execute("SELECT embedder, dimension FROM vector_segments").fetchall())
    finally:
        conn.close()


def test_changing_the_embedder_reembeds(core: AgentCore, db_path: Path) -> None:
    ws = core.workspace("acme", "test")
    doc = ws.knowledge.ingest_file(make_pdf(PAGES), filename="handbook.pdf")
    notes = ws.knowledge.ingest_text("notes.txt", "Kestrel drills start at dawn on Fridays.")
    before = core.store.knowledge_state(ws.organization_id, "test")
    assert (before.embedder, before.dimension) == ("hashing-v1", 1024)
    assert ws.knowledge.search(QUERY).results[0].pages == [3]

    bow = BagOfWords("bow-512", 512)
    with AgentCore.open(db_path, embedder="bow-512", plugins=[EmbedderPlugin(bow)]) as other:
        ows = other.workspace("acme", "test", create=False)
        results = ows.knowledge.search(QUERY).results
        top = results[0]
        assert FACT in top.chunk and top.pages == [3] and top.document_id == doc.id
        assert top.source == "handbook.pdf"
        # the scores are the new embedder's cosines: the vectors really were rebuilt
        for result in results:
            expected = cosine(*bow.embed([QUERY, result.chunk]))
            assert result.score == pytest.approx(expected, abs=1e-5)
        state = other.store.knowledge_state(ows.organization_id, "test")
        assert (state.embedder, state.dimension) == ("bow-512", 512)
        assert state.version > before.version
        assert stored_dimensions(db_path) == {("bow-512", 512)}
        assert other.store.count_vectors(ows.organization_id, "test") == doc.chunks + notes.chunks
        # later writes use the new embedder too, and the index stays coherent
        calls = bow.calls
        added = ows.knowledge.ingest_text("owl.txt", "Owl census volunteers meet at the barn.")
        assert bow.calls > calls
        assert ows.knowledge.search("owl census").results[0].document_id == added.id
        ows.knowledge.delete(notes.id)
        assert all(
            r.document_id != notes.id for r in ows.knowledge.search("kestrel drills").results
        )

        # over HTTP as well
        other.create_organization("acme")
        key = other.keys.create("acme", "test", ["read"]).secret
        api = FastApi(create_app(other), None, key)
        response = api.post("/v1/knowledge/search", json={"query": QUERY})
        assert response.status_code == 200, response.text
        assert response.json()["results"][0]["pages"] == [3]

    # the first core, still configured with hashing-v1, notices and re-embeds back
    again = ws.knowledge.search(QUERY).results
    assert again[0].document_id == doc.id and again[0].pages == [3]
    assert ws.knowledge.search("owl census").results[0].document_id == added.id
    state = core.store.knowledge_state(ws.organization_id, "test")
    assert (state.embedder, state.dimension) == ("hashing-v1", 1024)
    assert stored_dimensions(db_path) == {("hashing-v1", 1024)}


def test_other_workspaces_keep_their_embedder(core: AgentCore, db_path: Path) -> None:
    acme = core.workspace("acme", "test")
    globex = core.workspace("globex", "test")
    acme.knowledge.ingest_text("a.txt", FACT)
    globex.knowledge.ingest_text("g.txt", FACT)
    with AgentCore.open(db_path, embedder="bow", plugins=[EmbedderPlugin(BagOfWords())]) as other:
        assert other.workspace("acme", "test").knowledge.search(QUERY).results
    assert core.store.knowledge_state(acme.organization_id, "test").embedder == "bow"
    assert core.store.knowledge_state(globex.organization_id, "test").embedder == "hashing-v1"


def test_dimension_change_under_the_same_name_is_409(tmp_path: Path) -> None:
    db = tmp_path / "dim.db"
    with AgentCore.open(
        db, embedder="bow", plugins=[EmbedderPlugin(BagOfWords("bow", 64))]
    ) as first:
        first.workspace("acme", "test").knowledge.ingest_text("a.txt", FACT)
    before = counts(db)
    with AgentCore.open(
        db, embedder="bow", plugins=[EmbedderPlugin(BagOfWords("bow", 32))], rate_limit_test=1e6
    ) as second:
        ws = second.workspace("acme", "test", create=False)
        for attempt in (
            lambda: ws.knowledge.search(QUERY),
            lambda: ws.knowledge.ingest_text("b.txt", "More text about meteors."),
            lambda: ws.knowledge.ingest_file(make_pdf(["Meteors again."]), filename="c.pdf"),
        ):
            with pytest.raises(AgentCoreError) as info:
                attempt()
            assert (info.value.status, info.value.code) == (409, "embedder_dimension_mismatch")
        key = second.keys.create("acme", "test", ["read", "write"]).secret
        api = FastApi(create_app(second), None, key)
        body = assert_problem(
            api.post("/v1/knowledge/search", json={"query": QUERY}),
            409,
            "embedder_dimension_mismatch",
        )
        assert "32" in body["detail"] and "64" in body["detail"]
        assert_problem(
            api.post("/v1/knowledge/documents", json={"source": "d.txt", "text": "Meteors."}),
            409,
            "embedder_dimension_mismatch",
        )
        state = second.store.knowledge_state(ws.organization_id, "test")
        assert (state.embedder, state.dimension) == ("bow", 64)
    assert counts(db) == before


def test_unknown_embedder_is_400_and_stores_nothing(core: AgentCore, db_path: Path) -> None:
    ws = core.workspace("acme", "test")
    doc = ws.knowledge.ingest_text("a.txt", FACT)
    before = counts(db_path)
    with AgentCore.open(db_path, embedder="no-such-embedder", rate_limit_test=1e6) as other:
        key = other.keys.create("acme", "test", ["read", "write"]).secret
        api = FastApi(create_app(other), None, key)
        body = assert_problem(
            api.post("/v1/knowledge/search", json={"query": QUERY}), 400, "embedder_unavailable"
        )
        assert "no-such-embedder" in body["detail"] and "hashing-v1" in body["detail"]
        assert_problem(
            api.post("/v1/knowledge/documents", json={"source": "b.txt", "text": "Meteors."}),
            400,
            "embedder_unavailable",
        )
        pdf = make_pdf(["Meteors over the bay."])
        response = api.post(
            "/v1/knowledge/documents", files={"file": ("m.pdf", pdf, "application/pdf")}
        )
        assert_problem(response, 400, "embedder_unavailable")
        # documents that need no embedding still work
        assert api.get(f"/v1/knowledge/documents/{doc.id}").status_code == 200
        assert [d["id"] for d in api.get("/v1/knowledge/documents").json()["documents"]] == [doc.id]
        # a workspace with nothing indexed yet is refused the same way
        other.create_organization("fresh")
        with pytest.raises(AgentCoreError) as info:
            other.workspace("fresh", "test").knowledge.search(QUERY)
        assert (info.value.status, info.value.code) == (400, "embedder_unavailable")
    assert counts(db_path) == before
    assert core.store.knowledge_state(ws.organization_id, "test").embedder == "hashing-v1"


STOP_ONLY = " ".join(["It is what it is, and so it was; then we were there."] * 20)


def test_zero_vector_chunks_do_not_break_ingestion(core: AgentCore, db_path: Path) -> None:
    ws = core.workspace("acme", "test")
    empty = ws.knowledge.ingest_text("stop.txt", "The and of... to, in; is it? !!! -- ...")
    assert empty.chunks == 1
    assert core.store.count_vectors(ws.organization_id, "test") == 0
    assert ws.knowledge.search("anything at all").results == []

    mixed = ws.knowledge.ingest_file(make_pdf([STOP_ONLY, FACT]), filename="mixed.pdf")
    assert mixed.pages == 2 and mixed.chunks >= 2
    vectors = core.store.count_vectors(ws.organization_id, "test")
    assert 1 <= vectors < mixed.chunks  # the stop-word chunks stay out of the index
    results = ws.knowledge.search(QUERY, top_k=100).results
    assert results[0].document_id == mixed.id and 2 in results[0].pages
    assert len(results) == vectors
    assert ws.knowledge.search("the of and it is").results == []  # a zero query: no match

    # re-embedding keeps them out, deleting them works, and the index stays coherent
    with AgentCore.open(db_path, embedder="bow", plugins=[EmbedderPlugin(BagOfWords())]) as other:
        ows = other.workspace("acme", "test", create=False)
        assert ows.knowledge.search(QUERY).results[0].document_id == mixed.id
        assert other.store.count_vectors(ws.organization_id, "test") == vectors
    ws.knowledge.delete(empty.id)
    assert ws.knowledge.search(QUERY).results[0].document_id == mixed.id
    ws.knowledge.delete(mixed.id)
    assert ws.knowledge.search(QUERY).results == []
    assert counts(db_path) == (0, 0, 0)
