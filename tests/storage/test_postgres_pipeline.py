"""PostgreSQL's pipelined document write (``Database.write(pipeline=True)``).

A document's write sends its statements in batches (two round trips instead of
seven), so a failing statement may surface only at the end of the block. These tests
pin what must not change: the statement's own error (not a 503 for an unknown commit
outcome), nothing of the block kept, the connection usable after it, a connection the
server dropped retried transparently, and the plain path used where ``COPY`` runs.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from helpers import make_document

from agentcore.storage.postgres import PostgresStore

pytestmark = pytest.mark.slow
psycopg = pytest.importorskip("psycopg")


@pytest.fixture
def store(postgres_url: str) -> Iterator[PostgresStore]:
    """A store on an empty database, closed after the test."""
    opened = PostgresStore.open(postgres_url, pool_size=2)
    try:
        yield opened
    finally:
        opened.close()


def _organizations(store: PostgresStore) -> set[str]:
    with store.db.read() as conn:
        return {row["name"] for row in conn.execute("SELECT name FROM organizations")}


ROW = "INSERT INTO organizations (id, name, created_at) VALUES (?, ?, '2026-01-01')"
FAILURES = {
    # an integrity error, and an OperationalError that is no lost connection
    "unique violation": (psycopg.errors.UniqueViolation, [(ROW, ["org_a", "second"])]),
    "statement timeout": (
        psycopg.errors.QueryCanceled,
        [("SET LOCAL statement_timeout = 10", None), ("SELECT pg_sleep(5)", None)],
    ),
}


@pytest.mark.parametrize("failure", FAILURES)
def test_a_statement_failing_in_the_last_batch_raises_its_error_and_keeps_nothing(
    store: PostgresStore, failure: str
) -> None:
    error, statements = FAILURES[failure]
    with pytest.raises(error), store.db.write(pipeline=True) as conn:
        conn.execute(ROW, ["org_a", "first"])
        for sql, parameters in statements:  # nothing is read: all sent at the end
            conn.execute(sql, parameters)
    assert _organizations(store) == set()  # the first row was rolled back too
    with store.db.write(pipeline=True) as conn:  # the connection is usable again
        conn.execute(ROW, ["org_b", "third"])
    assert _organizations(store) == {"third"}


def test_a_document_write_on_a_connection_the_server_dropped_is_retried(
    store: PostgresStore, postgres_url: str
) -> None:
    org = store.ensure_organization("acme").id
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    vectors = np.ones((2, 4), dtype=np.float32) / 2
    chunks = [("one", [1], [0]), ("two", [1], [0])]
    written = store.insert_document(
        org, "test", make_document(chunks=2), chunks, "e", vectors, np.ones(2, bool)
    )
    assert len(written.chunk_ids) == 2
    assert store.count_vectors(org, "test") == 2


def test_document_writes_are_pipelined_unless_pgvector_rows_are_copied(
    store: PostgresStore,
) -> None:
    assert store._pipelined_writes()
    store.vector_rows = True  # as on a node where the pgvector table exists
    assert not store._pipelined_writes()
