"""PostgreSQL connections: a psycopg pool, re-entrant transactions, safe retries.

Every store method is one transaction (``Database.write``/``snapshot``) or one
autocommit read (``Database.read``), and is wrapped by ``retrying``: a serialization
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
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal, ParamSpec, TypeVar

import psycopg
from psycopg import Connection, errors, sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from agentcore.errors import NotFound, ServiceUnavailable, ValidationFailed

P = ParamSpec("P")
T = TypeVar("T")
Conn = Connection[DictRow]

RETRIES = 4  # attempts of one store method on a serialization failure or lost connection
FAIL_FAST_SECONDS = 1.0  # after a connection failure, calls fail at once for this long
RETRY_AFTER_SECONDS = 2  # what a 503 tells the client


class CommitUnknown(Exception):
    """The connection broke while committing: the transaction may or may not have landed."""


def describe(url: str) -> str:
    """``host H port P database D`` for messages: never the user's password."""
    info = conninfo_to_dict(url)
    host = info.get("host") or "localhost"
    port = info.get("port") or "5432"
    database = info.get("dbname") or info.get("user") or "?"
    return f"host {host} port {port}, database {database}"


class Database:
    """A pool of connections to one PostgreSQL database, safe to share between threads.

    Connections are in autocommit mode; ``write`` and ``snapshot`` open a transaction
    on the calling thread's connection and are re-entrant (an inner ``write`` joins the
    outer transaction), so store methods compose like the SQLite store's do.
    """

    def __init__(self, url: str, *, pool_size: int, timeout: float) -> None:
        self.url = url
        self.where = describe(url)
        self.timeout = timeout
        self._local = threading.local()
        self._down_until = 0.0
        self.pool: ConnectionPool[Conn] = ConnectionPool(
            url,
            min_size=1,
            max_size=max(pool_size, 1),
            timeout=timeout,
            open=False,
            connection_class=Connection[DictRow],
            kwargs={
                "autocommit": True,
                "row_factory": dict_row,
                "connect_timeout": max(int(timeout), 1),
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
        if reason is not None:
            raise ServiceUnavailable(
                f"Cannot connect to PostgreSQL at {self.where}: {reason}",
                code="database_unavailable",
                retry_after=RETRY_AFTER_SECONDS,
            ) from None

    def _probe(self) -> str | None:
        """Why a direct connection fails, or ``None`` if it works (the pool only times out)."""
        try:
            with psycopg.connect(self.url, connect_timeout=max(int(self.timeout), 1)):
                return None
        except psycopg.Error as exc:
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            return lines[0] if lines else type(exc).__name__

    def close(self) -> None:
        """Close every connection of the pool."""
        self.pool.close()

    # connections and transactions ------------------------------------------------

    @property
    def depth(self) -> int:
        """How many ``write``/``snapshot`` blocks the calling thread is inside."""
        return int(getattr(self._local, "depth", 0))

    @contextmanager
    def _connection(self) -> Iterator[Conn]:
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

    @contextmanager
    def read(self) -> Iterator[Conn]:
        """A connection for reads: autocommit, each statement sees committed data."""
        with self._connection() as conn:
            yield conn

    @contextmanager
    def write(
        self, isolation: Literal["read committed", "repeatable read", "serializable"] | None = None
    ) -> Iterator[Conn]:
        """A transaction, committed on success, rolled back on error; re-entrant."""
        with self._transaction(isolation, read_only=False) as conn:
            yield conn

    @contextmanager
    def snapshot(self) -> Iterator[Conn]:
        """A read-only REPEATABLE READ transaction: one consistent view for several reads."""
        with self._transaction("repeatable read", read_only=True) as conn:
            yield conn

    @contextmanager
    def _transaction(self, isolation: str | None, *, read_only: bool) -> Iterator[Conn]:
        if self.depth:
            self._local.depth += 1
            try:
                yield self._local.conn
            finally:
                self._local.depth -= 1
            return
        with self._connection() as conn:
            conn.execute("BEGIN")
            self._local.depth = 1
            try:
                if isolation is not None or read_only:
                    mode = f"ISOLATION LEVEL {(isolation or 'read committed').upper()}"
                    mode += " READ ONLY" if read_only else ""
                    conn.execute(f"SET TRANSACTION {mode}")
                yield conn
            except BaseException:
                if not conn.closed and not conn.broken:
                    conn.execute("ROLLBACK")
                raise
            else:
                try:
                    conn.execute("COMMIT")
                except psycopg.OperationalError as exc:
                    if isinstance(exc, errors.TransactionRollback):
                        raise  # a serialization failure at commit: nothing landed
                    raise CommitUnknown(str(exc)) from exc
            finally:
                self._local.depth = 0

    # failures ------------------------------------------------------------------

    def unavailable(self, reason: str) -> ServiceUnavailable:
        """The 503 a caller gets while the database cannot be reached."""
        return ServiceUnavailable(
            f"The database is unavailable ({reason}); retry shortly.",
            code="database_unavailable",
            retry_after=RETRY_AFTER_SECONDS,
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


def retrying(method: Callable[P, T]) -> Callable[P, T]:
    """Re-run a store method whose transaction failed in a way that is safe to retry.

    Only the outermost call retries (an inner call is part of its caller's
    transaction). Serialization failures and deadlocks retry with a short backoff;
    a connection lost before the commit retries at once, after the pool has dropped
    its broken idle connections (so a server that killed idle backends costs a retry,
    never a failed call, and other threads are not told it is down); a connection
    that cannot be had (``PoolTimeout``), or running out of attempts, surfaces as
    ``ServiceUnavailable`` and makes calls fail fast for a moment.
    """

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        db: Database = args[0].db  # type: ignore[attr-defined]
        if db.depth:
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
                raise db.unavailable("the connection broke during a commit") from exc
            except (psycopg.OperationalError, PoolTimeout) as exc:
                if isinstance(exc, psycopg.errors.QueryCanceled):
                    raise
                if attempt == RETRIES - 1 or isinstance(exc, PoolTimeout):
                    db.down()
                    raise db.unavailable("cannot reach the server") from exc
                db.lost()  # and retry at once, on a connection the pool has checked
        raise AssertionError("unreachable")

    return wrapper


_TRUE = sql.SQL("TRUE")


def page_rows(
    conn: Conn,
    table: str,
    *,
    scope: Sequence[Any],
    limit: int,
    starting_after: str | None,
    filters: sql.Composable = _TRUE,
    filter_params: Sequence[Any] = (),
) -> tuple[list[DictRow], bool]:
    """One page of ``table`` newest first, rows after ``starting_after`` (as SQLite's)."""
    where = sql.SQL("organization_id = %s AND environment = %s AND ({})").format(filters)
    params: list[Any] = [*scope, *filter_params]
    if starting_after is not None:
        row = conn.execute(
            sql.SQL(
                "SELECT seq FROM {} WHERE id = %s AND organization_id = %s AND environment = %s"
            ).format(sql.Identifier(table)),
            [starting_after, *scope],
        ).fetchone()
        if row is None:
            raise NotFound(
                f"No object with id '{starting_after}' to start after.",
                param="starting_after",
            )
        where = sql.SQL("{} AND seq < %s").format(where)
        params.append(row["seq"])
    rows = conn.execute(
        sql.SQL("SELECT * FROM {} WHERE {} ORDER BY seq DESC LIMIT %s").format(
            sql.Identifier(table), where
        ),
        [*params, limit + 1],
    ).fetchall()
    return rows[:limit], len(rows) > limit


def update_row(
    conn: Conn,
    table: str,
    row_id: str,
    changes: dict[str, Any],
    *,
    allowed: set[str],
    stamp_column: str | None = None,
    stamp: str | None = None,
) -> None:
    """``UPDATE table SET <changes> WHERE id = row_id``, refusing columns not ``allowed``."""
    unknown = set(changes) - allowed
    if unknown:
        raise ValueError(f"cannot update {sorted(unknown)} of {table}")
    values = dict(changes)
    if stamp_column is not None:
        values[stamp_column] = stamp
    assignments = sql.SQL(", ").join(
        sql.SQL("{} = %s").format(sql.Identifier(column)) for column in values
    )
    conn.execute(
        sql.SQL("UPDATE {} SET {} WHERE id = %s").format(sql.Identifier(table), assignments),
        [*values.values(), row_id],
    )
