"""The PostgreSQL store: many nodes (processes, machines) on one database.

Needs the ``postgres`` extra (psycopg 3, psycopg-pool, pgvector); this package is
imported only when a ``postgresql://`` URL is opened, so ``import agentcore`` works
without it.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable
from typing import Literal

import psycopg
from psycopg import sql

from agentcore.storage.base import EventWaiter, ReopenableStore
from agentcore.storage.postgres.connection import Database, retry_public_methods
from agentcore.storage.postgres.migrations import SchemaTooNew, migrate
from agentcore.storage.postgres.pgvector import VectorRows
from agentcore.storage.sql.database import Connection
from agentcore.storage.sql.dialect import POSTGRES
from agentcore.storage.sql.store import SQLStore

VectorSearch = Literal["memory", "pgvector"]
CHANNEL = "agentcore_events"  # NOTIFY'd when an event is recorded: idle nodes wake at once


def is_postgres_url(url: str) -> bool:
    """Whether ``url`` names a PostgreSQL database (``postgresql://`` or ``postgres://``)."""
    return url.startswith(("postgresql://", "postgres://"))


@retry_public_methods
class PostgresStore(VectorRows, SQLStore, ReopenableStore, EventWaiter):
    """Everything agentcore keeps, in one PostgreSQL database shared by every node.

    Every public method is retried as ``retrying`` says (``retry_public_methods``).
    """

    dialect = POSTGRES
    shared_by_nodes = True

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 10,
        timeout: float = 5.0,
        vector_search: VectorSearch = "memory",
        prepared_statements: bool = True,
    ) -> None:
        super().__init__()
        self.url = url
        self.db: Database = Database(
            url, pool_size=pool_size, timeout=timeout, prepared_statements=prepared_statements
        )
        self.vector_search = vector_search
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
        migrate: bool = True,
        prepared_statements: bool = True,
    ) -> PostgresStore:
        """Connect, migrate (under an advisory lock) and return the store; ``migrate=False``
        connects to a database another process migrated (no migration, no lock);
        ``prepared_statements=False`` never prepares one (behind a transaction pooler).

        ``ServiceUnavailable`` (one line naming host and database) when the server
        cannot be reached; ``SchemaTooNew`` when newer code migrated the database.
        """
        store = cls(
            url,
            pool_size=pool_size,
            timeout=timeout,
            vector_search=vector_search,
            prepared_statements=prepared_statements,
        )
        store.db.open()
        try:
            if migrate:
                store.migrate()
            else:
                with store.db.pool.connection() as conn:
                    store._open_vector_rows(conn, create=False)
        except BaseException:
            store.db.close()
            raise
        return store

    def reopener(self) -> Callable[[], PostgresStore]:
        # a small pool, and no migration: this process migrated the database
        return functools.partial(
            PostgresStore.open,
            self.url,
            pool_size=min(self.db.pool.max_size, 2),
            timeout=self.db.timeout,
            vector_search=self.vector_search,
            migrate=False,
            prepared_statements=self.db.prepared_statements,
        )

    def migrate(self) -> None:
        """Apply pending migrations; with ``pgvector``, create and fill the rows table."""
        with self.db.pool.connection() as conn:
            migrate(conn)
            self._open_vector_rows(conn, create=self.vector_search == "pgvector")

    # waking other nodes -----------------------------------------------------------

    def _events_recorded(self, conn: Connection) -> None:
        conn.execute(f"NOTIFY {CHANNEL}")  # delivered to the listening nodes at commit

    def wait_for_events(self, timeout: float) -> bool:
        # LISTENs on a dedicated connection (outside the pool), reopened on the next
        # call when it breaks; meanwhile callers fall back to polling
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
        # a thread blocked in ``wait_for_events`` is woken with a NOTIFY (every
        # listening node gets a harmless spurious wake-up): no wait for its timeout
        self._closed = True
        if self._listener is not None:
            # unreachable: the waiter times out by itself
            with contextlib.suppress(Exception), self.db.pool.connection(timeout=1.0) as conn:
                conn.execute(sql.SQL("NOTIFY {}").format(sql.Identifier(CHANNEL)))
        if self._listen_lock.acquire(timeout=self.db.timeout + 1.0):
            try:
                if self._listener is not None:
                    self._listener.close()
                self._listener = None
            finally:
                self._listen_lock.release()
        self.db.close()


__all__ = ["PostgresStore", "SchemaTooNew", "is_postgres_url"]
