"""What the SQL store needs from a database's connection layer, whichever database.

``sqlite/connection.py`` and ``postgres/connection.py`` each provide a ``Database`` of
this shape; every table module reaches it as ``self.db`` and writes its statements
once, with ``?`` placeholders, against the ``Connection`` it hands out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, ParamSpec, Protocol, TypeVar

from agentcore.storage.records import ConnectionStats, Ids, Vectors
from agentcore.storage.sql.dialect import Dialect

P = ParamSpec("P")
T = TypeVar("T")


class Cursor(Protocol):
    """The result of one statement: ``sqlite3.Cursor`` or psycopg's ``Cursor``."""

    @property
    def rowcount(self) -> int:
        """Rows the statement changed."""

    def fetchone(self) -> Any:
        """The next row (read by column name), or ``None``."""

    def fetchall(self) -> list[Any]:
        """The remaining rows."""

    def __iter__(self) -> Iterator[Any]:
        """The remaining rows, one at a time."""


class Connection(Protocol):
    """A connection inside one of ``Database``'s blocks; ``?`` marks parameters."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Cursor:
        """Run one statement."""


class Database(Protocol):
    """Connections and transactions of one database, safe to share between threads.

    Blocks are re-entrant on a thread: an inner ``write`` joins the outer transaction,
    so store methods compose (one calls another inside its transaction).
    """

    @property
    def integrity_error(self) -> type[Exception]:
        """What a statement that breaks a constraint raises (a unique key, NOT NULL)."""

    def refused_null(self, error: Exception) -> str:
        """``"table.column"`` if ``error`` (an ``integrity_error``) is a NOT NULL
        column refusing a NULL, else ``""``."""

    @property
    def in_transaction(self) -> bool:
        """Whether the calling thread is inside a transaction (its reads see it)."""

    def read(self) -> AbstractContextManager[Connection]:
        """A connection whose statements each see the committed data."""

    def snapshot(self) -> AbstractContextManager[Connection]:
        """A read transaction: every statement inside sees the same committed state."""

    def write(self, *, pipeline: bool = False) -> AbstractContextManager[Connection]:
        """A transaction, committed when the block ends, rolled back on an exception.

        ``pipeline``: the database may send the block's statements in batches instead of
        one round trip each (PostgreSQL's pipeline mode): a statement's result is waited
        for only when it is read, and the last batch goes with the ``COMMIT``. A database
        error may then surface at a later statement or when the block ends, so only for
        blocks that catch no database error and run no ``COPY``; ignored by a database
        without round trips (SQLite). Ignored by an inner block (it joins the outer one).
        """

    def deferred_rows(self, cursor: Any) -> Callable[[], list[Any]]:
        """The rows of ``cursor``'s result when the returned function is called: on a
        database with round trips only then, so that a pipelined write sends its
        ``COMMIT`` first; else read at once, which ends the statement (SQLite's would
        stay open, and block the connection's next ``COMMIT``). (``cursor``: one of this
        database's own connections' cursors.)"""

    def write_one(self, sql: str, params: Any) -> Any:
        """Run one write statement as its own transaction; its first row (``RETURNING``)."""

    def insert_with_blob(
        self, conn: Any, table: str, values: Mapping[str, Any], column: str, data: bytes
    ) -> None:
        """Insert a row of ``values`` whose ``column`` holds ``data`` (a large upload)."""

    def read_segments(
        self, conn: Any, segments: Sequence[tuple[int, int]], ids: Ids, vectors: Vectors
    ) -> None:
        """Copy the vector segments ``segments`` (``(id, count)`` each, in order) into
        consecutive rows of ``ids`` and ``vectors``."""

    def read_vector_rows(
        self, conn: Any, workspace: Sequence[str], segments: Ids, offsets: Ids, out: Vectors
    ) -> None:
        """Copy row ``offsets[i]`` of vector segment ``segments[i]`` into ``out[i]``, for
        the segments of ``workspace`` (organization, environment) that exist; other
        rows of ``out`` are left as they are."""

    def fetch_blobs(self, conn: Any, sql: str, params: Sequence[Any]) -> list[Any]:
        """The rows of one ``SELECT`` whose columns include large blobs, each as
        ``bytes`` (PostgreSQL sends them in binary, not hex-encoded at twice the size)."""

    def current_cache(self, name: str) -> dict[Any, Any]:
        """A dict of values read from the database as it is now: emptied whenever
        anything was written since it was last asked for (a database that cannot tell
        cheaply hands out an empty dict each time). Callers hold at most
        ``CACHE_LIMIT`` entries in it."""

    def connection_stats(self) -> ConnectionStats:
        """This process's connections (what the metrics report), without a query."""

    def close(self) -> None:
        """Close every connection."""


CACHE_LIMIT = 10_000  # entries a current_cache holds (then read each time)


def idempotent(method: Callable[P, T]) -> Callable[P, T]:
    """Mark a store method whose write may be sent again when it is unknown whether its
    ``COMMIT`` landed (the connection broke after sending it): the method recognises
    its own earlier write and answers as if it had been the first (``insert_document``:
    by the document's id). The PostgreSQL store then retries it instead of answering
    503."""
    method.idempotent = True  # type: ignore[attr-defined]
    return method


class Tables:
    """What every table module reaches: the database, and the words it speaks."""

    db: Database
    dialect: Dialect
