"""A document's write is idempotent by the document's id (``insert_document``).

When the connection breaks after a write's ``COMMIT`` was sent, nobody knows whether it
landed. The PostgreSQL store then sends the write again: the second write finds the
document's id taken by the very same document and answers what the first stored, so
the document is neither lost nor stored twice, and the caller gets no 503. Writing
the same document again answers the same way on both stores; another document with a
taken id is still refused.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from helpers import make_document

from agentcore import AgentCore
from agentcore.schema import Document

CHUNKS = [("one", [1], [0]), ("two", [1], [0])]
VECTORS = np.ones((2, 4), dtype=np.float32) / 2


def _write(core: AgentCore, org: str, document: Document) -> list[int]:
    return core.store.insert_document(
        org, "test", document, CHUNKS, "e", VECTORS, np.ones(2, bool), term_counts=(2, {"o": 1})
    ).chunk_ids


def _stored(core: AgentCore, org: str) -> tuple[int, int, int]:
    documents, _ = core.store.list_documents(org, "test", limit=100, starting_after=None)
    with core.store.db.read() as conn:  # type: ignore[attr-defined]
        terms = conn.execute("SELECT count(*) AS n FROM document_terms").fetchone()["n"]
    return len(documents), core.store.count_vectors(org, "test"), int(terms)


@pytest.mark.both_stores
def test_writing_the_same_document_again_answers_what_the_first_stored(core: AgentCore) -> None:
    org = core.create_organization("acme").id
    document = make_document(chunks=2)
    first = _write(core, org, document)
    version = core.store.knowledge_state(org, "test").version
    assert _write(core, org, document) == first
    assert _stored(core, org) == (1, 2, 1)
    assert core.store.knowledge_state(org, "test").version == version  # nothing bumped


@pytest.mark.both_stores
def test_another_document_with_a_taken_id_is_refused(core: AgentCore) -> None:
    org = core.create_organization("acme").id
    document = make_document(chunks=2)
    _write(core, org, document)
    for changed in ({"source": "b.txt"}, {"bytes": 101}):
        other = document.model_copy(update=changed)
        with pytest.raises(core.store.db.integrity_error):  # type: ignore[attr-defined]
            _write(core, org, other)
    elsewhere = core.create_organization("globex").id  # the same id in another workspace
    with pytest.raises(core.store.db.integrity_error):  # type: ignore[attr-defined]
        _write(core, elsewhere, document)
    assert _stored(core, org) == (1, 2, 1)


@pytest.fixture
def postgres_core(postgres_url: str) -> Iterator[AgentCore]:
    """A core on an empty PostgreSQL database, no workers."""
    with AgentCore.open(postgres_url, start_workers=False) as core:
        yield core


@pytest.fixture
def commits_break(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Set ``left`` to N: the next N commits land, then their connection breaks before
    the client reads the answer (as when the network fails just then), so the client
    cannot tell that they landed. Pipelined blocks break once the whole block is sent
    and answered, others right after their ``COMMIT``."""
    psycopg = pytest.importorskip("psycopg")
    pipeline, execute = psycopg.Connection.pipeline, psycopg.Connection.execute
    state = {"left": 0}

    def lose(conn: Any) -> None:
        state["left"] -= 1
        conn.close()
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    @contextlib.contextmanager
    def breaking_pipeline(self: Any) -> Iterator[Any]:
        with pipeline(self) as block:
            yield block
        if state["left"]:
            lose(self)

    def breaking_execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        cursor = execute(self, query, *args, **kwargs)
        if query == "COMMIT" and self._pipeline is None and state["left"]:
            lose(self)
        return cursor

    monkeypatch.setattr(psycopg.Connection, "pipeline", breaking_pipeline)
    monkeypatch.setattr(psycopg.Connection, "execute", breaking_execute)
    return state


@pytest.mark.parametrize("chunk_left_out", [False, True])
def test_a_write_whose_commit_outcome_was_lost_is_sent_again_and_stored_once(
    postgres_core: AgentCore, commits_break: dict[str, int], chunk_left_out: bool
) -> None:
    # with a chunk left out of the index too (its segment's ids then a list of ordinals)
    core = postgres_core
    org = core.create_organization("acme").id
    document = make_document(chunks=2)
    keep = np.array([True, not chunk_left_out])
    commits_break["left"] = 1
    ids = core.store.insert_document(
        org, "test", document, CHUNKS, "e", VECTORS, keep, term_counts=(2, {"o": 1})
    ).chunk_ids  # no 503: sent again, it found its own document
    assert commits_break["left"] == 0  # the break did happen
    assert _stored(core, org) == (1, 1 if chunk_left_out else 2, 1)
    with core.store.db.read() as conn:  # type: ignore[attr-defined]
        rows = conn.execute("SELECT id FROM chunks ORDER BY ordinal").fetchall()
    assert ids == [row["id"] for row in rows]


def test_a_lost_commit_outcome_of_another_write_is_a_503(
    postgres_core: AgentCore, commits_break: dict[str, int]
) -> None:
    from agentcore.errors import ServiceUnavailable

    commits_break["left"] = 1
    with pytest.raises(ServiceUnavailable, match="during a commit"):
        postgres_core.create_organization("acme")
    assert commits_break["left"] == 0
    # it landed: only a write that can recognise its own earlier self is sent again
    assert postgres_core.store.get_organization_by_name("acme") is not None
