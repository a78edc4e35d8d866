"""Vector segments, each workspace's knowledge state and its change log, in SQL.

Vectors are stored as whole-buffer segments (an id array and a float32 matrix per
row, never a row per vector), so a workspace's index loads with one read per segment
straight into one matrix. Every write advances the workspace's version; each segment
records the version that added it and each deletion leaves a tombstone under the
version that deleted it, so a cached index catches up by applying only the delta.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from agentcore.storage.base import IndexStore
from agentcore.storage.records import (
    LOCATOR_SHIFT,
    Ids,
    IndexRows,
    KnowledgeChanges,
    KnowledgeState,
    StaleEmbedder,
    Vectors,
    segment_arrays,
    segment_locators,
)
from agentcore.storage.sql.database import CACHE_LIMIT, Connection, Cursor, Tables
from agentcore.storage.sql.queries import BUMPED_VERSION, WORKSPACE, insert_row, marks, read_row

SNAPSHOT_PART_BYTES = 64 << 20
"""The largest part of a keyword snapshot (``keyword_snapshots`` rows): a 100k-chunk
workspace's 61 MB is one (read without joining parts), and a part stays far below either
database's 1 GB value limit."""
SEGMENT_ROWS = 65_536  # ~100 MB of float32 at d=384: far below either database's 1 GB limit
# Versions of deletions the change log keeps; a cache further behind reloads the workspace.
TOMBSTONE_VERSIONS = 10_000


def _whole_version(parts: Sequence[Any]) -> int | None:
    """The version of a keyword snapshot's rows (``part``, ``version``, in part order),
    if they are one whole write: parts 0 to n - 1, all of one version (two writers'
    parts can mix, each writing its own in one go); else ``None``."""
    if not parts or [row["part"] for row in parts] != list(range(len(parts))):
        return None
    versions = {int(row["version"]) for row in parts}
    return versions.pop() if len(versions) == 1 else None


def _segments(*, with_ids: bool) -> str:
    """A workspace's segments (their id arrays too, ``with_ids``), each with its label:
    its document's ``seq`` (``-1`` without one)."""
    ids = ", v.ids" if with_ids else ""
    return (
        f"SELECT v.id, v.dimension, v.count{ids}, COALESCE(d.seq, -1) AS label"
        " FROM vector_segments v LEFT JOIN documents d ON d.id = v.document_id"
        " WHERE v.organization_id = ? AND v.environment = ?"
    )


_SEGMENT_COLUMNS = (
    "organization_id, environment, document_id, embedder, dimension, count, ids, vectors, version"
)


class VectorTables(Tables, IndexStore):
    """Vectors, versions and the change log of each workspace: ``IndexStore`` but for its
    reads of documents and chunk texts, which ``DocumentTables`` adds."""

    def _pipelined_writes(self) -> bool:
        """Whether a document's write may run as ``db.write(pipeline=True)``: no hook
        below writes with a statement pipeline mode cannot run (``COPY``)."""
        return True

    def _vectors_added(
        self,
        conn: Connection,
        organization_id: str,
        environment: str,
        document_id: str | None,
        ids: Ids,
        vectors: Vectors,
    ) -> None:
        """Hook: a segment of these rows was written (PostgreSQL's pgvector rows follow)."""

    def _vectors_deleted(
        self, conn: Connection, organization_id: str, environment: str, document_id: str | None
    ) -> None:
        """Hook: a document's segments (``None``: the whole workspace's) were deleted."""

    def add_vectors(
        self,
        organization_id: str,
        environment: str,
        document_id: str | None,
        embedder: str,
        dimension: int,
        ids: Ids,
        vectors: Vectors,
    ) -> None:
        """Append vectors as whole-buffer segments and bump the workspace version."""
        ids, vectors = segment_arrays(ids, vectors, dimension)
        with self.db.write() as conn:
            # the bump first: on PostgreSQL its row lock orders concurrent writers, so
            # versions commit in order and each segment carries the version that added it
            self._bump(conn, organization_id, environment, embedder, dimension)
            self._insert_segments(
                conn, (organization_id, environment), document_id, embedder, ids, vectors
            )

    def _insert_segments(
        self,
        conn: Connection,
        workspace: tuple[str, str],
        document_id: str | None,
        embedder: str,
        ids: Ids,
        vectors: Vectors,
    ) -> None:
        """Store ``ids`` and ``vectors`` as segments at the version this transaction
        bumped its workspace to (before), in that transaction."""
        dimension = int(vectors.shape[1])
        ids, vectors = segment_arrays(ids, vectors, dimension)
        rows = self._segment_rows(dimension)
        for start in range(0, len(ids), rows):
            part = slice(start, start + rows)
            conn.execute(
                f"INSERT INTO vector_segments ({_SEGMENT_COLUMNS})"
                f" VALUES ({marks(8)}, {BUMPED_VERSION})",
                [
                    *workspace,
                    document_id,
                    embedder,
                    dimension,
                    len(ids[part]),
                    # buffers, not bytes: no second copy of a large document's vectors
                    ids[part].data.cast("B"),
                    vectors[part].data.cast("B"),
                    *workspace,
                ],
            )
        if len(ids):
            self._vectors_added(conn, *workspace, document_id, ids, vectors)

    def _segment_rows(self, dimension: int) -> int:
        """The most rows one segment holds: at most the dialect's ``segment_bytes`` (SQLite
        reads a row of one by walking its pages from the start, PostgreSQL at its offset)."""
        return max(1, min(SEGMENT_ROWS, self.dialect.segment_bytes // (4 * dimension)))

    def _gathers_segment_ids(self) -> bool:
        """Whether a document's segments are written with ids the database gathers from
        its chunks (``_gather_segments``): where the dialect can, and no
        ``_vectors_added`` hook needs the ids here."""
        return self.dialect.segment_ids is not None and self._pipelined_writes()

    def _gather_segments(
        self,
        conn: Connection,
        workspace: tuple[str, str],
        document_id: str,
        embedder: str,
        vectors: Vectors,
        keep: npt.NDArray[np.bool_],
    ) -> None:
        """``_insert_segments`` for the ``keep`` rows of ``vectors``, one for each chunk of
        document ``document_id`` (inserted by this transaction, in order), each segment's
        ids gathered by the database from the chunks it holds (``Dialect.segment_ids``),
        so nothing waits for the chunk ids."""
        assert self.dialect.segment_ids is not None
        gather = self.dialect.segment_ids.format("id", "ordinal")
        matrix = np.ascontiguousarray(vectors if keep.all() else vectors[keep], dtype="<f4")
        ordinals = np.flatnonzero(keep)
        rows = self._segment_rows(matrix.shape[1])
        for start in range(0, len(ordinals), rows):
            part = ordinals[start : start + rows]
            if part[-1] - part[0] + 1 == len(part):  # every chunk between: a range
                where, chosen = "ordinal BETWEEN ? AND ?", [int(part[0]), int(part[-1])]
            else:
                where, chosen = self.dialect.any_of.format("ordinal"), [part.tolist()]
            conn.execute(
                f"INSERT INTO vector_segments ({_SEGMENT_COLUMNS}) SELECT ?, ?, ?, ?, ?, ?,"
                f" {gather}, ?, {BUMPED_VERSION} FROM chunks WHERE document_id = ? AND {where}",
                [
                    *workspace,
                    document_id,
                    embedder,
                    matrix.shape[1],
                    len(part),
                    matrix[start : start + rows].data.cast("B"),
                    *workspace,
                    document_id,
                    *chosen,
                ],
            )

    def load_vectors(
        self, organization_id: str, environment: str, dimension: int
    ) -> tuple[Ids, Vectors]:
        """Every vector of a workspace as one id array and one contiguous float32 matrix."""
        rows = self.load_index(organization_id, environment, dimension)
        assert rows.vectors is not None
        return rows.ids, rows.vectors

    def load_index(
        self,
        organization_id: str,
        environment: str,
        dimension: int,
        *,
        vectors: bool = True,
        located: bool = False,
    ) -> IndexRows:
        """Every row of a workspace's index: ids, one contiguous float32 matrix (unless
        ``vectors`` is false), each row's label (its document's ``seq``) and, if
        ``located``, each row's locator (its segment and row in it).

        Read inside one read transaction (a consistent snapshot), the segments copied
        into the preallocated arrays: no per-row Python, no intermediate buffers.
        """
        with self.db.snapshot() as conn:
            rows = conn.execute(
                f"{_segments(with_ids=not vectors)} ORDER BY v.id", [organization_id, environment]
            ).fetchall()
            if vectors and any(row["dimension"] != dimension for row in rows):
                raise ValueError("the stored vectors have another dimension")
            found = self._read_segments(conn, rows, dimension, vectors=vectors)
        if not located:
            return found
        locators = segment_locators([row["id"] for row in rows], [row["count"] for row in rows])
        return replace(found, locators=locators)

    def locate_vectors(self, organization_id: str, environment: str, ids: Ids) -> Ids:
        """The locators of ``ids`` (-1 for an id not stored), from the segments' id
        buffers only (an eighth of a row's bytes at 16 dimensions, far less above)."""
        wanted = np.asarray(ids, dtype=np.int64).reshape(-1)
        out = np.full(wanted.shape[0], -1, dtype=np.int64)
        with self.db.snapshot() as conn:
            segments = conn.execute(
                f"SELECT id, ids FROM vector_segments WHERE {WORKSPACE} ORDER BY id",
                [organization_id, environment],
            ).fetchall()
        blobs = [segment["ids"] for segment in segments]
        stored = np.frombuffer(b"".join(blobs), dtype="<i8")
        if not stored.size:
            return out
        # one sorted lookup over every segment's ids: SQLite's segments are small and
        # many, and a lookup per segment took 0.3 s for 14k ids in 1,177 segments
        counts = [len(blob) // 8 for blob in blobs]
        located = segment_locators([segment["id"] for segment in segments], counts)
        order = np.argsort(stored, kind="stable")
        at = order[np.minimum(np.searchsorted(stored, wanted, sorter=order), stored.size - 1)]
        hit = stored[at] == wanted
        out[hit] = located[at[hit]]
        return out

    def read_vector_rows(
        self, organization_id: str, environment: str, locators: Ids, dimension: int
    ) -> Vectors:
        """The vectors at ``locators``; a row no longer stored is all NaN."""
        wanted = np.asarray(locators, dtype=np.int64).reshape(-1)
        out = np.full((wanted.shape[0], dimension), np.nan, dtype=np.float32)
        known = wanted >= 0
        if known.any():
            with self.db.read() as conn:
                part = np.flatnonzero(known)
                rows = np.full((part.shape[0], dimension), np.nan, dtype=np.float32)
                self.db.read_vector_rows(
                    conn,
                    (organization_id, environment),
                    wanted[part] >> LOCATOR_SHIFT,
                    wanted[part] & ((1 << LOCATOR_SHIFT) - 1),
                    rows,
                )
                out[part] = rows
        return out

    def _read_segments(
        self, conn: Connection, rows: Sequence[Any], dimension: int, *, vectors: bool = True
    ) -> IndexRows:
        """The segments ``rows`` (``id``, ``count`` and ``label`` each; ``ids`` too
        without ``vectors``) as one id array, one matrix (unless ``vectors`` is false)
        and labels; with vectors, read a batch of segments at a time."""
        counts = [int(row["count"]) for row in rows]
        total = sum(counts)
        ids = np.empty(total, dtype="<i8")
        labels = np.repeat(
            np.fromiter((int(row["label"]) for row in rows), dtype=np.int64, count=len(rows)),
            counts,
        )
        if not vectors:
            start = 0
            for row, count in zip(rows, counts, strict=True):
                ids[start : start + count] = np.frombuffer(row["ids"], dtype="<i8")
                start += count
            return IndexRows(ids, None, labels)
        matrix = np.empty((total, dimension), dtype="<f4")
        segments = [(int(row["id"]), count) for row, count in zip(rows, counts, strict=True)]
        self.db.read_segments(conn, segments, ids, matrix)
        return IndexRows(ids, matrix, labels)

    def count_vectors(self, organization_id: str, environment: str) -> int:
        """How many vectors a workspace stores."""
        sql = f"SELECT COALESCE(SUM(count), 0) AS n FROM vector_segments WHERE {WORKSPACE}"
        row = read_row(self.db, sql, [organization_id, environment])
        return int(row["n"])

    def replace_all_vectors(
        self,
        organization_id: str,
        environment: str,
        embedder: str,
        segments: Sequence[tuple[str | None, Ids, Vectors]],
        dimension: int,
    ) -> None:
        """Swap every vector of a workspace for new ones (a re-embed), atomically."""
        scope = [organization_id, environment]
        with self.db.write() as conn:
            # the state row first: on PostgreSQL concurrent re-embeds queue on its lock
            self._bump(conn, organization_id, environment)
            conn.execute(f"DELETE FROM vector_segments WHERE {WORKSPACE}", scope)
            self._vectors_deleted(conn, organization_id, environment, None)
            conn.execute(
                f"UPDATE knowledge_state SET embedder = ?, dimension = ? WHERE {WORKSPACE}",
                [embedder, dimension, *scope],
            )
            for document_id, ids, vectors in segments:
                self.add_vectors(
                    organization_id, environment, document_id, embedder, dimension, ids, vectors
                )
            # every vector changed: the change log starts afresh after this version
            version = self._bump(conn, organization_id, environment)
            conn.execute(
                f"UPDATE knowledge_state SET log_floor = ? WHERE {WORKSPACE}", [version, *scope]
            )
            conn.execute(f"DELETE FROM knowledge_tombstones WHERE {WORKSPACE}", scope)

    def keyword_snapshot(self, organization_id: str, environment: str) -> tuple[int, bytes] | None:
        with self.db.snapshot() as conn:
            rows = self.db.fetch_blobs(
                conn,
                f"SELECT part, version, data FROM keyword_snapshots WHERE {WORKSPACE}"
                " ORDER BY part",
                [organization_id, environment],
            )
        version = _whole_version(rows)
        if version is None:
            return None
        if len(rows) == 1:
            return version, bytes(rows[0]["data"])  # (no copy of bytes)
        return version, b"".join(rows[n]["data"] for n in range(len(rows)))

    def put_keyword_snapshot(
        self,
        organization_id: str,
        environment: str,
        version: int,
        data: bytes | bytearray | memoryview,
        *,
        replace: bool = False,
    ) -> bool:
        scope = [organization_id, environment]
        view = memoryview(data).cast("B")
        parts = range(0, max(1, len(view)), SNAPSHOT_PART_BYTES)
        with self.db.write() as conn:
            stored = conn.execute(
                f"SELECT part, version FROM keyword_snapshots WHERE {WORKSPACE} ORDER BY part",
                scope,
            ).fetchall()
            current = self.knowledge_state(organization_id, environment).version
            found = _whole_version(stored)
            # a whole snapshot as new as this one stays; mixed parts, or a version the
            # workspace has not reached (a damaged row), are replaced
            if found is not None and version <= found <= current and not replace:
                return False
            for part, start in enumerate(parts):
                conn.execute(
                    "INSERT INTO keyword_snapshots (organization_id, environment, part, version,"
                    " data) VALUES (?, ?, ?, ?, ?) ON CONFLICT (organization_id, environment,"
                    " part) DO UPDATE SET version = excluded.version, data = excluded.data",
                    [*scope, part, version, view[start : start + SNAPSHOT_PART_BYTES]],
                )
            conn.execute(
                f"DELETE FROM keyword_snapshots WHERE {WORKSPACE} AND part >= ?",
                [*scope, len(parts)],
            )
        return True

    def knowledge_state(self, organization_id: str, environment: str) -> KnowledgeState:
        """The embedder, dimension and version of a workspace's index.

        Every search asks this (to know whether its cached index is current), and a
        search over HTTP asks it twice (before choosing to run on the event loop, then
        in the search). So states read are remembered per thread for as long as
        nothing at all has been written to the database since (``current_cache``, as
        for keys; SQLite checks ``PRAGMA data_version`` and its commit count on each
        call): a write by any connection or process is seen by the very next call.
        Inside a transaction on this thread (which may hold its own uncommitted
        writes, or read a snapshot) the row is read as it is there.
        """
        key = (organization_id, environment)
        cache: dict[Any, Any] | None = None
        if not self.db.in_transaction:
            cache = self.db.current_cache("knowledge_state")
            found: KnowledgeState | None = cache.get(key)
            if found is not None:
                return found
        row = read_row(
            self.db,
            f"SELECT embedder, dimension, version, index_dtype FROM knowledge_state WHERE {WORKSPACE}",
            key,
        )
        state = KnowledgeState(None, None, 0) if row is None else KnowledgeState(**row)
        if cache is not None and len(cache) < CACHE_LIMIT:
            cache[key] = state
        return state

    def claim_index_dtype(self, organization_id: str, environment: str, index_dtype: str) -> str:
        """The workspace's index dtype: the stored one, else ``index_dtype``, stored now."""
        # a new row starts at version 0, which reads like no row at all
        row = self.db.write_one(
            "INSERT INTO knowledge_state AS s (organization_id, environment, version,"
            " index_dtype) VALUES (?, ?, 0, ?) ON CONFLICT (organization_id, environment)"
            " DO UPDATE SET index_dtype = COALESCE(s.index_dtype, excluded.index_dtype)"
            " RETURNING index_dtype",
            [organization_id, environment, index_dtype],
        )
        return str(row["index_dtype"])

    def changes_since(
        self,
        organization_id: str,
        environment: str,
        version: int,
        *,
        max_rows: int,
        vectors: bool = True,
    ) -> KnowledgeChanges | None:
        """The rows added (with their labels) and ids deleted after ``version``, read
        in one snapshot; without ``vectors``, the added rows' ids and labels alone.

        ``None`` when the change log cannot bring ``version`` up to date by itself:
        it is older than the log keeps (a re-embed or pruned tombstones), newer than
        the store (the database was replaced), or more than ``max_rows`` rows were
        added since (loading the whole workspace is then the better deal).
        """
        scope = [organization_id, environment]
        with self.db.snapshot() as conn:
            state = conn.execute(
                f"SELECT dimension, version, log_floor FROM knowledge_state WHERE {WORKSPACE}",
                scope,
            ).fetchone()
            current = 0 if state is None else int(state["version"])
            if state is None or version == current:
                empty = np.empty(0, dtype=np.int64)
                nothing = np.empty((0, 0), dtype=np.float32)
                return KnowledgeChanges(current, empty, nothing, empty, empty)
            if version < int(state["log_floor"]) or version > current:
                return None
            rows = conn.execute(
                f"{_segments(with_ids=not vectors)} AND v.version > ? ORDER BY v.id",
                [*scope, version],
            ).fetchall()
            if sum(int(row["count"]) for row in rows) > max_rows:
                return None
            added = self._read_segments(conn, rows, int(state["dimension"]), vectors=vectors)
            deleted = [
                np.frombuffer(row["ids"], dtype="<i8")
                for row in conn.execute(
                    f"SELECT ids FROM knowledge_tombstones WHERE {WORKSPACE} AND version > ?",
                    [*scope, version],
                ).fetchall()
            ]
        gone = np.concatenate(deleted) if deleted else np.empty(0, dtype=np.int64)
        matrix = added.vectors
        if matrix is None:
            matrix = np.empty((0, int(state["dimension"])), dtype=np.float32)
        return KnowledgeChanges(
            current, added.ids, matrix, gone.astype(np.int64, copy=False), added.labels
        )

    def _bump(
        self,
        conn: Connection,
        organization_id: str,
        environment: str,
        embedder: str | None = None,
        dimension: int | None = None,
    ) -> int:
        """Advance the workspace version (in the caller's transaction); the new version.
        With ``embedder`` and ``dimension``: ``StaleEmbedder`` unless the workspace's are
        (now) those, checked in the write's own transaction instead of a read before it
        (the caller's transaction then rolls back)."""
        row = self._send_bump(conn, (organization_id, environment), embedder, dimension).fetchone()
        if embedder is not None and (row["embedder"], row["dimension"]) != (embedder, dimension):
            raise StaleEmbedder(
                f"the workspace is indexed by {row['embedder']!r} with dimension {row['dimension']}"
            )
        return int(row["version"])

    def _send_bump(
        self,
        conn: Connection,
        workspace: tuple[str, str],
        embedder: str | None,
        dimension: int | None,
    ) -> Cursor:
        """Advance the workspace version (in the caller's transaction), recording
        ``embedder`` and ``dimension`` if it has none yet; the cursor whose row holds
        the new version and the workspace's embedder and dimension."""
        return conn.execute(
            "INSERT INTO knowledge_state AS s (organization_id, environment, embedder,"
            " dimension, version) VALUES (?, ?, ?, ?, 1) ON CONFLICT (organization_id,"
            " environment) DO UPDATE SET version = s.version + 1,"
            " embedder = COALESCE(s.embedder, excluded.embedder),"
            " dimension = COALESCE(s.dimension, excluded.dimension)"
            " RETURNING version, embedder, dimension",
            [*workspace, embedder, dimension],
        )

    def _log_deletion(
        self,
        conn: Connection,
        organization_id: str,
        environment: str,
        version: int,
        ids: bytes,
        terms: dict[str, Any],
    ) -> None:
        """Leave a tombstone of ``version``'s deletion (the vector ``ids`` as stored, and
        any ``terms`` columns), and forget deletions older than ``TOMBSTONE_VERSIONS``
        versions (raising the log's floor: caches further behind reload)."""
        if ids or terms:
            values = {"organization_id": organization_id, "environment": environment}
            insert_row(
                conn, "knowledge_tombstones", {**values, "version": version, "ids": ids, **terms}
            )
        floor = version - TOMBSTONE_VERSIONS
        if floor <= 0:
            return
        conn.execute(
            f"DELETE FROM knowledge_tombstones WHERE {WORKSPACE} AND version <= ?",
            [organization_id, environment, floor],
        )
        conn.execute(
            f"UPDATE knowledge_state SET log_floor = {self.dialect.greatest}(log_floor, ?)"
            f" WHERE {WORKSPACE}",
            [floor, organization_id, environment],
        )
