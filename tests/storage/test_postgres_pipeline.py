"""PostgreSQL's pipelined document write (``Database.write(pipeline=True)``).

A document's write sends its statements in two batches, the second with its
``COMMIT`` (two round trips instead of seven), so a failing statement may surface only
at the end of the block. These tests pin what must not change: the statement's own
error (not a 503 for an unknown commit outcome), nothing of the block kept, the
connection usable after it, a connection the server dropped retried transparently (a
fresh process's, and one that wrote before), the plain path used where ``COPY`` runs,
the two round trips with the first one answered before the ``COMMIT`` is sent (counted
in libpq's own protocol trace), and chunk ids that rise in the order segments are
written when two processes write one workspace.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

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


@pytest.mark.parametrize("wrote_before", [False, True])
def test_a_document_write_on_a_connection_the_server_dropped_is_retried(
    store: PostgresStore, postgres_url: str, wrote_before: bool
) -> None:
    org = store.ensure_organization("acme").id
    vectors = np.ones((2, 4), dtype=np.float32) / 2
    chunks = [("one", [1], [0]), ("two", [1], [0])]

    def write() -> list[int]:
        document = make_document(chunks=2)
        return store.insert_document(
            org, "test", document, chunks, "e", vectors, np.ones(2, bool)
        ).chunk_ids

    if wrote_before:  # the pooled connections are warm, as in a running server
        write()
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    assert len(write()) == 2  # found in the first round trip, before any COMMIT: retried
    assert store.count_vectors(org, "test") == (4 if wrote_before else 2)


def test_document_writes_are_pipelined_unless_pgvector_rows_are_copied(
    store: PostgresStore,
) -> None:
    assert store._pipelined_writes()
    store.vector_rows = True  # as on a node where the pgvector table exists
    assert not store._pipelined_writes()


def _trace(store: PostgresStore, write: Callable[[], object], path: Path) -> list[str]:
    """The libpq protocol messages ``write`` exchanged, one line each (``F`` sent, ``B``
    received first), on a store of one pooled connection."""
    with path.open("w") as out:
        with store.db.pool.connection() as conn:
            conn.pgconn.trace(out.fileno())
            conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            write()
        finally:
            with store.db.pool.connection() as conn:
                conn.pgconn.untrace()
    return [line for line in path.read_text().splitlines() if line]


def test_a_document_write_is_two_round_trips_and_commits_in_the_second(
    postgres_url: str, tmp_path: Path
) -> None:
    """The chunk ids are the one answer waited for: the version bump, the document row
    and the chunks go first, and the segment, the sentence counts and the ``COMMIT``
    only once the server has answered, so a connection found broken in the first
    round trip is retried, never an unknown commit."""
    single = PostgresStore.open(postgres_url, pool_size=1)
    try:
        org = single.ensure_organization("acme").id
        vectors = np.ones((3, 4), dtype=np.float32) / 2

        def write() -> None:
            single.insert_document(
                org,
                "test",
                make_document(chunks=3),
                [("text", [1], [0])] * 3,
                "e",
                vectors,
                np.ones(3, bool),
                term_counts=(1, {"text": 1}),
            )

        for name in ("first", "second"):
            lines = _trace(single, write, tmp_path / name)
            directions = [line.split("\t")[0] for line in lines]
            turns = sum(1 for pair in itertools.pairwise(directions) if pair == ("F", "B"))
            assert turns == 2
            commit = next(i for i, line in enumerate(lines) if '"COMMIT"' in line)
            assert directions.index("B") < commit  # an answer came before it was sent
        assert single.count_vectors(org, "test") == 6
    finally:
        single.close()


def test_chunk_ids_rise_in_segment_order_when_two_processes_write_a_workspace(
    postgres_url: str,
) -> None:
    """Ids are drawn after the version bump, under its row lock: however two processes'
    writes interleave, a load reads them ascending and adopts the rows unsorted."""
    first = PostgresStore.open(postgres_url, pool_size=1)
    second = PostgresStore.open(postgres_url, pool_size=1)
    try:
        org = first.ensure_organization("acme").id
        written: list[int] = []
        for number in range(6):
            store = (first, second)[number % 2]
            chunks = 1 + number
            vectors = np.eye(chunks, 8, k=number % 3, dtype=np.float32)
            rows = [(f"chunk {number}.{i}", [1], [0]) for i in range(chunks)]
            written += store.insert_document(
                org, "test", make_document(chunks=chunks), rows, "e", vectors, np.ones(chunks, bool)
            ).chunk_ids
        for store in (first, second):
            ids, _ = store.load_vectors(org, "test", 8)
            assert ids.tolist() == written == sorted(written)
    finally:
        first.close()
        second.close()
