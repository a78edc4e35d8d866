"""PostgreSQL connections: a psycopg pool, re-entrant transactions, safe retries.

The ``Database`` the SQL store (``storage/sql``) runs its statements on: its
connections take the store's ``?`` (and ``:name``) placeholders. Every store method is
one transaction (``Database.write``/``snapshot``) or one autocommit read
(``Database.read``), and every public one is wrapped by ``retrying``: a serialization
failure or deadlock re-runs the whole method, and so does a connection that broke
*before* the commit was sent (PostgreSQL rolled the transaction back, nothing is
half-written). A connection that broke during the commit leaves the outcome unknown,
so that is never retried. When the database cannot be reached the caller gets
``ServiceUnavailable`` (HTTP 503 with ``Retry-After``), and for a short while after
such a failure further calls fail fast instead of each waiting for a connection;
the pool reconnects by itself once the server is back.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, ParamSpec, Self, TypeVar, cast

import numpy as np
import psycopg
from psycopg import errors
from psycopg.abc import Params, Query, QueryNoTemplate
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from agentcore._logs import hide_passwords
from agentcore.errors import ServiceUnavailable, ValidationFailed
from agentcore.storage.records import ConnectionStats, Ids, Vectors
from agentcore.storage.sql.queries import insert_row

P = ParamSpec("P")
T = TypeVar("T")
C = TypeVar("C", bound=type)
_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")

RETRIES = 4  # attempts of one store method on a serialization failure or lost connection
FAIL_FAST_SECONDS = 1.0  # after a connection failure, calls fail at once for this long
RETRY_AFTER_SECONDS = 2  # what a 503 tells the client
# Bytes of vector segments above which a load streams them with COPY instead of one
# SELECT (whose prepared statement saves a small workspace's load ~0.1 ms)
STREAM_BYTES = 1 << 20


@functools.lru_cache(maxsize=1024)
def translate(sql: str, named: bool) -> str:
    """The store's ``?`` (or, for ``named``, ``:name``) placeholders in psycopg's words
    (``%s``, ``%(name)s``); a literal ``%`` doubled."""
    sql = sql.replace("%", "%%")
    if named:
        return _NAMED.sub(r"%(\1)s", sql)
    return sql.replace("?", "%s")


class Cursor(psycopg.Cursor[DictRow]):
    """A psycopg cursor that takes the store's placeholders (see ``translate``)."""

    def execute(
        self,
        query: Query,
        params: Params | None = None,
        *,
        prepare: bool | None = None,
        binary: bool | None = None,
    ) -> Self:
        """Run ``query``; a ``str`` with parameters is translated first."""
        if isinstance(query, str) and params is not None:
            query = translate(query, isinstance(params, Mapping))
        # the store sends no t-string templates
        return super().execute(cast(QueryNoTemplate, query), params, prepare=prepare, binary=binary)


class Connection(psycopg.Connection[DictRow]):
    """A pooled connection whose cursors take the store's placeholders."""


Conn = Connection


class CommitUnknown(Exception):
    """The connection broke while committing: the transaction may or may not have landed."""


def describe(url: str) -> str:
    """``host H port P database D`` for messages: never the user's password.

    :raises ValueError: the URL cannot be parsed (its message masks the password that
        psycopg's quotes).
    """
    try:
        info = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise ValueError(f"Malformed PostgreSQL URL: {hide_passwords(str(exc))}") from None
    host = info.get("host") or "localhost"
    port = info.get("port") or "5432"
    database = info.get("dbname") or info.get("user") or "?"
    return f"host {host} port {port}, database {database}"


class Database:
    """A pool of connections to one PostgreSQL database, safe to share between threads.

    Connections are in autocommit mode; ``write`` and ``snapshot`` open a transaction
    on the calling thread's connection and are re-entrant (an inner ``write`` joins the
    outer transaction), so store methods compose (one calls another inside its own).
    """

    integrity_error = psycopg.IntegrityError

    def refused_null(self, error: Exception) -> str:
        """``"table.column"`` of a NOT NULL violation (from the error's diagnostics)."""
        if not isinstance(error, errors.NotNullViolation):
            return ""
        return f"{error.diag.table_name}.{error.diag.column_name}"

    def __init__(
        self, url: str, *, pool_size: int, timeout: float, prepared_statements: bool = True
    ) -> None:
        self.url = url
        self.where = describe(url)
        self.timeout = timeout
        self.prepared_statements = prepared_statements
        self._local = threading.local()
        self._down_until = 0.0
        self.pool: ConnectionPool[Conn] = ConnectionPool(
            url,
            min_size=1,
            max_size=max(pool_size, 1),
            timeout=timeout,
            open=False,
            connection_class=Connection,
            kwargs={
                "autocommit": True,
                "row_factory": dict_row,
                "cursor_factory": Cursor,
                "connect_timeout": max(int(timeout), 1),
                # psycopg's default, or never: a transaction pooler hands each
                # transaction any server connection, where the name may be unknown
                **({} if prepared_statements else {"prepare_threshold": None}),
            },
            name="agentcore-postgres",  # its threads: agentcore-postgres-worker-N
        )

    def open(self) -> None:
        """Open the pool and wait for its first connection; ``ServiceUnavailable`` if none."""
        reason = self._probe()  # a refused connection fails at once, not after a timeout
        if reason is None:
            try:
                self.pool.open(wait=True, timeout=self.timeout)
                return
            except PoolTimeout:
                self.pool.close()
                reason = self._probe() or "timed out"
        raise self.unavailable(reason, opening=True) from None

    def _probe(self) -> str | None:
        """Why a direct connection fails, or ``None`` if it works (the pool only times out)."""
        try:
            with psycopg.connect(self.url, connect_timeout=max(int(self.timeout), 1)):
                return None
        except psycopg.Error as exc:
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            return hide_passwords(lines[0]) if lines else type(exc).__name__

    def connection_stats(self) -> ConnectionStats:
        """The pool's connections: open, lent out, its maximum, callers waiting."""
        stats = self.pool.get_stats()
        size = stats.get("pool_size", 0)
        return ConnectionStats(
            open=size,
            in_use=size - stats.get("pool_available", 0),
            max=stats.get("pool_max", self.pool.max_size),
            waiting=stats.get("requests_waiting", 0),
        )

    def close(self) -> None:
        """Close every connection of the pool."""
        self.pool.close()

    # connections and transactions ------------------------------------------------

    @contextmanager
    def read(self) -> Iterator[Conn]:
        """A connection for reads: autocommit, each statement sees committed data (the
        calling thread's, inside a ``write`` or ``snapshot`` block)."""
        current: Conn | None = getattr(self._local, "conn", None)
        if current is not None:
            yield current
            return
        if time.monotonic() < self._down_until:
            raise self.unavailable("it was unreachable a moment ago")
        with self.pool.connection() as conn:
            self._local.conn = conn
            try:
                yield conn
            finally:
                self._local.conn = None

    @property
    def in_transaction(self) -> bool:
        """Whether the calling thread is inside a ``write`` or ``snapshot`` block (the
        blocks it is inside: ``_local.depth``)."""
        return bool(getattr(self._local, "depth", 0))

    def deferred_rows(self, cursor: Cursor) -> Callable[[], list[Any]]:
        """``cursor``'s rows, read when asked: in a pipelined write, after the ``COMMIT``
        was sent with everything before it (the caller holds the connection meanwhile)."""
        return cursor.fetchall

    def write_one(self, sql: str, params: Any) -> Any:
        """One write statement in autocommit (or in the open transaction); its first row."""
        with self.read() as conn:
            return conn.execute(sql, params).fetchone()

    def current_cache(self, name: str) -> dict[Any, Any]:
        """An empty dict each time: any node may have written since, and asking the
        database costs what the cached read would."""
        return {}

    def insert_with_blob(
        self, conn: Conn, table: str, values: Mapping[str, Any], column: str, data: bytes
    ) -> None:
        """Insert the row, ``data`` bound in binary like any other value."""
        insert_row(conn, table, {**values, column: data})

    def read_segments(
        self, conn: Conn, segments: Sequence[tuple[int, int]], ids: Ids, vectors: Vectors
    ) -> None:
        """Copy ``segments`` into consecutive rows of ``ids`` and ``vectors``, in binary
        (text would send them hex-encoded, at twice the size).

        Up to ``STREAM_BYTES`` with one (prepared) ``SELECT``; more with one ``COPY ...
        TO STDOUT (FORMAT binary)``: the server streams one segment after the other while
        this process copies each into place, so sending and copying overlap and one
        segment at a time is held besides the arrays. (A ``SELECT`` per ~32 MB of
        segments waited for each whole batch before copying it, and its result's memory,
        allocated afresh per batch, cost a 100k x 384 workspace's load twice the CPU.)
        """
        if not segments:
            return
        dimension = vectors.shape[1]
        places: dict[int, tuple[int, int]] = {}  # each segment's first row and row count
        at = 0
        for segment_id, count in segments:
            places[segment_id] = (at, count)
            at += count
        select = "SELECT id, ids, vectors FROM vector_segments WHERE id = ANY(?::bigint[])"
        wanted = [list(places)]
        with conn.cursor(binary=True) as cursor:
            if at * (dimension * 4 + 8) <= STREAM_BYTES:
                cursor.execute(select, wanted)
                found = ((row["id"], row["ids"], row["vectors"]) for row in cursor)
                self._place(found, places, ids, vectors)
                return
            # COPY is not sent through Cursor.execute: its placeholders translated here
            statement = f"COPY ({translate(select, False)}) TO STDOUT (FORMAT binary)"
            with cursor.copy(statement, wanted) as copy:
                copy.set_types(["int8", "bytea", "bytea"])
                self._place(copy.rows(), places, ids, vectors)

    @staticmethod
    def _place(
        found: Iterable[Sequence[Any]],
        places: dict[int, tuple[int, int]],
        ids: Ids,
        vectors: Vectors,
    ) -> None:
        """Copy each segment ``(id, ids, vectors)`` of ``found`` to its ``places`` (each
        consumed); ``ValueError`` unless exactly those segments came, at their sizes."""
        dimension = vectors.shape[1]
        for segment_id, segment_ids, rows in found:
            start, count = places.pop(segment_id, (0, -1))
            if len(segment_ids) != count * 8 or len(rows) != count * dimension * 4:
                raise ValueError(f"segment {segment_id} changed while it was read")
            ids[start : start + count] = np.frombuffer(segment_ids, dtype="<i8")
            vectors[start : start + count] = np.frombuffer(rows, dtype="<f4").reshape(
                count, dimension
            )
        if places:
            raise ValueError(f"segments {sorted(places)} were deleted while they were read")

    def fetch_blobs(self, conn: Conn, sql: str, params: Sequence[Any]) -> list[Any]:
        """The rows of one ``SELECT``, received in binary: a ``bytea`` as text is hex, twice
        its size, and decoding it cost three times the transfer (61 MB: 370 ms against
        110 ms)."""
        with conn.cursor(binary=True) as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()

    def read_vector_rows(
        self, conn: Conn, workspace: Sequence[str], segments: Ids, offsets: Ids, out: Vectors
    ) -> None:
        """Copy single rows of a workspace's segments into ``out``, in one statement:
        ``substring`` of an uncompressed out-of-line ``bytea`` reads only the pages
        holding the row, not the whole segment."""
        width = out.shape[1] * 4
        with conn.cursor(binary=True) as cursor:
            cursor.execute(
                "SELECT o.i, substring(s.vectors FROM (o.off * ?::int + 1)::int FOR ?::int) AS row"
                " FROM unnest(?::bigint[], ?::bigint[], ?::int[]) AS o(seg, off, i)"
                " JOIN vector_segments s ON s.id = o.seg"
                " WHERE s.organization_id = ? AND s.environment = ?",
                [
                    width,
                    width,
                    segments.tolist(),
                    offsets.tolist(),
                    list(range(len(segments))),
                    *workspace,
                ],
            )
            for found in cursor.fetchall():
                if len(found["row"]) == width:
                    out[found["i"]] = np.frombuffer(found["row"], dtype="<f4")

    def write(self, *, pipeline: bool = False) -> AbstractContextManager[Conn]:
        """A transaction, committed on success, rolled back on error; re-entrant.

        ``pipeline``: in psycopg's pipeline mode. Statements are sent without waiting
        and a round trip is made only when a result is read, so ``BEGIN`` goes with the
        first statements and the ``COMMIT`` with the last ones: a document write of
        eight statements makes one round trip instead of eight (see docs/decisions.md).
        """
        return self._transaction("BEGIN", pipeline)

    def snapshot(self) -> AbstractContextManager[Conn]:
        """A read-only REPEATABLE READ transaction: one consistent view for several reads."""
        return self._transaction("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")

    @contextmanager
    def _transaction(self, begin: str, pipeline: bool = False) -> Iterator[Conn]:
        if self.in_transaction:
            self._local.depth += 1
            try:
                yield self._local.conn
            finally:
                self._local.depth -= 1
            return
        with self.read() as conn:
            self._local.depth = 1
            committing = False
            try:
                # leaving the pipeline sends what is queued (the COMMIT too) and waits
                with conn.pipeline() if pipeline else contextlib.nullcontext():
                    conn.execute(begin)
                    yield conn
                    committing = True
                    conn.execute("COMMIT")
            except BaseException as exc:
                if committing and unknown_outcome(conn, exc):
                    raise CommitUnknown(str(exc)) from exc
                if pipeline:
                    # The server skipped what followed the failed statement, and psycopg
                    # may have noted one of those as prepared (its count reached
                    # prepare_threshold): the next use of that name would fail. Closing
                    # the connection rolls back and the pool replaces it; a pipelined
                    # write fails rarely (a taken id, another embedder, a lost server).
                    conn.close()
                # a failed COMMIT ended the transaction; a failed statement did not
                elif (
                    not conn.closed
                    and not conn.broken
                    and conn.info.transaction_status != TransactionStatus.IDLE
                ):
                    conn.execute("ROLLBACK")
                raise
            finally:
                self._local.depth = 0

    # failures ------------------------------------------------------------------

    def unavailable(self, reason: str, *, opening: bool = False) -> ServiceUnavailable:
        """The 503 a caller gets while the database cannot be reached (``opening``: the
        store, whose message names the server)."""
        if opening:
            message = f"Cannot connect to PostgreSQL at {self.where}: {reason}"
        else:
            message = f"The database is unavailable ({reason}); retry shortly."
        return ServiceUnavailable(
            message, code="database_unavailable", retry_after=RETRY_AFTER_SECONDS
        )

    def lost(self) -> None:
        """Note a broken connection: drop the pool's broken idle connections, so a retry
        gets a working one (a server that restarted, or killed idle backends)."""
        with contextlib.suppress(Exception):  # best effort: the pool also heals on its own
            self.pool.check()

    def down(self) -> None:
        """Note that the server cannot be reached: for a moment, calls fail fast.

        Only when a retry could not get a working connection either: one broken
        connection (others are still fine) must not fail other threads' calls.
        """
        self._down_until = time.monotonic() + FAIL_FAST_SECONDS


def unknown_outcome(conn: Conn, exc: BaseException) -> bool:
    """Whether ``exc``, raised once the ``COMMIT`` was sent, leaves it unknown whether the
    transaction landed: the connection broke (a serialization failure at commit, or a
    statement that failed before it in the same pipeline batch, left nothing written)."""
    return (
        isinstance(exc, psycopg.OperationalError)
        and not isinstance(exc, errors.TransactionRollback)
        and conn.info.transaction_status != TransactionStatus.INERROR
    )


def retrying(method: Callable[P, T]) -> Callable[P, T]:
    """Re-run a store method whose transaction failed in a way that is safe to retry.

    Only the outermost call retries (an inner call is part of its caller's
    transaction). Serialization failures and deadlocks retry with a short backoff;
    a connection lost before the commit retries at once (so does one lost during the
    commit of an ``idempotent`` method), after the pool has dropped
    its broken idle connections (so a server that killed idle backends costs a retry,
    never a failed call, and other threads are not told it is down); a connection
    that cannot be had (``PoolTimeout``), or running out of attempts, surfaces as
    ``ServiceUnavailable`` and makes calls fail fast for a moment.
    """

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        db: Database = args[0].db  # type: ignore[attr-defined]
        if db.in_transaction:
            return method(*args, **kwargs)
        for attempt in range(RETRIES):
            try:
                return method(*args, **kwargs)
            except (errors.SerializationFailure, errors.DeadlockDetected):
                if attempt == RETRIES - 1:
                    raise db.unavailable("too much contention") from None
                time.sleep(0.005 * 2**attempt)
            except psycopg.DataError as exc:
                if "NUL" not in str(exc):
                    raise
                # SQLite stores U+0000; PostgreSQL text cannot hold it: a 422, not a 500
                raise ValidationFailed(
                    "Text cannot contain the NUL character (U+0000) on this store.",
                    code="nul_character",
                ) from None
            except CommitUnknown as exc:
                db.lost()
                if not getattr(method, "idempotent", False) or attempt == RETRIES - 1:
                    raise db.unavailable("the connection broke during a commit") from exc
                # sent again: it tells its own earlier write apart (``idempotent``)
            except (psycopg.OperationalError, PoolTimeout) as exc:
                if isinstance(exc, psycopg.errors.QueryCanceled):
                    raise
                if attempt == RETRIES - 1 or isinstance(exc, PoolTimeout):
                    db.down()
                    raise db.unavailable("cannot reach the server") from exc
                db.lost()  # and retry at once, on a connection the pool has checked
        raise AssertionError("unreachable")

    return wrapper


#: Public methods that run no statement of their own, or handle failures themselves.
NOT_RETRIED = frozenset({"close", "wait_for_events", "reopener"})


def retry_public_methods(cls: C) -> C:
    """Wrap every public method of store class ``cls`` (inherited ones too) in
    ``retrying``, so none can be left out; a wrapper carries the doc its method
    inherits, so ``help()`` shows it. Generators are skipped: their steps call public
    methods, each retried on its own."""
    for name in dir(cls):
        method = inspect.getattr_static(cls, name)
        if (
            name.startswith("_")
            or name in NOT_RETRIED
            or not inspect.isfunction(method)
            or inspect.isgeneratorfunction(method)
            or hasattr(method, "__wrapped__")  # wrapped for a parent class already
        ):
            continue
        wrapper = retrying(method)
        if wrapper.__doc__ is None:  # the method inherits its doc (a ``Store`` protocol's)
            wrapper.__doc__ = inspect.getdoc(method)
        setattr(cls, name, wrapper)
    return cls
