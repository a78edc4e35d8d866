"""pgvector rows beside the segments, so search can run inside PostgreSQL.

When any node runs with ``vector_search = "pgvector"``, each vector is also kept as a
row of the ``vector_rows`` table, and every node keeps those rows in step with the
segments (the ``_vectors_added``/``_vectors_deleted`` hooks), so search can run in the
database instead of in the node's RAM.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from agentcore.storage.base import VectorSearchStore
from agentcore.storage.postgres.connection import Conn
from agentcore.storage.postgres.migrations import MIGRATION_LOCK
from agentcore.storage.records import Ids, Vectors
from agentcore.storage.sql.migrations import run_script
from agentcore.storage.sql.queries import WORKSPACE
from agentcore.storage.sql.vectors import VectorTables

RESCORE = 4  # candidates PostgreSQL returns per result, re-scored exactly (in float64)

# Created only when a node opens with ``vector_search = "pgvector"`` (the extension may
# be absent where nobody asked for it), then kept up to date by every node, and filled
# from the segments when first created. ``embedding`` is a half-precision ``halfvec``
# (half the bytes to scan; its distance functions also run on CPUs where this build's
# float ``vector`` ones do not), ``exact`` the float32 row that the candidates are
# re-scored with, so scores and order are the exact ones.
VECTOR_ROWS = """
    CREATE EXTENSION IF NOT EXISTS vector;
    CREATE TABLE IF NOT EXISTS vector_rows (
        chunk_id BIGINT PRIMARY KEY,
        organization_id TEXT NOT NULL,
        environment TEXT NOT NULL,
        document_id TEXT,
        dimension INTEGER NOT NULL,
        embedding halfvec NOT NULL,
        exact BYTEA NOT NULL
    );
    CREATE INDEX IF NOT EXISTS vector_rows_workspace
        ON vector_rows (organization_id, environment, document_id);
"""


class VectorRows(VectorTables, VectorSearchStore):
    """The pgvector table's upkeep and the search that reads it (``VectorSearchStore``)."""

    vector_rows: bool  # whether the table exists (every node then maintains it)

    def __init__(self) -> None:
        super().__init__()
        self.vector_rows = False
        self._registered: weakref.WeakSet[Any] = weakref.WeakSet()

    def _open_vector_rows(self, conn: Conn, create: bool) -> None:
        """Note whether the table exists; ``create`` it (and fill it) if not."""
        if create:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(?)", [MIGRATION_LOCK])
                if not self._has_vector_rows(conn):
                    run_script(conn, VECTOR_ROWS)
                    self._backfill(conn)  # the segments written while nobody kept rows
        self.vector_rows = self._has_vector_rows(conn)

    def _has_vector_rows(self, conn: Conn) -> bool:
        found = conn.execute("SELECT to_regclass('vector_rows') IS NOT NULL AS ok").fetchone()
        return bool(found and found["ok"])

    def _backfill(self, conn: Conn) -> None:
        segments = conn.execute(
            "SELECT id, organization_id, environment, document_id, dimension, count"
            " FROM vector_segments ORDER BY id"
        ).fetchall()
        for row in segments:
            ids = np.empty(row["count"], dtype="<i8")
            vectors = np.empty((row["count"], row["dimension"]), dtype="<f4")
            self.db.read_segments(conn, [(row["id"], row["count"])], ids, vectors)
            self._copy_rows(
                conn, row["organization_id"], row["environment"], row["document_id"], ids, vectors
            )

    def _vectors_added(
        self,
        conn: Any,
        organization_id: str,
        environment: str,
        document_id: str | None,
        ids: Ids,
        vectors: Vectors,
    ) -> None:
        if self.vector_rows:
            self._copy_rows(conn, organization_id, environment, document_id, ids, vectors)

    def _pipelined_writes(self) -> bool:
        return not self.vector_rows  # the rows are written with COPY

    def _vectors_deleted(
        self, conn: Any, organization_id: str, environment: str, document_id: str | None
    ) -> None:
        if not self.vector_rows:
            return
        sql = f"DELETE FROM vector_rows WHERE {WORKSPACE}"
        args = [organization_id, environment]
        if document_id is not None:
            sql += " AND document_id = ?"
            args.append(document_id)
        conn.execute(sql, args)

    def _copy_rows(
        self,
        conn: Conn,
        organization_id: str,
        environment: str,
        document_id: str | None,
        ids: Ids,
        vectors: Vectors,
    ) -> None:
        """Append pgvector rows with one binary COPY."""
        from pgvector import HalfVector
        from pgvector.psycopg import register_vector

        if conn not in self._registered:  # teach the connection pgvector's types, once
            register_vector(conn)
            self._registered.add(conn)
        # the columns every row of this call shares
        shared = (organization_id, environment, document_id, int(vectors.shape[1]))
        with (
            conn.cursor() as cursor,
            cursor.copy(
                "COPY vector_rows (chunk_id, organization_id, environment, document_id,"
                " dimension, embedding, exact) FROM STDIN (FORMAT BINARY)"
            ) as copy,
        ):
            copy.set_types(["int8", "text", "text", "text", "int4", "halfvec", "bytea"])
            for chunk_id, vector in zip(ids.tolist(), vectors, strict=True):
                copy.write_row([chunk_id, *shared, HalfVector(vector), vector.tobytes()])

    def search_vectors(
        self,
        organization_id: str,
        environment: str,
        query: Vectors,
        k: int,
        *,
        documents: Sequence[str] | None = None,
        chunk_ids: Sequence[int] | None = None,
    ) -> tuple[Ids, Vectors]:
        # rows are unit length, so cosine is the inner product (pgvector's ``<#>`` is its
        # negation). PostgreSQL ranks the workspace's rows at half precision and returns
        # ``RESCORE`` x ``k`` candidates with their float32 rows; those are re-scored
        # exactly here and ordered by score, then id, as the in-memory index orders them.
        # The ranking is an exact scan of the workspace's rows (no approximate index).
        # ``documents`` (a filter's documents, resolved by the caller) and ``chunk_ids``
        # restrict the rows ranked, in the ``WHERE`` clause: through the index on
        # ``(organization_id, environment, document_id)`` and the primary key.
        if not self.vector_rows:
            raise RuntimeError("vector_search='pgvector' needs the store opened with it")
        q = np.ascontiguousarray(query, dtype=np.float32)
        dimension = int(q.shape[0])
        literal = "[" + ",".join(repr(float(x)) for x in q) + "]"
        candidates = max(k * RESCORE, k + 16)
        where, args = "", list[Any]()
        if documents is not None:
            where += " AND document_id = ANY(?)"
            args.append(list(documents))
        if chunk_ids is not None:
            where += " AND chunk_id = ANY(?)"
            args.append([int(i) for i in chunk_ids])
        with self.db.read() as conn:
            rows = conn.execute(
                f"SELECT chunk_id, exact FROM vector_rows WHERE {WORKSPACE}{where}"
                " ORDER BY embedding <#> ?::halfvec, chunk_id LIMIT ?",
                [organization_id, environment, *args, literal, candidates],
            ).fetchall()
        ids = np.fromiter((row["chunk_id"] for row in rows), dtype=np.int64, count=len(rows))
        matrix = np.frombuffer(b"".join(row["exact"] for row in rows), dtype="<f4")
        # in float64, so equal rows score equal wherever they sit in the matrix (float32
        # BLAS rounds by position: a tie was ordered by where a row came, not its id),
        # and clipped as the in-memory index clips (rounding may pass 1 a little)
        exact = matrix.reshape(len(rows), dimension).astype(np.float64) @ q.astype(np.float64)
        scores = np.clip(exact, -1.0, 1.0).astype(np.float32)
        order = np.lexsort((ids, -scores))[:k]
        return ids[order], scores[order]
