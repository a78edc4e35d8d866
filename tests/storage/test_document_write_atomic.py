"""A document's write is atomic whichever of its statements fails, on both stores.

On PostgreSQL the write is pipelined: its statements go out in two batches (the version
bump, the document row and its chunks; then the vector segment, the sentence counts and
the ``COMMIT``), so a failure may surface only when the block ends. A trigger that
refuses inserts into one table (a real database error, not a mock) must leave no
document, chunk, segment, sentence counts or version behind, raise the statement's own
error (never a 503 for an unknown commit outcome), and leave the store writable.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from helpers import make_document

from agentcore import AgentCore
from agentcore.errors import ServiceUnavailable

pytestmark = pytest.mark.both_stores

TABLES = ("knowledge_state", "documents", "chunks", "vector_segments", "document_terms")
CHUNKS = [("Kestrel drills start at dawn.", [1], [0]), ("Owls meet at the barn.", [1], [0])]
COUNTS = (2, {"kestrel": 1, "owl": 1})


def _db(core: AgentCore) -> Any:
    """The store's database (both stores are the one SQL store over a ``Database``)."""
    return core.store.db  # type: ignore[attr-defined]


def _refuse(core: AgentCore, kind: str, table: str) -> None:
    """Make every insert into (or update of) ``table`` fail, with a database error."""
    with _db(core).write() as conn:
        if kind == "sqlite":
            for event in ("INSERT", "UPDATE"):
                conn.execute(
                    f"CREATE TRIGGER refuse_{event.lower()} BEFORE {event} ON {table}"
                    " BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
                )
        else:
            conn.execute(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql"
                " AS $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$"
            )
            conn.execute(
                f"CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON {table}"
                " FOR EACH ROW EXECUTE FUNCTION refuse()"
            )


def _allow(core: AgentCore, kind: str, table: str) -> None:
    with _db(core).write() as conn:
        if kind == "sqlite":
            conn.execute("DROP TRIGGER IF EXISTS refuse_insert")
            conn.execute("DROP TRIGGER IF EXISTS refuse_update")
        else:
            conn.execute(f"DROP TRIGGER IF EXISTS refuse ON {table}")
            conn.execute("DROP FUNCTION IF EXISTS refuse()")


@pytest.fixture
def refused(core: AgentCore, store_kind: str) -> Iterator[Any]:
    """``refused(table)`` makes ``table`` refuse writes until the test ends."""
    tables: list[str] = []

    def refuse(table: str) -> None:
        tables.append(table)
        _refuse(core, store_kind, table)

    yield refuse
    for table in tables:  # the PostgreSQL database is shared by the tests that follow
        _allow(core, store_kind, table)


def _rows(core: AgentCore) -> dict[str, Any]:
    with _db(core).read() as conn:
        found: dict[str, Any] = {
            table: conn.execute(f"SELECT COUNT(*) AS n FROM {table}").fetchone()["n"]
            for table in TABLES
        }
        state = conn.execute("SELECT MAX(version) AS v FROM knowledge_state").fetchone()
    found["version"] = state["v"]
    return found


def _insert(core: AgentCore, org: str) -> Any:
    vectors = np.full((2, 4), 0.5, dtype=np.float32)
    return core.store.insert_document(
        org, "test", make_document(chunks=2), CHUNKS, "e", vectors, np.ones(2, bool), COUNTS
    )


@pytest.mark.parametrize("table", TABLES)
def test_a_document_write_failing_at_any_statement_keeps_nothing(
    core: AgentCore, refused: Any, table: str
) -> None:
    org = core.create_organization("acme").id
    _insert(core, org)  # the workspace exists: the bump below is an update
    before = _rows(core)
    refused(table)
    with pytest.raises(Exception, match="refused by the test") as raised:
        _insert(core, org)
    assert not isinstance(raised.value, ServiceUnavailable)  # its own error, not a 503
    assert _rows(core) == before
    documents, _ = core.store.list_documents(org, "test", limit=10, starting_after=None)
    assert len(documents) == 1
    assert core.store.term_counts(org, "test", ["kestrel"]) == (2, {"kestrel": 1})


def test_after_a_failed_document_write_the_store_writes_again(
    core: AgentCore, refused: Any, store_kind: str
) -> None:
    org = core.create_organization("acme").id
    refused("document_terms")
    with pytest.raises(Exception, match="refused by the test"):
        _insert(core, org)
    _allow(core, store_kind, "document_terms")
    written = _insert(core, org)
    assert len(written.chunk_ids) == 2
    state = core.store.knowledge_state(org, "test")
    assert state.version == 1  # the failed write's bump was rolled back
    changed = core.store.documents_changed(org, "test", None)
    assert [row.seq for row in changed.documents] == [written.seq]
    assert core.store.documents_changed(org, "test", 0).documents  # marked at version 1
    assert core.store.term_counts(org, "test", ["owl"]) == (2, {"owl": 1})


def test_completing_a_processing_document_failing_late_keeps_it_processing(
    core: AgentCore, refused: Any
) -> None:
    org = core.create_organization("acme").id
    _insert(core, org)
    document = make_document(chunks=2, status="processing")
    core.store.insert_processing_document(
        org, "test", document, kind="text", filename="a.txt", content_type=None, data=b"x", now=0
    )
    before = _rows(core)
    refused("document_terms")
    ready = document.model_copy(update={"status": "ready"})
    vectors = np.full((2, 4), 0.5, dtype=np.float32)
    with pytest.raises(Exception, match="refused by the test"):
        core.store.complete_document(
            org, "test", ready, CHUNKS, "e", vectors, np.ones(2, bool), COUNTS
        )
    assert _rows(core) == before
    stored = core.store.get_document(org, "test", document.id)
    assert stored is not None and stored.status == "processing"
