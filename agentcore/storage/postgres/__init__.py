"""The PostgreSQL store: many nodes (processes, machines) on one database.

Needs the ``postgres`` extra (psycopg 3, psycopg-pool, pgvector); this package is
imported only when a ``postgresql://`` URL is opened, so ``import agentcore`` works
without it.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from typing import Literal

import numpy as np
import psycopg
from psycopg import sql

from agentcore.errors import ServiceUnavailable
from agentcore.storage.postgres.agents import AgentStore
from agentcore.storage.postgres.chat import ChatStore
from agentcore.storage.postgres.connection import (
    RETRY_AFTER_SECONDS,
    Conn,
    Database,
    describe,
    retrying,
)
from agentcore.storage.postgres.idempotency import IdempotencyStore
from agentcore.storage.postgres.knowledge import KnowledgeStore
from agentcore.storage.postgres.limits import RateLimitStore
from agentcore.storage.postgres.schema import MIGRATION_LOCK, VECTOR_ROWS, SchemaTooNew, migrate
from agentcore.storage.postgres.tenancy import TenancyStore
from agentcore.storage.postgres.webhooks import CHANNEL, WebhookStore

VectorSearch = Literal["memory", "pgvector"]


def is_postgres_url(url: str) -> bool:
    """Whether ``url`` names a PostgreSQL database (``postgresql://`` or ``postgres://``)."""
    return url.startswith(("postgresql://", "postgres://"))


class PostgresStore(
    TenancyStore,
    AgentStore,
    KnowledgeStore,
    WebhookStore,
    ChatStore,
    IdempotencyStore,
    RateLimitStore,
):
    """Everything agentcore keeps, in one PostgreSQL database shared by every node."""

    shared_by_nodes = True

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 10,
        timeout: float = 5.0,
        vector_search: VectorSearch = "memory",
    ) -> None:
        self.url = url
        self.db = Database(url, pool_size=pool_size, timeout=timeout)
        self.vector_search = vector_search
        self.vector_rows = False
        self._registered = weakref.WeakSet()
        self._listener: psycopg.Connection[tuple[object, ...]] | None = None
        self._listen_lock = threading.Lock()
        self._closed = False

    @classmethod
    def open(
        cls,
        url: str,
        *,
        pool_size: int = 10,
        timeout: float = 5.0,
        vector_search: VectorSearch = "memory",
    ) -> PostgresStore:
        """Connect, migrate (under an advisory lock) and return the store.

        ``ServiceUnavailable`` (one line naming host and database) when the server
        cannot be reached; ``SchemaTooNew`` when newer code migrated the database.
        """
        store = cls(url, pool_size=pool_size, timeout=timeout, vector_search=vector_search)
        store.db.open()
        try:
            store.migrate()
        except BaseException:
            store.db.close()
            raise
        return store

    @classmethod
    def attach(
        cls, url: str, *, pool_size: int, timeout: float, vector_search: VectorSearch
    ) -> PostgresStore:
        """Connect to a database another process migrated (no migration, no lock)."""
        store = cls(url, pool_size=pool_size, timeout=timeout, vector_search=vector_search)
        store.db.open()
        try:
            with store.db.pool.connection() as conn:
                store._find_vector_rows(conn)
        except BaseException:
            store.db.close()
            raise
        return store

    def reopener(self) -> Callable[[], PostgresStore]:
        """Connects to this database from another process (a small pool, no migration)."""
        return functools.partial(
            PostgresStore.attach,
            self.url,
            pool_size=min(self.db.pool.max_size, 2),
            timeout=self.db.timeout,
            vector_search=self.vector_search,
        )

    def migrate(self) -> None:
        """Apply pending migrations; with ``pgvector``, create and fill the rows table."""
        with self.db.pool.connection() as conn:
            migrate(conn)
            if self.vector_search == "pgvector":
                self._create_vector_rows(conn)
            self._find_vector_rows(conn)

    def _find_vector_rows(self, conn: Conn) -> None:
        # the rows table exists once any node asked for pgvector: keep it up to date
        found = conn.execute("SELECT to_regclass('vector_rows') IS NOT NULL AS ok").fetchone()
        self.vector_rows = bool(found and found["ok"])

    def _create_vector_rows(self, conn: Conn) -> None:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", [MIGRATION_LOCK])
            exists = conn.execute("SELECT to_regclass('vector_rows') IS NOT NULL AS ok").fetchone()
            if exists and exists["ok"]:
                return
            for statement in VECTOR_ROWS.split(";"):
                if statement.strip():
                    conn.execute(statement.encode())
            self.vector_rows = True
            self._backfill(conn)  # the segments written while nobody kept rows

    def _backfill(self, conn: Conn) -> None:
        segments = conn.execute("SELECT id FROM vector_segments ORDER BY id").fetchall()
        for segment in segments:
            row = conn.execute(
                "SELECT organization_id, environment, document_id, dimension, ids, vectors"
                " FROM vector_segments WHERE id = %s",
                [segment["id"]],
            ).fetchone()
            assert row is not None
            ids = np.frombuffer(row["ids"], dtype="<i8")
            vectors = np.frombuffer(row["vectors"], dtype="<f4").reshape(-1, row["dimension"])
            self._copy_rows(
                conn, row["organization_id"], row["environment"], row["document_id"], ids, vectors
            )

    @retrying
    def ping(self) -> None:
        """``SELECT 1`` on a pooled connection; ``ServiceUnavailable`` if none answers."""
        with self.db.read() as conn:
            conn.execute("SELECT 1").fetchone()

    # waking other nodes -----------------------------------------------------------

    def wait_for_events(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for an event recorded by any node; whether one came.

        LISTENs on a dedicated connection (outside the pool). When that connection
        breaks it is reopened on the next call; meanwhile this returns ``False`` after
        the timeout, so callers fall back to polling.
        """
        with self._listen_lock:
            if self._closed:
                return False
            try:
                if self._listener is None or self._listener.closed:
                    self._listener = psycopg.connect(
                        self.url, autocommit=True, connect_timeout=max(int(self.db.timeout), 1)
                    )
                    self._listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
                woken = False
                for _ in self._listener.notifies(timeout=timeout, stop_after=1):
                    woken = True
                return woken
            except psycopg.Error:
                if self._listener is not None:
                    self._listener.close()
                self._listener = None
                if not self._closed:
                    threading.Event().wait(timeout)
                return False

    def close(self) -> None:
        """Close the pool and the listening connection.

        A thread blocked in ``wait_for_events`` is woken with a NOTIFY (every
        listening node gets a harmless spurious wake-up) so closing does not wait for
        its timeout.
        """
        self._closed = True
        if self._listener is not None:
            try:
                with self.db.pool.connection(timeout=1.0) as conn:
                    conn.execute(sql.SQL("NOTIFY {}").format(sql.Identifier(CHANNEL)))
            except Exception:  # unreachable: the waiter times out by itself
                pass
        if self._listen_lock.acquire(timeout=self.db.timeout + 1.0):
            try:
                if self._listener is not None:
                    self._listener.close()
                self._listener = None
            finally:
                self._listen_lock.release()
        self.db.close()


__all__ = [
    "RETRY_AFTER_SECONDS",
    "PostgresStore",
    "SchemaTooNew",
    "ServiceUnavailable",
    "describe",
    "is_postgres_url",
]
