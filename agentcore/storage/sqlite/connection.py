"""SQLite connections: one per thread, WAL, busy timeout, BEGIN IMMEDIATE writes.

The ``Database`` the SQL store (``storage/sql``) runs its statements on, plus what only
SQLite does: incremental blob I/O for vector segments, and caches that hold while
``PRAGMA data_version`` says nothing was written.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from sqlite_utils import Database as UtilsDatabase

from agentcore.storage.records import ConnectionStats, Ids, Vectors
from agentcore.storage.sql.queries import marks

BUSY_TIMEOUT_MS = 30_000
_STAMP = object()  # a current_cache entry: the database stamp the cache is valid for
BLOB_CHUNK = 8 << 20  # bytes per blob read: big enough to be fast, small enough to reuse
# Bulk reads (a workspace's segments, a keyword snapshot) map the file for their duration:
# SQLite then copies pages straight from the OS cache rather than read() a page at a time.
MAP_BYTES = 1 << 40  # SQLite caps it at its compile-time maximum (2 GiB by default)
# Seconds between looks at the WAL (``Database.checkpoint``); it checkpoints only after commits.
CHECKPOINT_INTERVAL = 0.5
# A commit checkpoints by itself only past this many WAL pages (the checkpointer fell behind).
BACKSTOP_CHECKPOINT_PAGES = 100_000


class Database:
    """Hands out connections to one SQLite database, safely across threads.

    File databases get one connection per thread (WAL lets readers run beside the
    single writer); writes are serialised in-process by a lock and across processes
    by ``BEGIN IMMEDIATE`` plus a busy timeout, so "database is locked" never reaches
    a caller under normal load. ``:memory:`` has a single shared connection guarded by
    the same lock for reads and writes.
    """

    integrity_error = sqlite3.IntegrityError

    def refused_null(self, error: Exception) -> str:
        """``"table.column"`` of a NOT NULL failure (SQLite says it in the message)."""
        _, found, column = str(error).partition("NOT NULL constraint failed: ")
        return column if found else ""

    def __init__(self, path: str) -> None:
        self.path = path
        self.memory = path == ":memory:"
        if not self.memory:
            Path(path).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._closed = False
        self.generation = 0  # commits made through this object
        self._shared = self._connect() if self.memory else None
        self._checkpoint_lock = threading.Lock()
        self._checkpoint_conn: sqlite3.Connection | None = None
        self._checkpointed = 0  # the ``generation`` the last checkpoint saw

    @property
    def checkpoint_interval(self) -> float | None:
        """Seconds between ``checkpoint()`` calls the owner should make (``None``:
        none needed, ``:memory:`` has no WAL)."""
        return None if self.memory else CHECKPOINT_INTERVAL

    def checkpoint(self) -> bool:
        """Copy committed WAL frames into the database file, off the request path.

        The core's runtime calls this every ``checkpoint_interval`` seconds (the loop
        ``agentcore-sqlite-checkpoint``). ``PASSIVE`` never waits for readers or
        writers: it copies what it can now and the rest on a later call. Only a call
        after this object committed does work; whether one ran. Busy or closing is
        not an error: the next call tries again.
        """
        if self.memory:
            return False
        with self._checkpoint_lock:
            generation = self.generation
            if self._closed or generation == self._checkpointed:
                return False
            self._checkpointed = generation
            if self._checkpoint_conn is None:
                self._checkpoint_conn = sqlite3.connect(self.path, check_same_thread=False)
            with contextlib.suppress(sqlite3.Error):  # busy or closing: next round
                self._checkpoint_conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            return True

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            isolation_level=None,
            check_same_thread=False,
            timeout=BUSY_TIMEOUT_MS / 1000,
        )
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys = ON")
        # Freed pages are not zeroed (SQLite's default; Debian's build turns zeroing on):
        # deleting a document freed its ~1.5 MB of vector pages by writing them all to
        # the WAL again and copying them into the database at the next checkpoint, the
        # largest cost of a DELETE. FAST still zeroes the deleted rows within b-tree
        # pages (no extra I/O); freed pages keep old bytes until reused, as the
        # segment files' unlinked blocks do.
        conn.execute("PRAGMA secure_delete = FAST")
        if not self.memory:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            # Checkpoints run in ``checkpoint()`` on the core's runtime, not inside a
            # request's COMMIT: SQLite's automatic one copies the WAL into the database
            # and fsyncs it in whichever commit crosses the threshold, which made the
            # slowest DELETEs wait ~0.4 s. This threshold (~400 MB) is only a backstop
            # (and what a database nobody calls ``checkpoint()`` on relies on).
            conn.execute(f"PRAGMA wal_autocheckpoint = {BACKSTOP_CHECKPOINT_PAGES}")
        with self._lock:
            self._connections.append(conn)
        return conn

    def connection(self) -> sqlite3.Connection:
        """The calling thread's connection (the shared one for ``:memory:``)."""
        if self._closed:
            raise RuntimeError("the store is closed")
        if self._shared is not None:
            return self._shared
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
        return conn

    @property
    def in_transaction(self) -> bool:
        """Whether the calling thread's connection is inside a transaction."""
        return self.connection().in_transaction

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A connection for reads (autocommit; each statement sees committed data)."""
        with self._lock if self.memory else contextlib.nullcontext():
            yield self.connection()

    @contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: every statement inside sees the same committed state.

        For reads that span several statements (a page of rows, then their children),
        so a writer committing in between cannot make them disagree.
        """
        with self.read() as conn:
            own = not conn.in_transaction
            if own:
                conn.execute("BEGIN")
            try:
                yield conn
            finally:
                if own:
                    conn.execute("COMMIT")

    @contextmanager
    def write(self, *, pipeline: bool = False) -> Iterator[sqlite3.Connection]:
        """A ``BEGIN IMMEDIATE`` transaction, committed on success, rolled back on error.

        Re-entrant on the same thread: an inner ``write()`` joins the outer transaction.
        ``pipeline`` is ignored: statements run in this process, there is no round trip
        to save.
        """
        with self._lock:
            depth: int = getattr(self._local, "depth", 0)
            conn = self.connection()
            self._local.depth = depth + 1
            try:
                if depth:  # inside the outer transaction, which ends it
                    yield conn
                    return
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
                self.generation += 1
            finally:
                self._local.depth = depth

    def utils(self, conn: sqlite3.Connection) -> UtilsDatabase:
        """sqlite-utils' ``Database`` over ``conn`` (for migrations). It never commits on
        its own inside our transactions (it nests in a SAVEPOINT), and, with these
        options, runs no statement when created (no recursive_triggers pragma, no hooks)."""
        return UtilsDatabase(conn, recursive_triggers=False, execute_plugins=False)

    def deferred_rows(self, cursor: sqlite3.Cursor) -> Callable[[], list[Any]]:
        """``cursor``'s rows, read now: there is no round trip to save, and a statement
        left unread stays open, so the connection's next ``COMMIT`` would fail."""
        rows = cursor.fetchall()
        return lambda: rows

    def write_one(self, sql: str, params: Any) -> sqlite3.Row | None:
        """Run one write statement as its own transaction; its first row (``RETURNING``).

        For hot single-statement writes: serialised in-process with ``write()``, but
        without the separate ``BEGIN IMMEDIATE`` and ``COMMIT`` round trips (a lone
        statement takes the write lock before it reads, so it cannot see stale data).
        Inside an open ``write()`` on this thread it joins that transaction.
        """
        with self._lock:
            conn = self.connection()
            row: sqlite3.Row | None = conn.execute(sql, params).fetchone()
            if not getattr(self._local, "depth", 0):
                self.generation += 1
            return row

    def insert_with_blob(
        self,
        conn: sqlite3.Connection,
        table: str,
        values: Mapping[str, Any],
        column: str,
        data: bytes,
    ) -> None:
        """Insert the row with a zero-filled ``column``, then write ``data`` into it with
        incremental blob I/O: a bound blob is copied by SQLite and the copy stays
        attached to the cached statement until it runs again (50 MB held after a 50 MB
        upload)."""
        names = ", ".join([*values, column])
        cursor = conn.execute(
            f"INSERT INTO {table} ({names}) VALUES ({marks(len(values))}, zeroblob(?))",
            [*values.values(), len(data)],
        )
        assert cursor.lastrowid is not None
        with conn.blobopen(table, column, cursor.lastrowid) as blob:
            blob.write(data)

    def read_segments(
        self,
        conn: sqlite3.Connection,
        segments: Sequence[tuple[int, int]],
        ids: Ids,
        vectors: Vectors,
    ) -> None:
        """Copy each segment's blobs straight into its rows of ``ids`` and ``vectors``
        with incremental blob I/O: one copy out of the database, no intermediate
        ``bytes`` (blob reads in process: no round trips)."""
        end = 0
        with _mapped(conn):
            for segment_id, count in segments:
                rows = slice(end, end + count)
                end += count
                for column, into in (("ids", ids[rows]), ("vectors", vectors[rows])):
                    _read_blob(conn, segment_id, column, into.data.cast("B"))

    def fetch_blobs(self, conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[Any]:
        """The rows of one ``SELECT`` (SQLite hands blobs over as ``bytes`` as they are)."""
        with _mapped(conn):
            return conn.execute(sql, params).fetchall()

    def read_vector_rows(
        self,
        conn: sqlite3.Connection,
        workspace: Sequence[str],
        segments: Ids,
        offsets: Ids,
        out: Vectors,
    ) -> None:
        """Copy single rows of a workspace's segments into ``out``: each segment's blob
        opened once and read at its rows' offsets, in ascending order.

        SQLite reaches an offset in a blob by walking its chain of overflow pages from
        the start, a page per ~4 KB before the row (a handle remembers the pages it
        walked, but only while it is open): one walk per segment and search, which is
        why segments are kept short on SQLite (``Dialect.segment_bytes``).
        """
        wanted = np.unique(segments)
        found = conn.execute(
            "SELECT id FROM vector_segments WHERE organization_id = ? AND environment = ?"
            f" AND id IN ({marks(len(wanted))})",
            [*workspace, *wanted.tolist()],
        ).fetchall()
        kept = np.isin(segments, [row[0] for row in found])
        order = np.flatnonzero(kept)
        order = order[np.lexsort((offsets[order], segments[order]))]
        width = out.shape[1] * 4
        starts = np.flatnonzero(np.diff(segments[order], prepend=-1))
        for at in np.split(order, starts[1:]) if order.size else ():
            segment = int(segments[at[0]])
            with conn.blobopen("vector_segments", "vectors", segment, readonly=True) as blob:
                size = len(blob)
                for i, offset in zip(at.tolist(), offsets[at].tolist(), strict=True):
                    if (offset + 1) * width > size:
                        continue
                    blob.seek(offset * width)
                    out[i] = np.frombuffer(blob.read(width), dtype="<f4")

    def thread_cache(self, name: str) -> dict[Any, Any]:
        """A dict private to the calling thread (for caches kept by ``current_cache``)."""
        caches: dict[str, dict[Any, Any]] | None = getattr(self._local, "caches", None)
        if caches is None:
            caches = self._local.caches = {}
        return caches.setdefault(name, {})

    def current_cache(self, name: str) -> dict[Any, Any]:
        """``thread_cache(name)``, emptied first when anything at all was written to the
        database since it was last asked for (checked on each call), so what it holds was
        read from the database as it is now: a write by any connection or process empties
        it at the next call. Callers hold at most ``CACHE_LIMIT`` entries in it; for
        ``:memory:`` it is always empty.

        The cache keeps a stamp of the database's state: SQLite's ``data_version`` of
        this thread's connection (which changes when any other connection, in any
        process, commits) with this object's count of its own commits, so equal stamps
        mean nothing was written in between.
        """
        cache = self.thread_cache(name)
        if self.memory:
            cache.clear()
            return cache
        version = self.connection().execute("PRAGMA data_version").fetchone()[0]
        stamp = (version, self.generation)
        if cache.get(_STAMP) != stamp:
            cache.clear()
            cache[_STAMP] = stamp
        return cache

    def connection_stats(self) -> ConnectionStats:
        """The connections this object opened and keeps (one per thread that used it)."""
        with self._lock:
            return ConnectionStats(open=len(self._connections))

    def close(self) -> None:
        """Close every connection this object opened (any thread)."""
        with self._checkpoint_lock:  # a checkpoint under way ends first
            self._closed = True
            if self._checkpoint_conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    self._checkpoint_conn.close()
                self._checkpoint_conn = None
        with self._lock:
            for conn in self._connections:
                with contextlib.suppress(sqlite3.Error):  # closing is best effort
                    conn.close()
            self._connections.clear()


@contextmanager
def _mapped(conn: sqlite3.Connection) -> Iterator[None]:
    """Let ``conn`` read the database file through a memory map while the block runs.

    Only for bulk reads: a mapped page counts in the process's resident size while the
    map lasts, and a connection keeps its map until told otherwise, so it is dropped at
    the end rather than left on every pooled connection.
    """
    mapped = conn.execute("PRAGMA mmap_size").fetchone()
    if mapped is None or mapped[0]:
        yield  # a database in memory (nothing to map), or mapped already
        return
    conn.execute(f"PRAGMA mmap_size = {MAP_BYTES}")
    try:
        yield
    finally:
        conn.execute("PRAGMA mmap_size = 0")


def _read_blob(conn: sqlite3.Connection, row: int, column: str, out: memoryview) -> None:
    """Copy ``vector_segments.column`` of ``row`` into ``out``, which must be its size."""
    with conn.blobopen("vector_segments", column, row, readonly=True) as blob:
        if len(blob) != len(out):
            raise ValueError(f"segment {row} {column}: {len(blob)} bytes, expected {len(out)}")
        for start in range(0, len(out), BLOB_CHUNK):
            piece = blob.read(BLOB_CHUNK)
            out[start : start + len(piece)] = piece
