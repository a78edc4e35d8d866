"""PostgreSQL storage of documents, chunks and vectors.

Vectors are kept as whole-buffer ``bytea`` segments (as in the SQLite store), so a
node loads a workspace's index with one read per segment straight into one matrix.
When any node runs with ``vector_search = "pgvector"``, each vector is also kept as a
row of the ``vector_rows`` table (a pgvector ``vector`` column), and every node keeps
those rows in step, so search can run inside PostgreSQL instead of in the node's RAM.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from agentcore.ids import isoformat
from agentcore.schema import Document, Problem
from agentcore.storage.postgres.connection import Conn, Database, page_rows, retrying
from agentcore.storage.records import (
    IngestJob,
    KnowledgeChanges,
    KnowledgeState,
    StaleEmbedder,
    StoredChunk,
    segment_arrays,
)

_WORKSPACE = "organization_id = %s AND environment = %s"
SEGMENT_ROWS = 65_536  # ~100 MB of float32 at d=384, far below bytea's 1 GB limit
RESCORE = 4  # candidates PostgreSQL returns per result, re-scored exactly in float32
_DOCUMENT_COLUMNS = "id, source, content_type, pages, chunks, bytes, created_at, status, last_error"


def _document(row: Any) -> Document:
    values = dict(row)
    if values.get("last_error"):
        values["last_error"] = json.loads(values["last_error"])
    return Document.model_validate(values)


# Versions of deletions the change log keeps; a cache further behind reloads the workspace.
TOMBSTONE_VERSIONS = 10_000


class KnowledgeStore:
    """Documents, chunks and vectors of each workspace."""

    db: Database
    vector_rows: bool  # whether the pgvector table exists (every node then maintains it)
    _registered: weakref.WeakSet[Conn]

    def _register_vector(self, conn: Conn) -> None:
        """Teach this connection pgvector's ``vector`` type (once per connection)."""
        if conn not in self._registered:
            from pgvector.psycopg import register_vector

            register_vector(conn)
            self._registered.add(conn)

    @retrying
    def insert_document(
        self,
        organization_id: str,
        environment: str,
        document: Document,
        chunks: Sequence[tuple[str, list[int], list[int]]],
        embedder: str,
        vectors: npt.NDArray[np.float32],
        keep: npt.NDArray[np.bool_],
        term_counts: tuple[int, Mapping[str, int]] | None = None,
    ) -> list[int]:
        """Store a document, its chunks and the vectors of the ``keep`` rows atomically.

        Returns every chunk id in chunk order (chunk ids are the vector ids).
        """
        with self.db.write() as conn:
            self._insert_document_row(conn, organization_id, environment, document)
            ids = self._insert_chunks(
                conn, organization_id, environment, document, chunks, embedder, vectors, keep
            )
            if term_counts is not None:
                self._insert_term_counts(
                    conn, organization_id, environment, document.id, *term_counts
                )
            return ids

    def _insert_document_row(
        self, conn: Conn, organization_id: str, environment: str, document: Document
    ) -> None:
        conn.execute(
            "INSERT INTO documents (id, organization_id, environment, source, content_type,"
            " pages, chunks, bytes, created_at, status, last_error)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [
                document.id,
                organization_id,
                environment,
                document.source,
                document.content_type,
                document.pages,
                document.chunks,
                document.bytes,
                isoformat(document.created_at),
                document.status,
                document.last_error.model_dump_json() if document.last_error else None,
            ],
        )

    def _insert_chunks(
        self,
        conn: Conn,
        organization_id: str,
        environment: str,
        document: Document,
        chunks: Sequence[tuple[str, list[int], list[int]]],
        embedder: str,
        vectors: npt.NDArray[np.float32],
        keep: npt.NDArray[np.bool_],
    ) -> list[int]:
        rows = conn.execute(
            "INSERT INTO chunks (document_id, organization_id, environment, ordinal, text,"
            " pages, page_offsets) SELECT %s, %s, %s, u.o - 1, u.t, u.p, u.po"
            " FROM unnest(%s::text[], %s::text[], %s::text[]) WITH ORDINALITY"
            " AS u(t, p, po, o) RETURNING id, ordinal",
            [
                document.id,
                organization_id,
                environment,
                [text for text, _, _ in chunks],
                [json.dumps(pages) for _, pages, _ in chunks],
                [json.dumps(offsets) for _, _, offsets in chunks],
            ],
        ).fetchall()
        by_ordinal = {row["ordinal"]: int(row["id"]) for row in rows}
        ids = [by_ordinal[i] for i in range(len(chunks))]
        self._append_vectors(
            conn,
            organization_id,
            environment,
            document.id,
            embedder,
            int(vectors.shape[1]),
            np.asarray(ids, dtype=np.int64)[keep],
            vectors if keep.all() else vectors[keep],  # no copy of a big matrix if all kept
            check=True,
        )
        return ids

    @retrying
    def chunk_ids(self, organization_id: str, environment: str, document_id: str) -> list[int]:
        """The chunk ids of a document of this workspace."""
        with self.db.read() as conn:
            rows = conn.execute(
                f"SELECT id FROM chunks WHERE document_id = %s AND {_WORKSPACE} ORDER BY id",
                [document_id, organization_id, environment],
            ).fetchall()
        return [int(row["id"]) for row in rows]

    @retrying
    def add_vectors(
        self,
        organization_id: str,
        environment: str,
        document_id: str | None,
        embedder: str,
        dimension: int,
        ids: npt.NDArray[np.int64],
        vectors: npt.NDArray[np.float32],
    ) -> None:
        """Append vectors as whole-buffer segments (and pgvector rows) and bump the version."""
        with self.db.write() as conn:
            self._append_vectors(
                conn, organization_id, environment, document_id, embedder, dimension, ids, vectors
            )

    def _append_vectors(
        self,
        conn: Conn,
        organization_id: str,
        environment: str,
        document_id: str | None,
        embedder: str,
        dimension: int,
        ids: npt.NDArray[np.int64],
        vectors: npt.NDArray[np.float32],
        *,
        check: bool = False,
    ) -> None:
        """``add_vectors`` in the caller's transaction. ``check``: raise ``StaleEmbedder``
        if the workspace has another embedder or dimension (the transaction rolls back)."""
        ids, vectors = segment_arrays(ids, vectors, dimension)
        # the bump first: its row lock orders concurrent writers, so versions
        # commit in order and each segment carries the version that added it
        version = self._bump(conn, organization_id, environment, embedder, dimension, check=check)
        with conn.cursor() as cursor:
            for start in range(0, len(ids), SEGMENT_ROWS):
                part = slice(start, start + SEGMENT_ROWS)
                cursor.execute(
                    "INSERT INTO vector_segments (organization_id, environment, document_id,"
                    " embedder, dimension, count, ids, vectors, version)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %b, %b, %s)",
                    [
                        organization_id,
                        environment,
                        document_id,
                        embedder,
                        dimension,
                        len(ids[part]),
                        ids[part].tobytes(),
                        vectors[part].tobytes(),
                        version,
                    ],
                )
        if self.vector_rows and len(ids):
            self._copy_rows(conn, organization_id, environment, document_id, ids, vectors)

    def _copy_rows(
        self,
        conn: Conn,
        organization_id: str,
        environment: str,
        document_id: str | None,
        ids: npt.NDArray[np.int64],
        vectors: npt.NDArray[np.float32],
    ) -> None:
        """Append pgvector rows with one binary COPY."""
        from pgvector import HalfVector

        self._register_vector(conn)
        dimension = int(vectors.shape[1])
        with (
            conn.cursor() as cursor,
            cursor.copy(
                "COPY vector_rows (chunk_id, organization_id, environment, document_id,"
                " dimension, embedding, exact) FROM STDIN (FORMAT BINARY)"
            ) as copy,
        ):
            copy.set_types(["int8", "text", "text", "text", "int4", "halfvec", "bytea"])
            for chunk_id, vector in zip(ids.tolist(), vectors, strict=True):
                copy.write_row(
                    [
                        chunk_id,
                        organization_id,
                        environment,
                        document_id,
                        dimension,
                        HalfVector(vector),
                        vector.tobytes(),
                    ]
                )

    @retrying
    def load_vectors(
        self, organization_id: str, environment: str, dimension: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """Every vector of a workspace as one id array and one contiguous float32 matrix.

        One consistent snapshot; each segment's two buffers arrive in binary and are
        copied once into the preallocated arrays (no per-row work).
        """
        with self.db.snapshot() as conn:
            rows = conn.execute(
                f"SELECT id, dimension, count FROM vector_segments WHERE {_WORKSPACE} ORDER BY id",
                [organization_id, environment],
            ).fetchall()
            if any(row["dimension"] != dimension for row in rows):
                raise ValueError("the stored vectors have another dimension")
            total = sum(row["count"] for row in rows)
            ids = np.empty(total, dtype="<i8")
            vectors = np.empty((total, dimension), dtype="<f4")
            start = 0
            with conn.cursor(binary=True) as cursor:
                for row in rows:
                    end = start + row["count"]
                    cursor.execute(
                        "SELECT ids, vectors FROM vector_segments WHERE id = %s", [row["id"]]
                    )
                    found = cursor.fetchone()
                    assert found is not None
                    ids[start:end] = np.frombuffer(found["ids"], dtype="<i8")
                    vectors[start:end] = np.frombuffer(found["vectors"], dtype="<f4").reshape(
                        -1, dimension
                    )
                    del found
                    start = end
        return ids, vectors

    @retrying
    def count_vectors(self, organization_id: str, environment: str) -> int:
        """How many vectors a workspace stores."""
        with self.db.read() as conn:
            row = conn.execute(
                f"SELECT COALESCE(SUM(count), 0) AS n FROM vector_segments WHERE {_WORKSPACE}",
                [organization_id, environment],
            ).fetchone()
        return int(row["n"]) if row else 0

    @retrying
    def replace_all_vectors(
        self,
        organization_id: str,
        environment: str,
        embedder: str,
        segments: Sequence[tuple[str | None, npt.NDArray[np.int64], npt.NDArray[np.float32]]],
        dimension: int,
    ) -> None:
        """Swap every vector of a workspace for new ones (a re-embed), atomically."""
        scope = [organization_id, environment]
        with self.db.write() as conn:
            # lock the workspace's state row first: concurrent re-embeds queue here
            self._bump(conn, organization_id, environment)
            conn.execute(f"DELETE FROM vector_segments WHERE {_WORKSPACE}", scope)
            if self.vector_rows:
                conn.execute(f"DELETE FROM vector_rows WHERE {_WORKSPACE}", scope)
            conn.execute(
                f"UPDATE knowledge_state SET embedder = %s, dimension = %s WHERE {_WORKSPACE}",
                [embedder, dimension, *scope],
            )
            for document_id, ids, vectors in segments:
                self.add_vectors(
                    organization_id, environment, document_id, embedder, dimension, ids, vectors
                )
            # every vector changed: the change log starts afresh after this version
            version = self._bump(conn, organization_id, environment)
            conn.execute(
                f"UPDATE knowledge_state SET log_floor = %s WHERE {_WORKSPACE}",
                [version, *scope],
            )
            conn.execute(f"DELETE FROM knowledge_tombstones WHERE {_WORKSPACE}", scope)

    @retrying
    def knowledge_state(self, organization_id: str, environment: str) -> KnowledgeState:
        """The embedder, dimension and version of a workspace's index."""
        with self.db.read() as conn:
            row = conn.execute(
                "SELECT embedder, dimension, version, index_dtype FROM knowledge_state"
                f" WHERE {_WORKSPACE}",
                [organization_id, environment],
            ).fetchone()
        if row is None:
            return KnowledgeState(None, None, 0)
        return KnowledgeState(
            row["embedder"], row["dimension"], int(row["version"]), row["index_dtype"]
        )

    @retrying
    def claim_index_dtype(self, organization_id: str, environment: str, index_dtype: str) -> str:
        """The workspace's index dtype: the stored one, else ``index_dtype``, stored now."""
        with self.db.write() as conn:
            # a new row starts at version 0, which reads like no row at all
            row = conn.execute(
                "INSERT INTO knowledge_state AS s (organization_id, environment, version,"
                " index_dtype) VALUES (%s, %s, 0, %s) ON CONFLICT (organization_id, environment)"
                " DO UPDATE SET index_dtype = COALESCE(s.index_dtype, excluded.index_dtype)"
                " RETURNING s.index_dtype",
                [organization_id, environment, index_dtype],
            ).fetchone()
        assert row is not None
        return str(row["index_dtype"])

    def _bump(
        self,
        conn: Conn,
        organization_id: str,
        environment: str,
        embedder: str | None = None,
        dimension: int | None = None,
        *,
        check: bool = False,
    ) -> int:
        """Advance the workspace version (in the caller's transaction); the new version.

        ``check``: raise ``StaleEmbedder`` unless the workspace's embedder and dimension
        are (now) ``embedder`` and ``dimension`` (a document write's check, made in its
        own transaction instead of a read before it).
        """
        row = conn.execute(
            "INSERT INTO knowledge_state AS s (organization_id, environment, embedder,"
            " dimension, version) VALUES (%s, %s, %s, %s, 1)"
            " ON CONFLICT (organization_id, environment) DO UPDATE SET version = s.version + 1,"
            " embedder = COALESCE(s.embedder, excluded.embedder),"
            " dimension = COALESCE(s.dimension, excluded.dimension)"
            " RETURNING s.version, s.embedder, s.dimension",
            [organization_id, environment, embedder, dimension],
        ).fetchone()
        assert row is not None
        if check and (row["embedder"] != embedder or row["dimension"] != dimension):
            raise StaleEmbedder(
                f"the workspace is indexed by {row['embedder']!r} with dimension {row['dimension']}"
            )
        return int(row["version"])

    @retrying
    def changes_since(
        self, organization_id: str, environment: str, version: int, *, max_rows: int
    ) -> KnowledgeChanges | None:
        """The rows added and ids deleted after ``version``, read in one snapshot.

        ``None`` when the change log cannot bring ``version`` up to date by itself:
        it is older than the log keeps (a re-embed or pruned tombstones), newer than
        the store (the database was replaced), or more than ``max_rows`` rows were
        added since (loading the whole workspace is then the better deal).
        """
        scope = [organization_id, environment]
        with self.db.snapshot() as conn:
            state = conn.execute(
                f"SELECT dimension, version, log_floor FROM knowledge_state WHERE {_WORKSPACE}",
                scope,
            ).fetchone()
            current = 0 if state is None else int(state["version"])
            if state is None or version == current:
                empty = np.empty(0, dtype=np.int64)
                return KnowledgeChanges(current, empty, np.empty((0, 0), dtype=np.float32), empty)
            if version < int(state["log_floor"]) or version > current:
                return None
            dimension = int(state["dimension"])
            rows = conn.execute(
                "SELECT id, count FROM vector_segments"
                f" WHERE {_WORKSPACE} AND version > %s ORDER BY id",
                [*scope, version],
            ).fetchall()
            total = sum(int(row["count"]) for row in rows)
            if total > max_rows:
                return None
            ids = np.empty(total, dtype="<i8")
            vectors = np.empty((total, dimension), dtype="<f4")
            start = 0
            with conn.cursor(binary=True) as cursor:
                for row in rows:
                    end = start + int(row["count"])
                    cursor.execute(
                        "SELECT ids, vectors FROM vector_segments WHERE id = %s", [row["id"]]
                    )
                    found = cursor.fetchone()
                    assert found is not None
                    ids[start:end] = np.frombuffer(found["ids"], dtype="<i8")
                    vectors[start:end] = np.frombuffer(found["vectors"], dtype="<f4").reshape(
                        -1, dimension
                    )
                    start = end
                cursor.execute(
                    f"SELECT ids FROM knowledge_tombstones WHERE {_WORKSPACE} AND version > %s",
                    [*scope, version],
                )
                deleted = [np.frombuffer(row["ids"], dtype="<i8") for row in cursor.fetchall()]
        gone = np.concatenate(deleted) if deleted else np.empty(0, dtype=np.int64)
        return KnowledgeChanges(current, ids, vectors, gone.astype(np.int64, copy=False))

    @retrying
    def get_document(
        self, organization_id: str, environment: str, document_id: str
    ) -> Document | None:
        """A document of this workspace, or ``None``."""
        with self.db.read() as conn:
            row = conn.execute(
                f"SELECT {_DOCUMENT_COLUMNS} FROM documents WHERE id = %s AND {_WORKSPACE}",
                [document_id, organization_id, environment],
            ).fetchone()
        return _document(row) if row else None

    @retrying
    def list_documents(
        self, organization_id: str, environment: str, *, limit: int, starting_after: str | None
    ) -> tuple[list[Document], bool]:
        """A page of documents, newest first."""
        with self.db.snapshot() as conn:
            rows, more = page_rows(
                conn,
                "documents",
                scope=(organization_id, environment),
                limit=limit,
                starting_after=starting_after,
            )
        return [_document(row) for row in rows], more

    @retrying
    def delete_document(self, organization_id: str, environment: str, document_id: str) -> bool:
        """Delete a document, its chunks and vectors in one transaction; bumps the version."""
        scope = [document_id, organization_id, environment]
        with self.db.write() as conn:
            cursor = conn.execute(f"DELETE FROM documents WHERE id = %s AND {_WORKSPACE}", scope)
            if cursor.rowcount == 0:
                return False
            conn.execute("DELETE FROM chunks WHERE document_id = %s", [document_id])
            conn.execute("DELETE FROM ingest_jobs WHERE document_id = %s", [document_id])
            version = self._bump(conn, organization_id, environment)
            with conn.cursor(binary=True) as deleting:
                deleting.execute(
                    f"DELETE FROM vector_segments WHERE document_id = %s AND {_WORKSPACE}"
                    " RETURNING ids",
                    scope,
                )
                gone = b"".join(bytes(row["ids"]) for row in deleting.fetchall())
            if gone:
                conn.execute(
                    "INSERT INTO knowledge_tombstones (organization_id, environment, version,"
                    " ids) VALUES (%s, %s, %s, %b)",
                    [organization_id, environment, version, gone],
                )
            floor = version - TOMBSTONE_VERSIONS
            if floor > 0:  # forget old deletions; caches further behind reload
                conn.execute(
                    f"DELETE FROM knowledge_tombstones WHERE {_WORKSPACE} AND version <= %s",
                    [organization_id, environment, floor],
                )
                conn.execute(
                    "UPDATE knowledge_state SET log_floor = GREATEST(log_floor, %s)"
                    f" WHERE {_WORKSPACE}",
                    [floor, organization_id, environment],
                )
            if self.vector_rows:
                conn.execute(
                    f"DELETE FROM vector_rows WHERE document_id = %s AND {_WORKSPACE}", scope
                )
        return True

    @retrying
    def _insert_term_counts(
        self,
        conn: Conn,
        organization_id: str,
        environment: str,
        document_id: str,
        sentences: int,
        stems: Mapping[str, int],
    ) -> None:
        """A document's sentence count (``term = ''``) and per-stem sentence counts, in
        the transaction that stores its chunks; they leave with it (foreign key)."""
        rows = [(document_id, organization_id, environment, "", sentences)] + [
            (document_id, organization_id, environment, stem, count)
            for stem, count in stems.items()
            if stem and count > 0
        ]
        with conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO term_counts (document_id, organization_id, environment, term,"
                " sentences) VALUES (%s, %s, %s, %s, %s)",
                rows,
            )

    @retrying
    def term_counts(
        self, organization_id: str, environment: str, stems: Sequence[str]
    ) -> tuple[int, dict[str, int]]:
        """The workspace's sentences and, per stem of ``stems``, how many hold it
        (stems no sentence holds are left out): sums over its documents' counts."""
        wanted = sorted({stem for stem in stems if stem})
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT term, SUM(sentences) AS total FROM term_counts"
                f" WHERE {_WORKSPACE} AND term = ANY(%s) GROUP BY term",
                [organization_id, environment, ["", *wanted]],
            ).fetchall()
        found = {row["term"]: int(row["total"]) for row in rows}
        return found.pop("", 0), found

    @retrying
    def get_chunks(self, chunk_ids: Sequence[int]) -> dict[int, StoredChunk]:
        """Chunks by id (with their document's source); missing ids are left out."""
        if not chunk_ids:
            return {}
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT chunks.id, chunks.document_id, chunks.text, chunks.pages,"
                " chunks.page_offsets, documents.source FROM chunks"
                " JOIN documents ON documents.id = chunks.document_id"
                " WHERE chunks.id = ANY(%s)",
                [[int(i) for i in chunk_ids]],
            ).fetchall()
        return {
            int(row["id"]): StoredChunk(
                int(row["id"]),
                row["document_id"],
                row["source"],
                row["text"],
                json.loads(row["pages"]),
                json.loads(row["page_offsets"]),
            )
            for row in rows
        }

    def iter_chunk_texts(
        self, organization_id: str, environment: str
    ) -> Iterator[tuple[str, list[int], list[str]]]:
        """``(document_id, chunk ids, chunk texts)`` per document, for re-embedding.

        A generator cannot be retried as a whole: each of its reads is a retried method.
        """
        for document_id in self._document_ids(organization_id, environment):
            yield document_id, *self._chunk_texts(document_id)

    @retrying
    def _document_ids(self, organization_id: str, environment: str) -> list[str]:
        with self.db.read() as conn:
            rows = conn.execute(
                f"SELECT id FROM documents WHERE {_WORKSPACE} ORDER BY seq",
                [organization_id, environment],
            ).fetchall()
        return [row["id"] for row in rows]

    @retrying
    def _chunk_texts(self, document_id: str) -> tuple[list[int], list[str]]:
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT id, text FROM chunks WHERE document_id = %s ORDER BY ordinal",
                [document_id],
            ).fetchall()
        return [int(row["id"]) for row in rows], [row["text"] for row in rows]

    # background ingestion -------------------------------------------------------------

    @retrying
    def insert_processing_document(
        self,
        organization_id: str,
        environment: str,
        document: Document,
        *,
        kind: str,
        filename: str,
        content_type: str | None,
        data: bytes,
        now: float,
    ) -> None:
        """Store a ``processing`` document and its job (the raw upload) atomically."""
        with self.db.write() as conn:
            self._insert_document_row(conn, organization_id, environment, document)
            conn.execute(
                "INSERT INTO ingest_jobs (document_id, organization_id, environment, kind,"
                " filename, content_type, data, created_at)"
                " VALUES (%s, %s, %s, %s, %s, %s, %b, %s)",
                [
                    document.id,
                    organization_id,
                    environment,
                    kind,
                    filename,
                    content_type,
                    data,
                    now,
                ],
            )

    @retrying
    def claim_ingest_job(self, *, now: float, lease_seconds: float) -> IngestJob | None:
        """Lease a job nobody holds (or whose lease ran out), on any node, fairly.

        Fair across workspaces: the oldest job of the workspace with the fewest jobs
        leased right now (by any node), then with the fewest jobs queued, so one
        tenant's queue of slow uploads cannot starve another's, even with one worker.
        ``FOR UPDATE SKIP LOCKED``: two nodes claiming at once take different jobs.
        The claim counts as an attempt; the lease lasts ``lease_seconds``.
        """
        with self.db.write() as conn:
            job = conn.execute(
                "WITH load AS (SELECT organization_id, environment, COUNT(*) AS jobs,"
                " COUNT(*) FILTER (WHERE leased_until > %s) AS leased FROM ingest_jobs"
                " GROUP BY organization_id, environment),"
                " next AS (SELECT q.document_id FROM ingest_jobs q JOIN load l"
                " ON l.organization_id = q.organization_id AND l.environment = q.environment"
                " WHERE q.leased_until IS NULL OR q.leased_until <= %s"
                " ORDER BY l.leased, l.jobs, q.created_at LIMIT 1 FOR UPDATE OF q SKIP LOCKED)"
                " UPDATE ingest_jobs j SET leased_until = %s, attempts = j.attempts + 1"
                " FROM next WHERE j.document_id = next.document_id"
                " RETURNING j.document_id, j.organization_id, j.environment, j.kind,"
                " j.filename, j.content_type, j.attempts",
                [now, now, now + lease_seconds],
            ).fetchone()
        if job is None:
            return None
        return IngestJob(
            document_id=job["document_id"],
            organization_id=job["organization_id"],
            environment=job["environment"],
            kind=job["kind"],
            filename=job["filename"],
            content_type=job["content_type"],
            attempts=int(job["attempts"]),
        )

    @retrying
    def ingest_job_data(self, document_id: str) -> bytes | None:
        """The raw upload of a job, or ``None`` if the job is gone."""
        with self.db.read() as conn, conn.cursor(binary=True) as cursor:
            cursor.execute("SELECT data FROM ingest_jobs WHERE document_id = %s", [document_id])
            row = cursor.fetchone()
        return None if row is None else bytes(row["data"])

    @retrying
    def renew_ingest_job(self, document_id: str, *, until: float) -> bool:
        """Extend a job's lease; ``False`` when the job is gone (its document was deleted)."""
        with self.db.write() as conn:
            cursor = conn.execute(
                "UPDATE ingest_jobs SET leased_until = %s WHERE document_id = %s",
                [until, document_id],
            )
        return cursor.rowcount > 0

    @retrying
    def release_ingest_job(self, document_id: str) -> None:
        """Give a job back unfinished (shutdown): the claim does not count as an attempt."""
        with self.db.write() as conn:
            conn.execute(
                "UPDATE ingest_jobs SET leased_until = NULL,"
                " attempts = GREATEST(attempts - 1, 0) WHERE document_id = %s",
                [document_id],
            )

    @retrying
    def complete_document(
        self,
        organization_id: str,
        environment: str,
        document: Document,
        chunks: Sequence[tuple[str, list[int], list[int]]],
        embedder: str,
        vectors: npt.NDArray[np.float32],
        keep: npt.NDArray[np.bool_],
        term_counts: tuple[int, Mapping[str, int]] | None = None,
    ) -> list[int] | None:
        """Make a ``processing`` document ``ready`` with its chunks and vectors, atomically.

        ``None`` (and nothing written) if it is no longer processing (deleted meanwhile,
        or finished by another node): the conditional UPDATE's row lock decides.
        """
        with self.db.write() as conn:
            cursor = conn.execute(
                "UPDATE documents SET status = 'ready', last_error = NULL, content_type = %s,"
                " pages = %s, chunks = %s WHERE id = %s AND organization_id = %s"
                " AND environment = %s AND status = 'processing'",
                [
                    document.content_type,
                    document.pages,
                    document.chunks,
                    document.id,
                    organization_id,
                    environment,
                ],
            )
            if cursor.rowcount == 0:
                return None
            conn.execute("DELETE FROM ingest_jobs WHERE document_id = %s", [document.id])
            ids = self._insert_chunks(
                conn, organization_id, environment, document, chunks, embedder, vectors, keep
            )
            if term_counts is not None:
                self._insert_term_counts(
                    conn, organization_id, environment, document.id, *term_counts
                )
            return ids

    @retrying
    def fail_document(
        self, organization_id: str, environment: str, document_id: str, error: Problem
    ) -> bool:
        """Mark a ``processing`` document ``failed`` with ``error`` and drop its job."""
        with self.db.write() as conn:
            cursor = conn.execute(
                "UPDATE documents SET status = 'failed', last_error = %s WHERE id = %s"
                " AND organization_id = %s AND environment = %s AND status = 'processing'",
                [error.model_dump_json(), document_id, organization_id, environment],
            )
            conn.execute("DELETE FROM ingest_jobs WHERE document_id = %s", [document_id])
        return cursor.rowcount > 0

    # search inside PostgreSQL ----------------------------------------------------------

    @retrying
    def search_vectors(
        self,
        organization_id: str,
        environment: str,
        query: npt.NDArray[np.float32],
        k: int,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """The ``k`` chunk ids most cosine-similar to the unit vector ``query``, best first.

        Rows are unit length, so cosine is the inner product (pgvector's ``<#>`` is its
        negation). PostgreSQL ranks the workspace's rows at half precision and returns
        ``RESCORE`` x ``k`` candidates with their float32 rows; those are re-scored
        exactly here and ordered by score, then id, as the in-memory index orders them.
        The ranking is an exact scan of the workspace's rows (no approximate index).
        """
        if not self.vector_rows:
            raise RuntimeError("vector_search='pgvector' needs the store opened with it")
        q = np.ascontiguousarray(query, dtype=np.float32)
        dimension = int(q.shape[0])
        literal = "[" + ",".join(repr(float(x)) for x in q) + "]"
        candidates = max(k * RESCORE, k + 16)
        with self.db.read() as conn:
            rows = conn.execute(
                f"SELECT chunk_id, exact FROM vector_rows WHERE {_WORKSPACE}"
                " ORDER BY embedding <#> %s::halfvec LIMIT %s",
                [organization_id, environment, literal, candidates],
            ).fetchall()
        if not rows:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        ids = np.fromiter((row["chunk_id"] for row in rows), dtype=np.int64, count=len(rows))
        matrix = np.frombuffer(b"".join(row["exact"] for row in rows), dtype="<f4")
        scores = matrix.reshape(len(rows), dimension) @ q
        order = np.lexsort((ids, -scores))[:k]
        return ids[order], scores[order].astype(np.float32)
