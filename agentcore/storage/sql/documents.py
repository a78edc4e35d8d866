"""Documents, their chunks and background ingestion jobs, in SQL.

A document, its chunks, its vector segments and its sentence counts commit in one
transaction; so does its deletion, which leaves a tombstone in the change log.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import fields
from types import EllipsisType
from typing import Any

import numpy as np
import numpy.typing as npt

from agentcore._ids import isoformat
from agentcore.events import Event
from agentcore.schema import Document, DocumentAccess, Problem
from agentcore.storage.base import KnowledgeStore, WebhookStore
from agentcore.storage.records import (
    Chunks,
    DocumentChanges,
    DocumentRow,
    IngestJob,
    StaleEmbedder,
    StoredChunk,
    TermCounts,
    Vectors,
    WrittenDocument,
)
from agentcore.storage.sql.database import Connection, Cursor, idempotent
from agentcore.storage.sql.queries import (
    CHECKED_VERSION,
    WORKSPACE,
    find_row,
    insert_rows,
    marks,
    page,
    read_row,
    read_rows,
    write,
)
from agentcore.storage.sql.terms import TermTables

_ID_BATCH = 1_000  # ids per IN (...) list: far below either database's parameter limit
_CHUNK_COLUMNS = (
    "document_id, organization_id, environment, ordinal, text, pages, page_offsets, location"
)
_CHUNK_IDS = "SELECT id FROM chunks WHERE document_id = ? ORDER BY ordinal"
_DOCUMENT_COLUMNS = (
    "id, source, content_type, pages, chunks, bytes, created_at, status, last_error, metadata,"
    " external_id, access, warnings"
)
_JOB_COLUMNS = ", ".join(field.name for field in fields(IngestJob))


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
    values["access"] = _access(values.get("access"))
    values["warnings"] = json.loads(values["warnings"]) if values.get("warnings") else []
    return Document.model_validate(values)


def _access(stored: str | None) -> DocumentAccess | None:
    return None if not stored else DocumentAccess.model_validate_json(stored)


def json_access(access: DocumentAccess | None) -> str | None:
    """An access list as stored: compact JSON, ``NULL`` for none (everyone)."""
    return None if access is None else access.model_dump_json()


def json_warnings(document: Document) -> str | None:
    """A document's warnings as stored: a compact JSON list, ``NULL`` for none."""
    if not document.warnings:
        return None
    return json.dumps([warning.model_dump(mode="json") for warning in document.warnings])


def json_object(value: dict[str, Any]) -> str | None:
    """A metadata object as stored: compact JSON (``NULL`` when empty)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False) if value else None


def parse_object(stored: str | None) -> dict[str, Any]:
    """What ``json_object`` stored, as the object again."""
    return json.loads(stored) if stored else {}


class _NotProcessing(Exception):
    """A finished job's document is no longer processing (deleted or finished meanwhile):
    its write, which had replaced an older version already, is rolled back."""


# ``WebhookStore``: its outbox's ``record_event`` (``WebhookTables``, in ``SQLStore``)
# records a document's events in the transaction that writes it
class DocumentTables(TermTables, KnowledgeStore, WebhookStore):
    """Documents, chunks and ingestion jobs (``DocumentStore``, ``IngestStore``) and the
    reads of ``IndexStore`` that name them: with the vectors and sentence counts of the
    tables it extends, every knowledge slice (``KnowledgeStore``)."""

    @idempotent
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
        workspace = (organization_id, environment)
        dimension = int(vectors.shape[1])
        replacing = document.external_id is not None
        try:
            # this thread's connection is kept until the answers are read from it
            with self.db.read():
                # a replacement reads what it deletes: not pipelined
                pipelined = self._pipelined_writes() and not replacing
                with self.db.write(pipeline=pipelined) as conn:
                    # the bump first: its row lock orders this workspace's writers, so
                    # versions commit in order, and the chunk ids drawn after it rise so
                    if replacing:
                        version = self._bump(conn, *workspace, embedder, dimension)
                        self._replace(conn, workspace, document, version)
                    else:
                        self._send_bump(conn, workspace, embedder, dimension)
                    row = self.db.deferred_rows(
                        self._insert_document_row(
                            conn, workspace, document, embedder=(embedder, dimension)
                        )
                    )
                    ids = self._write_chunks(
                        conn, workspace, document, chunks, embedder, vectors, keep, term_counts
                    )
                return WrittenDocument(ids(), int(row()[0]["seq"]))
        except self.db.integrity_error as exc:
            self._refuse_other_embedder(exc, embedder, dimension)
            # The document may be there already: this very write, sent again because
            # its COMMIT's outcome was lost (``idempotent``; never inside a transaction).
            again = None if self.db.in_transaction else self._written_before(workspace, document)
            if again is None:
                raise
            return again

    def _refuse_other_embedder(self, error: Exception, embedder: str, dimension: int) -> None:
        """Raise ``StaleEmbedder`` if a document write's ``error`` was its document's row
        getting no version: the workspace is indexed by another embedder or dimension
        (``_insert_document_row``); nothing was stored."""
        if self.db.refused_null(error) == "documents.version":
            raise StaleEmbedder(
                f"the workspace is not indexed by {embedder!r} with dimension {dimension}"
            ) from error

    def _written_before(
        self, workspace: tuple[str, str], document: Document
    ) -> WrittenDocument | None:
        """What an earlier write of this very ``document`` stored (its row in this
        workspace with the same source, size, chunk count and time), or ``None``."""
        with self.db.read() as conn:
            row = conn.execute(
                f"SELECT seq FROM documents WHERE id = ? AND {WORKSPACE} AND source = ?"
                " AND bytes = ? AND chunks = ? AND created_at = ?",
                [document.id, *workspace, document.source, document.bytes, document.chunks]
                + [isoformat(document.created_at)],
            ).fetchone()
            ids = conn.execute(_CHUNK_IDS, [document.id]).fetchall() if row else []
        return WrittenDocument([int(r["id"]) for r in ids], int(row["seq"])) if row else None

    def _insert_document_row(
        self,
        conn: Connection,
        workspace: tuple[str, str],
        document: Document,
        *,
        embedder: tuple[str, int] | None = None,
    ) -> Cursor:
        """Insert a document's row, at version 0, or (with ``embedder``: a name and a
        dimension) at the version this transaction bumped its workspace to, if the
        workspace is indexed by that embedder: else with no version, which the column
        refuses (the check a document write makes in its own transaction, instead of a
        read before it). The cursor whose row holds its ``seq``."""
        return conn.execute(
            "INSERT INTO documents (id, organization_id, environment, source, content_type,"
            " pages, chunks, bytes, created_at, status, last_error, metadata, external_id,"
            " access, warnings, version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
            f" {CHECKED_VERSION if embedder else 0}) RETURNING seq",
            [
                document.id,
                *workspace,
                document.source,
                document.content_type,
                document.pages,
                document.chunks,
                document.bytes,
                isoformat(document.created_at),
                document.status,
                document.last_error.model_dump_json() if document.last_error else None,
                json_object(document.metadata),
                document.external_id,
                json_access(document.access),
                json_warnings(document),
                *((*workspace, *embedder) if embedder else ()),
            ],
        )

    def _write_chunks(
        self,
        conn: Connection,
        workspace: tuple[str, str],
        document: Document,
        chunks: Chunks,
        embedder: str,
        vectors: Vectors,
        keep: npt.NDArray[np.bool_],
        term_counts: TermCounts | None,
    ) -> Callable[[], list[int]]:
        """Insert a document's chunks (its row is written, at the version this transaction
        bumped to), the ``keep`` rows' vectors (chunks outside it have no features: stored,
        not indexed) and the sentence counts; a function giving every chunk id, in order,
        once the transaction is over.

        Where the database gathers a segment's ids itself (``Dialect.segment_ids``) nothing
        waits for an answer: a pipelined write sends it all, and its ``COMMIT``, in one
        round trip. Else the ids are read before the segments are written.
        """
        rows = [
            (document.id, *workspace, ordinal, chunk[0], json_ints(chunk[1]), json_ints(chunk[2]))
            + (chunk[3] if len(chunk) > 3 else None,)
            for ordinal, chunk in enumerate(chunks)
        ]
        insert_rows(conn, f"INSERT INTO chunks ({_CHUNK_COLUMNS}) VALUES ({marks(8)})", rows)
        if self._gathers_segment_ids():
            self._gather_segments(conn, workspace, document.id, embedder, vectors, keep)
            found = self.db.deferred_rows(conn.execute(_CHUNK_IDS, [document.id]))
        else:  # the ids are needed now (SQLite, or a write that is not pipelined)
            listed = conn.execute(_CHUNK_IDS, [document.id]).fetchall()
            indexed = np.array([row["id"] for row in listed], np.int64)[keep]
            kept = vectors if keep.all() else vectors[keep]  # no copy of a big matrix if all kept
            self._insert_segments(conn, workspace, document.id, embedder, indexed, kept)
            found = lambda: listed  # noqa: E731
        if term_counts is not None:
            self._store_terms(conn, document.id, term_counts)
        return lambda: [int(row["id"]) for row in found()]

    def get_document(
        self, organization_id: str, environment: str, document_id: str
    ) -> Document | None:
        workspace = [organization_id, environment]
        row = find_row(self.db, "documents", document_id, workspace, _DOCUMENT_COLUMNS)
        return _document(row) if row else None

    def list_documents(
        self, organization_id: str, environment: str, *, limit: int, starting_after: str | None
    ) -> tuple[list[Document], bool]:
        workspace = (organization_id, environment)
        rows, more = page(self.db, "documents", workspace, limit, starting_after)
        return [_document(row) for row in rows], more

    def delete_document(self, organization_id: str, environment: str, document_id: str) -> bool:
        # one transaction that bumps the version; the tombstone holds the deleted vector
        # ids and the sentence counts (for the in-memory sums of ``term_counts`` in every
        # process and node)
        workspace = (organization_id, environment)
        with self.db.write() as conn:  # find_row reads in it too
            row = find_row(self.db, "documents", document_id, workspace, "seq")
            if row is None:
                return False
            version = self._bump(conn, organization_id, environment)
            self._delete_rows(conn, workspace, int(row["seq"]), document_id, version)
        return True

    def _delete_rows(
        self, conn: Connection, workspace: tuple[str, str], seq: int, document_id: str, version: int
    ) -> None:
        """Delete a document's rows (in the caller's transaction, which bumped the
        workspace to ``version``): itself, its chunks, job, vectors and sentence counts,
        leaving the tombstone of ``version`` that tells every cache what went."""
        terms = self._take_terms(conn, seq)
        conn.execute("DELETE FROM documents WHERE seq = ?", [seq])
        conn.execute("DELETE FROM chunks WHERE document_id = ?", [document_id])
        conn.execute("DELETE FROM ingest_jobs WHERE document_id = ?", [document_id])
        gone = b"".join(
            bytes(found["ids"])
            for found in conn.execute(
                f"DELETE FROM vector_segments WHERE document_id = ? AND {WORKSPACE} RETURNING ids",
                [document_id, *workspace],
            ).fetchall()
        )
        self._vectors_deleted(conn, *workspace, document_id)
        self._log_deletion(conn, *workspace, version, gone, terms)

    def _replace(
        self, conn: Connection, workspace: tuple[str, str], document: Document, version: int
    ) -> None:
        """Delete the ready document that holds ``document``'s ``external_id`` (if one
        does), in the transaction that makes ``document`` ready at ``version``: searches
        see the old version's chunks until they see the new one's."""
        older = conn.execute(
            f"SELECT seq, id FROM documents WHERE {WORKSPACE} AND external_id = ?"
            " AND status = 'ready' AND id <> ?",
            [*workspace, document.external_id, document.id],
        ).fetchall()
        for row in older:  # one at most: the unique index holds it so
            self._delete_rows(conn, workspace, int(row["seq"]), row["id"], version)

    def get_chunks(self, chunk_ids: Sequence[int]) -> dict[int, StoredChunk]:
        if not chunk_ids:
            return {}
        rows = read_rows(
            self.db,
            "SELECT chunks.id, chunks.document_id, chunks.text, chunks.pages,"
            " chunks.page_offsets, chunks.location, documents.source, documents.metadata"
            " FROM chunks"
            " JOIN documents ON documents.id = chunks.document_id"
            f" WHERE chunks.id IN ({marks(len(chunk_ids))})",
            [int(i) for i in chunk_ids],
        )
        return {
            int(row["id"]): StoredChunk(
                int(row["id"]),
                row["document_id"],
                row["source"],
                row["text"],
                json.loads(row["pages"]),
                json.loads(row["page_offsets"]),
                parse_object(row["metadata"]),
                row["location"],
            )
            for row in rows
        }

    def chunk_texts_by_id(self, chunk_ids: Sequence[int]) -> dict[int, str]:
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
        self,
        organization_id: str,
        environment: str,
        document_id: str,
        metadata: dict[str, Any] | None,
        *,
        access: DocumentAccess | None | EllipsisType = ...,
    ) -> Document | None:
        # searches in every process see it at once: their filters follow the version
        # (``documents_changed``)
        workspace = [organization_id, environment]
        changes: dict[str, str | None] = {}
        if metadata is not None:
            changes["metadata"] = json_object(metadata)
        if not isinstance(access, EllipsisType):
            changes["access"] = json_access(access)
        with self.db.write() as conn:  # find_row reads in it too
            if find_row(self.db, "documents", document_id, workspace, "seq") is None:
                return None
            # the bump first: on PostgreSQL its row lock orders this workspace's writers,
            # so each document's version commits in order (see add_vectors)
            version = self._bump(conn, organization_id, environment)
            assignments = "".join(f"{column} = ?, " for column in changes)
            row = conn.execute(
                f"UPDATE documents SET {assignments}version = ? WHERE id = ? AND {WORKSPACE}"
                f" RETURNING {_DOCUMENT_COLUMNS}",
                [*changes.values(), version, document_id, *workspace],
            ).fetchone()
        return None if row is None else _document(row)

    def documents_changed(
        self, organization_id: str, environment: str, after: int | None
    ) -> DocumentChanges:
        # what a process's filters catch up with
        scope = [organization_id, environment]
        with self.db.snapshot() as conn:  # knowledge_state reads in it too
            version = self.knowledge_state(organization_id, environment).version
            since = "" if after is None else " AND version > ?"
            rows = conn.execute(
                f"SELECT seq, id, metadata, access FROM documents WHERE {WORKSPACE}{since}",
                scope if after is None else [*scope, after],
            ).fetchall()
        return DocumentChanges(
            version,
            [
                DocumentRow(
                    int(row["seq"]),
                    row["id"],
                    parse_object(row["metadata"]),
                    json.loads(row["access"]) if row["access"] else None,
                )
                for row in rows
            ],
        )

    def iter_chunk_texts(
        self, organization_id: str, environment: str
    ) -> Iterator[tuple[str, list[int], list[str]]]:
        # one read per document (``document_ids``, ``chunk_texts``), so a workspace's
        # texts are never all in memory at once
        for document_id in self.document_ids(organization_id, environment):
            ids, texts = self.chunk_texts(document_id)
            yield document_id, ids, texts

    def document_ids(self, organization_id: str, environment: str) -> list[str]:
        """The ids of a workspace's documents, oldest first."""
        sql = f"SELECT id FROM documents WHERE {WORKSPACE} ORDER BY seq"
        return [row["id"] for row in read_rows(self.db, sql, [organization_id, environment])]

    def chunk_texts(self, document_id: str) -> tuple[list[int], list[str]]:
        """A document's chunk ids and texts, in chunk order."""
        sql = "SELECT id, text FROM chunks WHERE document_id = ? ORDER BY ordinal"
        rows = read_rows(self.db, sql, [document_id])
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
        with self.db.write() as conn:
            self._insert_document_row(conn, (organization_id, environment), document)
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

    def claim_ingest_job(
        self, *, now: float, lease_seconds: float, excluding: Collection[str] = ()
    ) -> IngestJob | None:
        # fair across workspaces so that one tenant's queue of slow uploads cannot starve
        # another's, even with one worker; two nodes claiming at once take different
        # jobs (``Dialect.lock``)
        skipped = sorted(excluding)
        skip = f" AND j.organization_id NOT IN ({', '.join('?' * len(skipped))})" if skipped else ""
        with self.db.write() as conn:
            job = conn.execute(
                "WITH load AS (SELECT organization_id, environment, COUNT(*) AS jobs,"
                " COUNT(CASE WHEN leased_until > ? THEN 1 END) AS leased FROM ingest_jobs"
                " GROUP BY organization_id, environment)"
                " UPDATE ingest_jobs SET leased_until = ?, attempts = attempts + 1"
                " WHERE document_id = (SELECT j.document_id FROM ingest_jobs j JOIN load l"
                " ON l.organization_id = j.organization_id AND l.environment = j.environment"
                f" WHERE (j.leased_until IS NULL OR j.leased_until <= ?){skip}"
                f" ORDER BY l.leased, l.jobs, j.created_at LIMIT 1{self.dialect.lock('j')})"
                f" RETURNING {_JOB_COLUMNS}",
                [now, now + lease_seconds, now, *skipped],
            ).fetchone()
        return None if job is None else IngestJob(**dict(job))

    def ingest_job_data(self, document_id: str) -> bytes | None:
        row = read_row(self.db, "SELECT data FROM ingest_jobs WHERE document_id = ?", [document_id])
        return None if row is None else bytes(row["data"])

    def renew_ingest_job(self, document_id: str, *, until: float) -> bool:
        sql = "UPDATE ingest_jobs SET leased_until = ? WHERE document_id = ?"
        return write(self.db, sql, [until, document_id]) > 0

    def release_ingest_job(self, document_id: str) -> None:
        write(
            self.db,
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
        event: Callable[[Document], Event] | None = None,
    ) -> WrittenDocument | None:
        # the conditional UPDATE decides whether the document is still processing (not
        # deleted meanwhile, nor finished by another worker), and ``event`` is recorded
        # in the same transaction: exactly when the document became ready, once.
        # Pipelined as insert_document, but its answers are read before the COMMIT is
        # sent: a connection lost in the batch is then lost before the commit, and the
        # write is run again (``retrying``), which a write that is not ``idempotent``
        # needs. Three round trips: the UPDATE, the batch, the COMMIT (four with an
        # event, whose subscriptions are read first, so nothing goes with the COMMIT).
        workspace = (organization_id, environment)
        dimension = int(vectors.shape[1])
        try:
            replacing = document.external_id is not None  # set at upload, never changed
            with self.db.write(pipeline=self._pipelined_writes() and not replacing) as conn:
                if replacing:
                    # the older version goes before this one is ready (the unique index),
                    # undone below if this one is no longer processing
                    version = self._bump(conn, *workspace, embedder, dimension)
                    self._replace(conn, workspace, document, version)
                row = conn.execute(
                    "UPDATE documents SET status = 'ready', last_error = NULL,"
                    f" content_type = ?, pages = ?, chunks = ?, warnings = ? WHERE id = ?"
                    f" AND {WORKSPACE} AND status = 'processing' RETURNING seq, metadata, access",
                    [document.content_type, document.pages, document.chunks]
                    + [json_warnings(document), document.id, *workspace],
                ).fetchone()
                if row is None and replacing:
                    raise _NotProcessing  # rolls the replacement back
                if row is None:
                    return None
                conn.execute("DELETE FROM ingest_jobs WHERE document_id = ?", [document.id])
                if not replacing:
                    # bumped only now: a document no longer processing leaves it alone
                    self._send_bump(conn, workspace, embedder, dimension)
                conn.execute(
                    f"UPDATE documents SET version = {CHECKED_VERSION} WHERE seq = ?",
                    [*workspace, embedder, dimension, row["seq"]],
                )
                # the metadata and access now stored: a PATCH while the job ran replaced
                # the job's
                stored = document.model_copy(
                    update={
                        "metadata": parse_object(row["metadata"]),
                        "access": _access(row["access"]),
                    }
                )
                if event is not None:  # before the chunks: its subscriptions are read
                    self.record_event(event(stored), now=time.time())
                ids = self._write_chunks(
                    conn, workspace, document, chunks, embedder, vectors, keep, term_counts
                )
                return WrittenDocument(ids(), int(row["seq"]), stored)
        except _NotProcessing:
            return None
        except self.db.integrity_error as exc:
            self._refuse_other_embedder(exc, embedder, dimension)
            raise

    def fail_document(
        self,
        organization_id: str,
        environment: str,
        document_id: str,
        error: Problem,
        event: Event | None = None,
    ) -> bool:
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
