"""PostgreSQL's pipelined document write (``Database.write(pipeline=True)``).

A document's write sends all its statements and its ``COMMIT`` in one batch (one
round trip instead of eight), so a failing statement may surface only at the end of the
block. These tests pin what must
not change: the statement's own error (not a 503 for an unknown commit outcome),
nothing of the block kept, the connection usable after it, a connection the server
dropped retried transparently (a fresh process's, and one that wrote before), the plain
path used where ``COPY`` runs, the round trips (counted in libpq's own protocol trace),
and chunk ids that rise in the order segments are written when two processes write one
workspace.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import make_document, stored_chunk_ids

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


def test_statements_a_failed_pipeline_skipped_are_not_taken_as_prepared(
    postgres_url: str,
) -> None:
    """psycopg prepares a statement at its sixth use. When that use comes after a
    statement that fails in the same pipeline, the server skips it; the next use of the
    name psycopg noted would fail ("prepared statement does not exist"). So after a
    failed pipelined write every statement still runs on the pool's one connection,
    whichever use of it the failed write held."""
    single = PostgresStore.open(postgres_url, pool_size=1)
    try:
        for number in range(8):
            with single.db.write(pipeline=True) as conn:
                conn.execute(ROW, [f"org_{number}", f"good {number}"])
            with (
                pytest.raises(psycopg.errors.UniqueViolation),
                single.db.write(pipeline=True) as conn,
            ):
                conn.execute(ROW, [f"org_{number}", "taken id"])
                conn.execute("SELECT count(*) FROM organizations")  # skipped
            assert f"good {number}" in _organizations(single)  # a snapshot's COMMIT
            with single.db.write() as conn:
                conn.execute("SELECT count(*) FROM organizations")
    finally:
        single.close()


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
    # found when the write's one round trip fails: the COMMIT's outcome is unknown, so
    # the write is sent again (idempotent), and finds that nothing had landed
    assert len(write()) == 2
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


def _round_trips(lines: list[str]) -> int:
    """Round trips in a ``_trace``: each time an answer follows what was sent."""
    directions = [line.split("\t")[0] for line in lines]
    return sum(1 for pair in itertools.pairwise(directions) if pair == ("F", "B"))


@pytest.mark.parametrize("keep", [[True, True, True], [True, False, True], [False, True, True]])
def test_a_document_write_is_one_round_trip_and_its_segment_holds_the_kept_chunks(
    postgres_url: str, tmp_path: Path, keep: list[bool]
) -> None:
    """A document is sent whole, ``COMMIT`` and all, before any answer: the database
    gathers its segment's ids from the chunks just inserted (a range of ordinals, or a
    list when a chunk is left out of the index for having no features)."""
    single = PostgresStore.open(postgres_url, pool_size=1)
    try:
        org = single.ensure_organization("acme").id
        vectors = np.arange(12, dtype=np.float32).reshape(3, 4)
        written = []

        def write() -> None:
            written.append(
                single.insert_document(
                    org,
                    "test",
                    make_document(chunks=3),
                    [("text", [1], [0])] * 3,
                    "e",
                    vectors,
                    np.array(keep),
                    term_counts=(1, {"text": 1}),
                )
            )

        for name in ("first", "second"):
            lines = _trace(single, write, tmp_path / name)
            assert _round_trips(lines) == 1
            commit = next(i for i, line in enumerate(lines) if '"COMMIT"' in line)
            answer = next(i for i, line in enumerate(lines) if line.startswith("B"))
            assert commit < answer  # sent before any answer came
        with single.db.read() as conn:
            segments = conn.execute(
                "SELECT s.ids, s.vectors, s.count, s.version, d.version AS document_version"
                " FROM vector_segments s JOIN documents d ON d.id = s.document_id ORDER BY s.id"
            ).fetchall()
            terms = conn.execute("SELECT count(*) AS n FROM document_terms").fetchone()["n"]
        assert terms == 2 and len(segments) == 2
        for segment, document in zip(segments, written, strict=True):
            ids = np.asarray(document.chunk_ids)[keep]
            assert np.frombuffer(segment["ids"], "<i8").tolist() == ids.tolist()
            stored = np.frombuffer(segment["vectors"], "<f4").reshape(-1, 4)
            assert np.array_equal(stored, vectors[keep]) and segment["count"] == sum(keep)
            assert segment["version"] == segment["document_version"] > 0
        assert single.count_vectors(org, "test") == 2 * sum(keep)
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


def test_a_document_over_a_segment_with_chunks_left_out_gathers_every_segment(
    store: PostgresStore,
) -> None:
    """66,000 chunks at d = 4 fill a segment (65,536 rows) and part of a second; with
    chunks left out, each segment's ordinals go as one array parameter (a list of
    parameters would pass libpq's limit of 65,535)."""
    org = store.ensure_organization("acme").id
    count = 66_000
    keep = np.ones(count, bool)
    keep[[5, 40_000, count - 1]] = False
    vectors = np.arange(count * 4, dtype=np.float32).reshape(count, 4)
    written = store.insert_document(
        org,
        "test",
        make_document(chunks=count),
        [("t", [1], [0])] * count,
        "e",
        vectors,
        keep,
    )
    with store.db.read() as conn:
        segments = conn.execute("SELECT ids, vectors FROM vector_segments ORDER BY id").fetchall()
    assert [len(segment["ids"]) // 8 for segment in segments] == [65_536, count - 3 - 65_536]
    ids = np.concatenate([np.frombuffer(segment["ids"], "<i8") for segment in segments])
    rows = np.concatenate([np.frombuffer(s["vectors"], "<f4").reshape(-1, 4) for s in segments])
    assert ids.tolist() == np.asarray(written.chunk_ids)[keep].tolist()
    assert np.array_equal(rows, vectors[keep])


@pytest.mark.parametrize("announced", [False, True])
def test_a_background_job_completes_its_document_in_three_round_trips(
    postgres_url: str, tmp_path: Path, announced: bool
) -> None:
    """``complete_document`` waits for its conditional ``UPDATE`` (is the document still
    processing?), sends everything else at once and reads the answers before its
    ``COMMIT`` (see the next test); recording its ``document.ready`` event reads the
    subscriptions it goes to, one round trip more."""
    from agentcore.events import Event

    single = PostgresStore.open(postgres_url, pool_size=1)
    try:
        org = single.ensure_organization("acme").id
        if announced:
            single.insert_subscription(
                org, "test", url="http://127.0.0.1:9/h", events=["document.ready"],
                secret="whsec_x", description=None,
            )  # fmt: skip
        document = make_document(chunks=3, status="processing")
        single.insert_processing_document(
            org, "test", document, kind="text", filename="a.txt", content_type=None,
            data=b"text", now=0.0,
        )  # fmt: skip
        vectors = np.arange(12, dtype=np.float32).reshape(3, 4)
        event = Event("document.ready", {"id": document.id}, org, "test")
        written = []

        def complete() -> None:
            written.append(
                single.complete_document(
                    org, "test", document.model_copy(update={"status": "ready"}),
                    [("text", [1], [0])] * 3, "e", vectors, np.ones(3, bool),
                    term_counts=(1, {"text": 1}), event=(lambda _: event) if announced else None,
                )
            )  # fmt: skip

        assert _round_trips(_trace(single, complete, tmp_path / "trace")) == (4 if announced else 3)
        assert written[0] is not None and len(written[0].chunk_ids) == 3
        stored = single.get_document(org, "test", document.id)
        assert stored is not None and stored.status == "ready"
        assert stored_chunk_ids(single, org, "test", document.id) == written[0].chunk_ids
        assert single.ingest_job_data(document.id) is None  # the job is gone with it
        assert single.backlog(now=0.0).deliveries_pending == (1 if announced else 0)
        # a second completion finds it no longer processing and stores nothing
        complete()
        assert written[1] is None
        assert single.count_vectors(org, "test") == 3
    finally:
        single.close()


def test_a_background_job_whose_connection_drops_before_its_commit_is_run_again(
    store: PostgresStore, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection lost while ``complete_document``'s batch is on the server is lost
    before the ``COMMIT`` was sent: the write runs again and the document is ready (it
    is not ``idempotent``, so a loss during the commit would be a 503 that fails the
    upload)."""
    org = store.ensure_organization("acme").id
    document = make_document(chunks=2, status="processing")
    store.insert_processing_document(
        org, "test", document, kind="text", filename="a.txt", content_type=None,
        data=b"text", now=0.0,
    )  # fmt: skip
    store_terms = store._store_terms
    backends: list[int] = []

    def slow_terms(conn: Any, document_id: str, counts: Any) -> None:
        store_terms(conn, document_id, counts)
        if not backends:  # the first attempt's batch waits on the server
            backends.append(conn.info.backend_pid)
            conn.execute("SELECT pg_sleep(5)")

    def kill() -> None:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            for _ in range(500):
                if (
                    backends
                    and admin.execute(
                        "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND query LIKE %s",
                        [backends[0], "%pg_sleep%"],
                    ).fetchone()
                ):
                    admin.execute("SELECT pg_terminate_backend(%s)", [backends[0]])
                    return
                time.sleep(0.01)

    monkeypatch.setattr(store, "_store_terms", slow_terms)
    killer = threading.Thread(target=kill)
    killer.start()
    written = store.complete_document(
        org, "test", document.model_copy(update={"status": "ready"}),
        [("one", [1], [0]), ("two", [1], [0])], "e", np.ones((2, 4), np.float32) / 2,
        np.ones(2, bool), term_counts=(1, {"one": 1}),
    )  # fmt: skip
    killer.join()
    assert backends and written is not None and len(written.chunk_ids) == 2
    stored = store.get_document(org, "test", document.id)
    assert stored is not None and stored.status == "ready"
    assert store.count_vectors(org, "test") == 2
