"""PostgreSQL's pipelined document write (``Database.write(pipeline=True)``).

A document's write sends its statements in one batch with its ``COMMIT`` (one round
trip instead of seven), so a failing statement may surface only at the end of the
block. These tests pin what must not change: the statement's own error (not a 503 for
an unknown commit outcome), nothing of the block kept, the connection usable after it,
a connection the server dropped retried transparently, the plain path used where
``COPY`` runs, one round trip per write (counted in libpq's own protocol trace), and
chunk ids reserved ahead that never clash between processes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from helpers import make_document

from agentcore.storage.postgres import PostgresStore
from agentcore.storage.postgres.connection import ID_BLOCK

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


def _trace(store: PostgresStore, write: Callable[[], object], path: Path) -> list[str]:
    """The directions of the libpq protocol messages ``write`` exchanged (``F`` sent,
    ``B`` received), on a store of one pooled connection."""
    with path.open("w") as out:
        with store.db.pool.connection() as conn:
            conn.pgconn.trace(out.fileno())
            conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            write()
        finally:
            with store.db.pool.connection() as conn:
                conn.pgconn.untrace()
    return [line.split("\t")[0] for line in path.read_text().splitlines() if line]


def _round_trips(directions: list[str]) -> int:
    """How many times the client waited for the server: each run of sent messages
    followed by received ones."""
    return sum(
        1 for sent, received in itertools.pairwise(directions) if (sent, received) == ("F", "B")
    )


def test_a_document_write_is_one_round_trip(postgres_url: str, tmp_path: Path) -> None:
    """Nothing in a document's write waits for an earlier statement's answer: the
    statements, the chunks' reserved ids and the COMMIT go in one batch. The first
    write of a process, and one with more chunks than the stock of ids holds, make
    one more round trip to reserve ids."""
    single = PostgresStore.open(postgres_url, pool_size=1)
    try:
        org = single.ensure_organization("acme").id

        def write(chunks: int) -> Callable[[], object]:
            vectors = np.ones((chunks, 4), dtype=np.float32) / 2
            rows = [("text", [1], [0])] * chunks
            return lambda: single.insert_document(
                org,
                "test",
                make_document(chunks=chunks),
                rows,
                "e",
                vectors,
                np.ones(chunks, bool),
                term_counts=(1, {"text": 1}),
            )

        assert _round_trips(_trace(single, write(2), tmp_path / "first")) == 2  # reserves
        assert _round_trips(_trace(single, write(2), tmp_path / "second")) == 1
        assert _round_trips(_trace(single, write(3), tmp_path / "third")) == 1
        big = ID_BLOCK + 1  # more than the stock: a second reservation
        assert _round_trips(_trace(single, write(big), tmp_path / "big")) == 2
        assert single.count_vectors(org, "test") == 2 + 2 + 3 + big
    finally:
        single.close()


def test_reserved_chunk_ids_never_clash_between_processes(postgres_url: str) -> None:
    """Two stores (two processes' pools) reserving ids from one sequence in turn: every
    chunk id is distinct, ascending within a document, and each store's index of the
    interleaved workspace finds every document."""
    first = PostgresStore.open(postgres_url, pool_size=1)
    second = PostgresStore.open(postgres_url, pool_size=1)
    try:
        org = first.ensure_organization("acme").id
        written: list[list[int]] = []
        for number in range(6):
            store = (first, second)[number % 2]
            chunks = 1 + number
            vectors = np.eye(chunks, 8, k=number % 3, dtype=np.float32)
            rows = [(f"chunk {number}.{i}", [1], [0]) for i in range(chunks)]
            document = make_document(chunks=chunks)
            written.append(
                store.insert_document(
                    org, "test", document, rows, "e", vectors, np.ones(chunks, bool)
                ).chunk_ids
            )
        every = [chunk_id for ids in written for chunk_id in ids]
        assert len(set(every)) == len(every) == sum(range(1, 7))
        assert all(ids == sorted(ids) for ids in written)
        assert written[1][0] > written[0][-1] + ID_BLOCK // 2  # the stores' blocks interleave
        for store in (first, second):
            ids, _ = store.load_vectors(org, "test", 8)
            assert sorted(ids.tolist()) == sorted(every)
            chunks = store.get_chunks(every)
            assert [chunks[i].text for i in written[3]] == [f"chunk 3.{i}" for i in range(4)]
    finally:
        first.close()
        second.close()
