"""What the SQL store needs from a database's connection layer, whichever database.

``sqlite/connection.py`` and ``postgres/connection.py`` each provide a ``Database`` of
this shape; every table module reaches it as ``self.db`` and writes its statements
once, with ``?`` placeholders, against the ``Connection`` it hands out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from agentcore.storage.records import ConnectionStats, Ids, Vectors
from agentcore.storage.sql.dialect import Dialect


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

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> Cursor:
        """Run one statement per parameter row."""


class Database(Protocol):
    """Connections and transactions of one database, safe to share between threads.

    Blocks are re-entrant on a thread: an inner ``write`` joins the outer transaction,
    so store methods compose (one calls another inside its transaction).
    """

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

    def deferred_row(self, cursor: Any) -> Callable[[], Any]:
        """The first row of ``cursor``'s result (a ``RETURNING`` statement's) when the
        returned function is called: on a database with round trips only then, so the
        statements sent meanwhile go with it in a pipelined write; else read at once,
        which ends the statement (SQLite's would stay open while an exception's
        traceback kept its cursor, and block the connection's next ``COMMIT``).
        (``cursor``: one of this database's own connections' cursors.)"""

    def write_one(self, sql: str, params: Any) -> Any:
        """Run one write statement as its own transaction; its first row (``RETURNING``)."""

    def insert_ids(
        self, conn: Any, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> list[int]:
        """Insert ``rows`` into ``table``; the integer keys they were given, in order.
        (``conn``: one of this database's own connections, as its blocks hand out.)"""

    def insert_with_blob(
        self, conn: Any, table: str, values: Mapping[str, Any], column: str, data: bytes
    ) -> None:
        """Insert a row of ``values`` whose ``column`` holds ``data`` (a large upload)."""

    def read_segment(self, conn: Any, segment_id: int, ids: Ids, vectors: Vectors) -> None:
        """Copy vector segment ``segment_id``'s buffers into ``ids`` and ``vectors``."""

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


class Tables:
    """What every table module reaches: the database, and the words it speaks."""

    db: Database
    dialect: Dialect
