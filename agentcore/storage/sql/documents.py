"""Documents, their chunks and background ingestion jobs, in SQL.

A document, its chunks, its vector segments and its sentence counts commit in one
transaction; so does its deletion, which leaves a tombstone in the change log.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from agentcore.events import Event
from agentcore.ids import isoformat
from agentcore.schema import Document, Problem
from agentcore.storage.records import (
    Chunks,
    DocumentChanges,
    DocumentRow,
    IngestJob,
    StoredChunk,
    TermCounts,
    Vectors,
    WrittenDocument,
)
from agentcore.storage.sql.database import Connection, Cursor
from agentcore.storage.sql.queries import WORKSPACE, marks, page_rows
from agentcore.storage.sql.terms import TermTables
from agentcore.storage.sql.vectors import VectorTables

_ID_BATCH = 1_000  # ids per IN (...) list: far below either database's parameter limit
_CHUNK_COLUMNS = (
    "document_id",
    "organization_id",
    "environment",
    "ordinal",
    "text",
    "pages",
    "page_offsets",
)
# the version this transaction bumped its workspace to (_send_bump), for a document row
# written in it: the filters of every process follow its metadata from that version on
_BUMPED_VERSION = f"(SELECT version FROM knowledge_state WHERE {WORKSPACE})"
_DOCUMENT_COLUMNS = (
    "id, source, content_type, pages, chunks, bytes, created_at, status, last_error, metadata"
)


def json_ints(values: list[int]) -> str:
    """``json.dumps(values)`` for a short list of ints (a chunk's pages or offsets),
    without the encoder's per-call setup; anything else goes to ``json.dumps``."""
    if all(type(value) is int for value in values):
        return "[" + ", ".join(map(str, values)) + "]"
    return json.dumps(values)


def _document(row: Any) -> Document:
    values = dict(row)
    if values["last_error"]:
        values["last_error"] = json.loads(values["last_error"])
    values["metadata"] = parse_object(values["metadata"])
    return Document.model_validate(values)


def json_object(value: dict[str, Any]) -> str | None:
    """A metadata object as stored: compact JSON (``NULL`` when empty)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False) if value else None


def parse_object(stored: str | None) -> dict[str, Any]:
    """What ``json_object`` stored, as the object again."""
    return json.loads(stored) if stored else {}


class DocumentTables(TermTables, VectorTables):
    """Documents, chunks, vectors, sentence counts and ingestion jobs (``KnowledgeStore``)."""

    if TYPE_CHECKING:  # the outbox's (``WebhookTables``), joined in the same transaction

        def record_event(
            self, event: Event, *, now: float, only_subscription: str | None = None
        ) -> int: ...

    def insert_document(
        self,
        organization_id: str,
        environment: str,
        document: Document,
        chunks: Chunks,
        embedder: str,
        vectors: Vectors,
        keep: npt.NDArray[np.bool_],
        term_counts: TermCounts | None = None,
    ) -> WrittenDocument:
        """Store a document (with its metadata), its chunks and the vectors of the
        ``keep`` rows atomically.

        Returns every chunk id in chunk order (chunk ids are the vector ids) and the
        document's ``seq``; chunks outside ``keep`` (no features, so a zero vector) are
        stored but not indexed. Bumps the version.
        """
        with self.db.write(pipeline=self._pipelined_writes()) as conn:
            # the bump first (its row lock orders this workspace's writers, so versions
            # commit in order), the document row marked with the version it bumped to;
            # both answers are read once the chunks were sent: in a pipelined write all
            # of it is one round trip, and the segment and the COMMIT a second
            bump = self.db.deferred_row(
                self._send_bump(conn, (organization_id, environment), embedder, vectors.shape[1])
            )
            row = self.db.deferred_row(
                self._insert_document_row(
                    conn, organization_id, environment, document, versioned=True
                )
            )
            return self._insert_chunks(
                conn,
                organization_id,
                environment,
                document,
                lambda: int(row()["seq"]),
                bump,
                chunks,
                embedder,
                vectors,
                keep,
                term_counts,
            )

    def _insert_document_row(
        self,
        conn: Connection,
        organization_id: str,
        environment: str,
        document: Document,
        *,
        versioned: bool = False,
    ) -> Cursor:
        """Insert a document's row (``versioned``: at the workspace's version, which
        this transaction bumped); the cursor whose row holds its ``seq``, read later: in
        a pipelined write the chunks go to the database with it, in one round trip."""
        version = _BUMPED_VERSION if versioned else "0"
        return conn.execute(
            "INSERT INTO documents (id, organization_id, environment, source, content_type,"
            " pages, chunks, bytes, created_at, status, last_error, metadata, version)"
            f" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, {version}) RETURNING seq",
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
                json_object(document.metadata),
                *((organization_id, environment) if versioned else ()),
            ],
        )

    def _insert_chunks(
        self,
        conn: Connection,
        organization_id: str,
        environment: str,
        document: Document,
        document_seq: Callable[[], int],
        bump: Callable[[], Any],
        chunks: Chunks,
        embedder: str,
        vectors: Vectors,
        keep: npt.NDArray[np.bool_],
        term_counts: TermCounts | None,
    ) -> WrittenDocument:
        """Insert the chunks, the ``keep`` rows' vectors and the sentence counts of a
        document whose row holds the version its transaction bumped to; every chunk id.
        ``bump`` gives the bump's row (``_send_bump`` with ``embedder`` and the vectors'
        dimension, checked here) and ``document_seq`` the document's ``seq``; both are
        asked once the chunks are sent (``Database.deferred_row``: in a pipelined write,
        the statements before them go to the database in the same round trip)."""
        ids = self.db.insert_ids(
            conn,
            "chunks",
            _CHUNK_COLUMNS,
            [
                (
                    document.id,
                    organization_id,
                    environment,
                    ordinal,
                    text,
                    json_ints(pages),
                    json_ints(offsets),
                )
                for ordinal, (text, pages, offsets) in enumerate(chunks)
            ],
        )
        seq = document_seq()
        dimension = int(vectors.shape[1])
        version = self._bumped(bump(), embedder, dimension)
        self._insert_segments(
            conn,
            organization_id,
            environment,
            document.id,
            embedder,
            dimension,
            version,
            np.asarray(ids, dtype=np.int64)[keep],
            vectors if keep.all() else vectors[keep],  # no copy of a big matrix if all kept
        )
        if term_counts is not None:
            self._store_terms(conn, (organization_id, environment), seq, version, term_counts)
        return WrittenDocument(ids, seq)

    def chunk_ids(self, organization_id: str, environment: str, document_id: str) -> list[int]:
        """The chunk ids of a document of this workspace."""
        with self.db.read() as conn:
            rows = conn.execute(
                f"SELECT id FROM chunks WHERE document_id = ? AND {WORKSPACE} ORDER BY id",
                [document_id, organization_id, environment],
            ).fetchall()
        return [int(row["id"]) for row in rows]

    def get_document(
        self, organization_id: str, environment: str, document_id: str
    ) -> Document | None:
        """A document of this workspace, or ``None``."""
        with self.db.read() as conn:
            row = conn.execute(
                f"SELECT {_DOCUMENT_COLUMNS} FROM documents WHERE id = ? AND {WORKSPACE}",
                [document_id, organization_id, environment],
            ).fetchone()
        return _document(row) if row else None

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

    def delete_document(self, organization_id: str, environment: str, document_id: str) -> bool:
        """Delete a document, its chunks, vectors and any job in one transaction; bumps the
        version. Its tombstone holds the deleted vector ids and its sentence counts (for
        the in-memory sums of ``term_counts`` in every process and node)."""
        scope = [document_id, organization_id, environment]
        with self.db.write() as conn:
            row = conn.execute(
                f"SELECT seq FROM documents WHERE id = ? AND {WORKSPACE}", scope
            ).fetchone()
            if row is None:
                return False
            terms = self._take_terms(conn, row["seq"])
            conn.execute("DELETE FROM documents WHERE seq = ?", [row["seq"]])
            conn.execute("DELETE FROM chunks WHERE document_id = ?", [document_id])
            conn.execute("DELETE FROM ingest_jobs WHERE document_id = ?", [document_id])
            version = self._bump(conn, organization_id, environment)
            gone = b"".join(
                bytes(found["ids"])
                for found in conn.execute(
                    f"DELETE FROM vector_segments WHERE document_id = ? AND {WORKSPACE}"
                    " RETURNING ids",
                    scope,
                ).fetchall()
            )
            self._vectors_deleted(conn, organization_id, environment, document_id)
            self._log_deletion(conn, organization_id, environment, version, gone, terms)
        return True

    def get_chunks(self, chunk_ids: Sequence[int]) -> dict[int, StoredChunk]:
        """Chunks by id (with their document's source); missing ids are left out."""
        if not chunk_ids:
            return {}
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT chunks.id, chunks.document_id, chunks.text, chunks.pages,"
                " chunks.page_offsets, documents.source, documents.metadata FROM chunks"
                " JOIN documents ON documents.id = chunks.document_id"
                f" WHERE chunks.id IN ({marks(len(chunk_ids))})",
                [int(i) for i in chunk_ids],
            ).fetchall()
        return {
            int(row["id"]): StoredChunk(
                int(row["id"]),
                row["document_id"],
                row["source"],
                row["text"],
                json.loads(row["pages"]),
                json.loads(row["page_offsets"]),
                parse_object(row["metadata"]),
            )
            for row in rows
        }

    def chunk_texts_by_id(self, chunk_ids: Sequence[int]) -> dict[int, str]:
        """The texts of these chunks (missing ids are left out), read in batches."""
        found: dict[int, str] = {}
        wanted = [int(i) for i in chunk_ids]
        with self.db.snapshot() as conn:
            for start in range(0, len(wanted), _ID_BATCH):
                batch = wanted[start : start + _ID_BATCH]
                rows = conn.execute(
                    f"SELECT id, text FROM chunks WHERE id IN ({marks(len(batch))})", batch
                ).fetchall()
                found.update((int(row["id"]), row["text"]) for row in rows)
        return found

    def update_metadata(
        self, organization_id: str, environment: str, document_id: str, metadata: dict[str, Any]
    ) -> Document | None:
        """Replace a document's metadata; bumps the version (searches in every process
        see it at once: their filters follow ``documents_changed``). ``None`` if the
        document is not in this workspace."""
        scope = [document_id, organization_id, environment]
        with self.db.write() as conn:
            found = conn.execute(
                f"SELECT seq FROM documents WHERE id = ? AND {WORKSPACE}", scope
            ).fetchone()
            if found is None:
                return None
            # the bump first: on PostgreSQL its row lock orders this workspace's writers,
            # so each document's version commits in order (see add_vectors)
            version = self._bump(conn, organization_id, environment)
            row = conn.execute(
                f"UPDATE documents SET metadata = ?, version = ? WHERE id = ? AND {WORKSPACE}"
                f" RETURNING {_DOCUMENT_COLUMNS}",
                [json_object(metadata), version, *scope],
            ).fetchone()
        return None if row is None else _document(row)

    def documents_changed(
        self, organization_id: str, environment: str, after: int | None
    ) -> DocumentChanges:
        """The documents written after version ``after`` (stored ready, completed, or
        given new metadata; ``None``: every document) and the workspace's version, read
        in one snapshot: what a process's filters catch up with."""
        scope = [organization_id, environment]
        with self.db.snapshot() as conn:
            state = conn.execute(
                f"SELECT version FROM knowledge_state WHERE {WORKSPACE}", scope
            ).fetchone()
            since = "" if after is None else " AND version > ?"
            rows = conn.execute(
                f"SELECT seq, id, metadata FROM documents WHERE {WORKSPACE}{since}",
                scope if after is None else [*scope, after],
            ).fetchall()
        return DocumentChanges(
            0 if state is None else int(state["version"]),
            [
                DocumentRow(int(row["seq"]), row["id"], parse_object(row["metadata"]))
                for row in rows
            ],
        )

    def iter_chunk_texts(
        self, organization_id: str, environment: str
    ) -> Iterator[tuple[str, list[int], list[str]]]:
        """``(document_id, chunk ids, chunk texts)`` per document, for re-embedding.

        Each document is one read (``document_ids``, ``chunk_texts``), so a workspace's
        texts are never all in memory at once.
        """
        for document_id in self.document_ids(organization_id, environment):
            ids, texts = self.chunk_texts(document_id)
            yield document_id, ids, texts

    def document_ids(self, organization_id: str, environment: str) -> list[str]:
        """The ids of a workspace's documents, oldest first."""
        with self.db.read() as conn:
            rows = conn.execute(
                f"SELECT id FROM documents WHERE {WORKSPACE} ORDER BY seq",
                [organization_id, environment],
            ).fetchall()
        return [row["id"] for row in rows]

    def chunk_texts(self, document_id: str) -> tuple[list[int], list[str]]:
        """A document's chunk ids and texts, in chunk order."""
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT id, text FROM chunks WHERE document_id = ? ORDER BY ordinal",
                [document_id],
            ).fetchall()
        return [int(row["id"]) for row in rows], [row["text"] for row in rows]

    # background ingestion ------------------------------------------------------

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
            self.db.insert_with_blob(
                conn,
                "ingest_jobs",
                {
                    "document_id": document.id,
                    "organization_id": organization_id,
                    "environment": environment,
                    "kind": kind,
                    "filename": filename,
                    "content_type": content_type,
                    "created_at": now,
                },
                "data",
                data,
            )

    def claim_ingest_job(self, *, now: float, lease_seconds: float) -> IngestJob | None:
        """Lease a job that nobody holds (or whose lease ran out), atomically, fairly.

        Fair across workspaces: the oldest job of the workspace with the fewest jobs
        leased right now (by any process or node), then with the fewest jobs queued, so
        one tenant's queue of slow uploads cannot starve another's, even with one
        worker. Two nodes claiming at once take different jobs (``Dialect.lock``). The
        claim counts as an attempt; the lease lasts ``lease_seconds``.
        """
        with self.db.write() as conn:
            job = conn.execute(
                "WITH load AS (SELECT organization_id, environment, COUNT(*) AS jobs,"
                " COUNT(CASE WHEN leased_until > ? THEN 1 END) AS leased FROM ingest_jobs"
                " GROUP BY organization_id, environment)"
                " UPDATE ingest_jobs SET leased_until = ?, attempts = attempts + 1"
                " WHERE document_id = (SELECT j.document_id FROM ingest_jobs j JOIN load l"
                " ON l.organization_id = j.organization_id AND l.environment = j.environment"
                " WHERE j.leased_until IS NULL OR j.leased_until <= ?"
                f" ORDER BY l.leased, l.jobs, j.created_at LIMIT 1{self.dialect.lock('j')})"
                " RETURNING document_id, organization_id, environment, kind, filename,"
                " content_type, attempts",
                [now, now + lease_seconds, now],
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

    def ingest_job_data(self, document_id: str) -> bytes | None:
        """The raw upload of a job, or ``None`` if the job is gone."""
        with self.db.read() as conn:
            row = conn.execute(
                "SELECT data FROM ingest_jobs WHERE document_id = ?", [document_id]
            ).fetchone()
        return None if row is None else bytes(row["data"])

    def renew_ingest_job(self, document_id: str, *, until: float) -> bool:
        """Extend a job's lease; ``False`` when the job is gone (its document was deleted)."""
        with self.db.write() as conn:
            cursor = conn.execute(
                "UPDATE ingest_jobs SET leased_until = ? WHERE document_id = ?",
                [until, document_id],
            )
        return cursor.rowcount > 0

    def release_ingest_job(self, document_id: str) -> None:
        """Give a job back unfinished (shutdown): the claim does not count as an attempt."""
        with self.db.write() as conn:
            conn.execute(
                "UPDATE ingest_jobs SET leased_until = NULL,"
                f" attempts = {self.dialect.greatest}(attempts - 1, 0) WHERE document_id = ?",
                [document_id],
            )

    def complete_document(
        self,
        organization_id: str,
        environment: str,
        document: Document,
        chunks: Chunks,
        embedder: str,
        vectors: Vectors,
        keep: npt.NDArray[np.bool_],
        term_counts: TermCounts | None = None,
        event: Event | None = None,
    ) -> WrittenDocument | None:
        """Make a ``processing`` document ``ready`` with its chunks and vectors, atomically.

        Sets its ``content_type``, ``pages`` and ``chunks`` from ``document`` and drops
        its job. ``None`` (and nothing written) if the document is no longer processing
        (deleted meanwhile, or finished by another worker): the conditional UPDATE decides.
        ``event`` (its ``document.ready``) is recorded in the same transaction, so it
        is recorded exactly when the document became ready: once.
        """
        with self.db.write() as conn:
            row = conn.execute(
                "UPDATE documents SET status = 'ready', last_error = NULL, content_type = ?,"
                f" pages = ?, chunks = ? WHERE id = ? AND {WORKSPACE} AND status = 'processing'"
                " RETURNING seq",
                [
                    document.content_type,
                    document.pages,
                    document.chunks,
                    document.id,
                    organization_id,
                    environment,
                ],
            ).fetchone()
            if row is None:
                return None
            conn.execute("DELETE FROM ingest_jobs WHERE document_id = ?", [document.id])
            seq = int(row["seq"])
            # bumped only now: a document no longer processing leaves the version alone
            bump = self.db.deferred_row(
                self._send_bump(conn, (organization_id, environment), embedder, vectors.shape[1])
            )
            conn.execute(
                f"UPDATE documents SET version = {_BUMPED_VERSION} WHERE seq = ?",
                [organization_id, environment, seq],
            )
            written = self._insert_chunks(
                conn,
                organization_id,
                environment,
                document,
                lambda: seq,
                bump,
                chunks,
                embedder,
                vectors,
                keep,
                term_counts,
            )
            if event is not None:
                self.record_event(event, now=time.time())
            return written

    def fail_document(
        self,
        organization_id: str,
        environment: str,
        document_id: str,
        error: Problem,
        event: Event | None = None,
    ) -> bool:
        """Mark a ``processing`` document ``failed`` with ``error`` and drop its job;
        whether it was processing. ``event`` (its ``document.failed``) is recorded in
        the same transaction when it was."""
        with self.db.write() as conn:
            cursor = conn.execute(
                "UPDATE documents SET status = 'failed', last_error = ?"
                f" WHERE id = ? AND {WORKSPACE} AND status = 'processing'",
                [error.model_dump_json(), document_id, organization_id, environment],
            )
            failed = cursor.rowcount > 0
            conn.execute("DELETE FROM ingest_jobs WHERE document_id = ?", [document_id])
            if failed and event is not None:
                self.record_event(event, now=time.time())
        return failed
