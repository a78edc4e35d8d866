"""A document write checks the workspace's embedder in its own transaction.

After a workspace's first write, ``WorkspaceIndexes.write`` no longer reads the workspace's
state before each document write: ``insert_document`` and ``complete_document`` refuse
(``StaleEmbedder``, nothing stored) when the workspace is indexed by another embedder
or dimension than the vectors they are given, and the cache then follows the
workspace (re-embeds it back, or a 409 when only the dimension changed) and writes
again. Both stores.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_knowledge_embedder import BagOfWords, EmbedderPlugin

from agentcore import AgentCore
from agentcore._ids import new_id, utcnow
from agentcore.schema import Document
from agentcore.storage.records import StaleEmbedder

pytestmark = pytest.mark.both_stores

TEXT = "Kestrel drills start at dawn on Fridays near the old granary."


def _document(status: str = "ready") -> Document:
    return Document(
        id=new_id("doc"),
        source="s.txt",
        content_type="text/plain",
        pages=1,
        chunks=1,
        bytes=10,
        created_at=utcnow(),
        status=status,
    )


def _insert(core: AgentCore, org: str, embedder: str, dimension: int) -> list[int]:
    vectors = np.ones((1, dimension), dtype=np.float32) / np.sqrt(dimension)
    return core.store.insert_document(
        org, "test", _document(), [(TEXT, [1], [0])], embedder, vectors, np.ones(1, dtype=bool)
    ).chunk_ids


def _rows(core: AgentCore, org: str) -> tuple[int, int]:
    documents, _ = core.store.list_documents(org, "test", limit=100, starting_after=None)
    return len(documents), core.store.count_vectors(org, "test")


def test_insert_document_refuses_another_embedder_and_stores_nothing(core: AgentCore) -> None:
    org = core.create_organization("acme").id
    ids = _insert(core, org, "bow", 8)  # the first write fixes the embedder
    assert len(ids) == 1
    before = _rows(core, org), core.store.knowledge_state(org, "test")
    for embedder, dimension in (("other", 8), ("bow", 16), ("other", 16)):
        with pytest.raises(StaleEmbedder):
            _insert(core, org, embedder, dimension)
    assert (_rows(core, org), core.store.knowledge_state(org, "test")) == before
    assert len(_insert(core, org, "bow", 8)) == 1  # the matching one still writes
    assert _rows(core, org) == (2, 2)


def test_a_write_inside_another_transaction_is_refused_the_same_way(core: AgentCore) -> None:
    # the store's methods compose: inside an outer transaction the refusal is the same
    org = core.create_organization("acme").id
    _insert(core, org, "bow", 8)
    before = _rows(core, org)
    with pytest.raises(StaleEmbedder), core.store.db.write():  # type: ignore[attr-defined]
        _insert(core, org, "other", 8)
    assert _rows(core, org) == before


def test_a_document_without_indexed_chunks_is_refused_too(core: AgentCore) -> None:
    # no segment row is written here: the version bump's answer is checked all the same
    org = core.create_organization("acme").id
    _insert(core, org, "bow", 8)
    before = _rows(core, org)
    vectors = np.zeros((1, 16), dtype=np.float32)
    with pytest.raises(StaleEmbedder):
        core.store.insert_document(
            org, "test", _document(), [(TEXT, [1], [0])], "bow", vectors, np.zeros(1, bool)
        )
    assert _rows(core, org) == before


def test_add_vectors_refuses_another_embedder(core: AgentCore) -> None:
    org = core.create_organization("acme").id
    ids = _insert(core, org, "bow", 8)
    state = core.store.knowledge_state(org, "test")
    for embedder, dimension in (("other", 8), ("bow", 16)):
        wrong = np.ones((1, dimension), dtype=np.float32) / 4
        with pytest.raises(StaleEmbedder):
            core.store.add_vectors(org, "test", None, embedder, dimension, np.array(ids), wrong)
    assert core.store.knowledge_state(org, "test") == state  # the bump rolled back
    assert core.store.count_vectors(org, "test") == 1


def test_complete_document_refuses_another_embedder(core: AgentCore) -> None:
    org = core.create_organization("acme").id
    _insert(core, org, "bow", 8)
    document = _document("processing")
    core.store.insert_processing_document(
        org,
        "test",
        document,
        kind="text",
        filename="s.txt",
        content_type=None,
        data=TEXT.encode(),
        now=0.0,
    )
    ready = document.model_copy(update={"status": "ready"})
    chunks = [(TEXT, [1], [0])]
    keep = np.ones(1, dtype=bool)
    wrong = np.ones((1, 16), dtype=np.float32) / 4
    with pytest.raises(StaleEmbedder):
        core.store.complete_document(org, "test", ready, chunks, "bow", wrong, keep)
    stored = core.store.get_document(org, "test", document.id)
    assert stored is not None and stored.status == "processing"  # rolled back
    right = np.ones((1, 8), dtype=np.float32) / np.sqrt(8)
    assert core.store.complete_document(org, "test", ready, chunks, "bow", right, keep)
    stored = core.store.get_document(org, "test", document.id)
    assert stored is not None and stored.status == "ready"


def test_later_writes_read_no_state_first(core: AgentCore, monkeypatch: Any) -> None:
    ws = core.workspace("acme", "test")
    ws.knowledge.ingest_text("a.txt", TEXT)  # the first write checks and claims
    calls: list[tuple[str, str]] = []
    real = core.store.knowledge_state

    def counted(organization_id: str, environment: str) -> Any:
        calls.append((organization_id, environment))
        return real(organization_id, environment)

    monkeypatch.setattr(core.store, "knowledge_state", counted)
    added = ws.knowledge.ingest_text("b.txt", "Owl census volunteers meet at the barn.")
    assert calls == []
    assert ws.knowledge.search("owl census").results[0].document_id == added.id


def test_a_write_after_another_process_reembedded_follows_it(
    pair: tuple[AgentCore, AgentCore], store_url: str
) -> None:
    first, _ = pair
    ws = first.workspace("acme", "test")
    ws.knowledge.ingest_text("a.txt", TEXT)
    bow = BagOfWords("bow-512", 512)
    with AgentCore.open(store_url, embedder="bow-512", plugins=[EmbedderPlugin(bow)]) as other:
        assert other.workspace("acme", "test", create=False).knowledge.search("kestrel").results
    org = ws.organization_id
    assert first.store.knowledge_state(org, "test").embedder == "bow-512"
    # no search in between: the write itself finds the workspace re-embedded
    added = ws.knowledge.ingest_text("b.txt", "Owl census volunteers meet at the barn.")
    state = first.store.knowledge_state(org, "test")
    assert (state.embedder, state.dimension) == ("hashing-v1", 1024)
    ids, vectors = first.store.load_vectors(org, "test", 1024)  # every vector 1024-wide
    assert len(ids) == 2 and vectors.shape == (2, 1024)
    assert ws.knowledge.search("owl census").results[0].document_id == added.id
    assert ws.knowledge.search("kestrel drills").results[0].source == "a.txt"
