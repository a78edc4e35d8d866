"""SQLite storage of documents, chunks and vector segments (whole buffers, never rows).

Writes stay raw SQL: a document, its chunks and its vector blobs commit in one
transaction, and vectors move as whole buffers through incremental blob I/O, which
sqlite-utils' table API does not offer.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from agentcore.ids import isoformat
from agentcore.schema import Document, Problem
from agentcore.storage.records import (
    IngestJob,
    KnowledgeChanges,
    KnowledgeState,
    StaleEmbedder,
    StoredChunk,
    segment_arrays,
)
from agentcore.storage.sqlite.connection import CACHE_LIMIT, Database, first_row, page_rows

_WORKSPACE = "organization_id = ? AND environment = ?"
SEGMENT_ROWS = 65_536  # ~100 MB of float32 at d=384: far below SQLite's 1 GB blob limit
# SQLite copies a bound blob: segments of at most this many bytes keep that copy small
SEGMENT_BYTES = 64 << 20
# Versions of deletions the change log keeps; a cache further behind reloads the workspace.
TOMBSTONE_VERSIONS = 10_000


BLOB_CHUNK = 8 << 20  # bytes per blob read: big enough to be fast, small enough to reuse


def _read_blob(conn: sqlite3.Connection, rowid: int, column: str, into: npt.NDArray[Any]) -> None:
    """Copy a vector_segments blob into ``into`` (whose byte size must match it)."""
    out = into.data.cast("B")
    with conn.blobopen("vector_segments", column, rowid, readonly=True) as blob:
        if len(blob) != len(out):
            raise ValueError(f"segment {rowid} {column}: {len(blob)} bytes, expected {len(out)}")
        for start in range(0, len(out), BLOB_CHUNK):
            piece = blob.read(BLOB_CHUNK)
            out[start : start + len(piece)] = piece


def json_ints(values: list[int]) -> str:
    """``json.dumps(values)`` for a short list of ints (a chunk's pages or offsets),
    without the encoder's per-call setup; anything else goes to ``json.dumps``."""
    if all(type(value) is int for value in values):
        return "[" + ", ".join(map(str, values)) + "]"
    return json.dumps(values)


def pack_stems(stems: Mapping[str, int]) -> str:
    """A document's per-stem sentence counts as stored: ``"stem count"`` lines (stems
    with no sentence, and the empty stem, left out)."""
    return "\n".join([f"{stem} {count}" for stem, count in stems.items() if stem and count > 0])


def unpack_stems(packed: str) -> Iterator[tuple[str, int]]:
    """The ``(stem, count)`` pairs ``pack_stems`` wrote. A line that is not one (a
    damaged row) is skipped: word rarity is a hint, and chat must not fail on it."""
    if not packed:
        return
    for line in packed.split("\n"):
        stem, _, count = line.rpartition(" ")
        if stem and count.isascii() and count.isdigit():
            yield stem, int(count)


class TermSums:
    """One workspace's sentence counts summed over its documents, at a store version."""

    def __init__(self, version: int) -> None:
        self.version = version
        self.sentences = 0
        self.counts: dict[str, int] = {}

    def add(self, sentences: int, packed: str, sign: int) -> None:
        """Add (``sign=1``) or take away (``-1``) one document's counts."""
        self.sentences += sign * sentences
        counts = self.counts
        for stem, count in unpack_stems(packed):
            total = counts.get(stem, 0) + sign * count
            if total:
                counts[stem] = total
            else:
                del counts[stem]


class TermSumsCache:
    """The ``TermSums`` of each workspace this process asked about, behind one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: dict[tuple[str, str], TermSums] = {}


def _document(row: sqlite3.Row | dict[str, Any]) -> Document:
    values = dict(row)
    if values.get("last_error"):
        values["last_error"] = json.loads(values["last_error"])
    return Document.model_validate(values)


class KnowledgeStore:
    """Documents, chunks and vectors of each workspace."""

    db: Database
    _term_sums: TermSumsCache

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

        Returns every chunk id (chunk ids are the vector ids); chunks outside ``keep``
        (no features, so a zero vector) are stored but not indexed. Bumps the version.
        """
        with self.db.write() as conn:
            seq = self._insert_document_row(conn, organization_id, environment, document)
            ids, version = self._insert_chunks(
                conn, organization_id, environment, document, chunks, embedder, vectors, keep
            )
            if term_counts is not None:
                self._insert_term_counts(
                    conn, organization_id, environment, seq, version, *term_counts
                )
            return ids

    def _insert_document_row(
        self, conn: sqlite3.Connection, organization_id: str, environment: str, document: Document
    ) -> int:
        """Insert a document's row; its ``seq``."""
        cursor = conn.execute(
            "INSERT INTO documents (id, organization_id, environment, source, content_type,"
            " pages, chunks, bytes, created_at, status, last_error)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
        return int(cursor.lastrowid or 0)

    def _insert_chunks(
        self,
        conn: sqlite3.Connection,
        organization_id: str,
        environment: str,
        document: Document,
        chunks: Sequence[tuple[str, list[int], list[int]]],
        embedder: str,
        vectors: npt.NDArray[np.float32],
        keep: npt.NDArray[np.bool_],
    ) -> tuple[list[int], int]:
        """Insert the chunks and the ``keep`` rows' vectors; every chunk id and the
        workspace version this write took."""
        ids: list[int] = []
        for ordinal, (text, pages, offsets) in enumerate(chunks):
            cursor = conn.execute(
                "INSERT INTO chunks (document_id, organization_id, environment, ordinal,"
                " text, pages, page_offsets) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    document.id,
                    organization_id,
                    environment,
                    ordinal,
                    text,
                    json_ints(pages),
                    json_ints(offsets),
                ],
            )
            ids.append(int(cursor.lastrowid or 0))
        version = self._append_vectors(
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
        return ids, version

    def chunk_ids(self, organization_id: str, environment: str, document_id: str) -> list[int]:
        """The chunk ids of a document of this workspace."""
        with self.db.read() as conn:
            rows = self.db.table(conn, "chunks").rows_where(
                f"document_id = ? AND {_WORKSPACE}",
                [document_id, organization_id, environment],
                select="id",
            )
            return [row["id"] for row in rows]  # read inside the with: the generator is lazy

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
        """Append vectors as whole-buffer segments and bump the workspace version."""
        with self.db.write() as conn:
            self._append_vectors(
                conn, organization_id, environment, document_id, embedder, dimension, ids, vectors
            )

    def _append_vectors(
        self,
        conn: sqlite3.Connection,
        organization_id: str,
        environment: str,
        document_id: str | None,
        embedder: str,
        dimension: int,
        ids: npt.NDArray[np.int64],
        vectors: npt.NDArray[np.float32],
        *,
        check: bool = False,
    ) -> int:
        """``add_vectors`` in the caller's transaction; the version it bumped to.
        ``check``: raise ``StaleEmbedder`` if the workspace has another embedder or
        dimension (the caller's transaction then rolls back)."""
        ids, vectors = segment_arrays(ids, vectors, dimension)
        version = self._bump(conn, organization_id, environment, embedder, dimension, check=check)
        rows = max(1, min(SEGMENT_ROWS, SEGMENT_BYTES // (4 * dimension)))
        for start in range(0, len(ids), rows):
            part = slice(start, start + rows)
            conn.execute(
                "INSERT INTO vector_segments (organization_id, environment, document_id,"
                " embedder, dimension, count, ids, vectors, version)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    organization_id,
                    environment,
                    document_id,
                    embedder,
                    dimension,
                    len(ids[part]),
                    # buffers, not bytes: no second copy of a large document's vectors
                    ids[part].data.cast("B"),
                    vectors[part].data.cast("B"),
                    version,
                ],
            )
        return version

    def load_vectors(
        self, organization_id: str, environment: str, dimension: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """Every vector of a workspace as one id array and one contiguous float32 matrix.

        The segments' blobs are read with incremental blob I/O straight into the
        preallocated arrays, inside one read transaction (a consistent snapshot):
        one copy out of the database, no per-row Python and no intermediate buffers.
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
            for row in rows:
                end = start + row["count"]
                _read_blob(conn, row["id"], "ids", ids[start:end])
                _read_blob(conn, row["id"], "vectors", vectors[start:end])
                start = end
        return ids, vectors

    def count_vectors(self, organization_id: str, environment: str) -> int:
        """How many vectors a workspace stores."""
        with self.db.read() as conn:
            row = conn.execute(
                f"SELECT COALESCE(SUM(count), 0) FROM vector_segments WHERE {_WORKSPACE}",
                [organization_id, environment],
            ).fetchone()
        return int(row[0])

    def replace_all_vectors(
        self,
        organization_id: str,
        environment: str,
        embedder: str,
        segments: Sequence[tuple[str | None, npt.NDArray[np.int64], npt.NDArray[np.float32]]],
        dimension: int,
    ) -> None:
        """Swap every vector of a workspace for new ones (a re-embed), atomically."""
        with self.db.write() as conn:
            conn.execute(
                f"DELETE FROM vector_segments WHERE {_WORKSPACE}", [organization_id, environment]
            )
            conn.execute(
                f"UPDATE knowledge_state SET embedder = ?, dimension = ? WHERE {_WORKSPACE}",
                [embedder, dimension, organization_id, environment],
            )
            for document_id, ids, vectors in segments:
                self.add_vectors(
                    organization_id, environment, document_id, embedder, dimension, ids, vectors
                )
            # every vector changed: the change log starts afresh after this version
            version = self._bump(conn, organization_id, environment, embedder, dimension)
            conn.execute(
                f"UPDATE knowledge_state SET log_floor = ? WHERE {_WORKSPACE}",
                [version, organization_id, environment],
            )
            conn.execute(
                f"DELETE FROM knowledge_tombstones WHERE {_WORKSPACE}",
                [organization_id, environment],
            )

    def knowledge_state(self, organization_id: str, environment: str) -> KnowledgeState:
        """The embedder, dimension and version of a workspace's index.

        Raw SQL: every search asks this (to know whether its cached index is current),
        and a search over HTTP asks it twice (before choosing to run on the event loop,
        then in the search). So states read are remembered per thread for as long as
        nothing at all has been written to the database since (``PRAGMA data_version``
        and this process's commit count, checked on each call, as for keys): a write
        by any connection or process is seen by the very next call. Inside a
        transaction on this thread (which may hold its own uncommitted writes, or read
        a snapshot) the row is read as it is there.
        """
        key = (organization_id, environment)
        cache: dict[Any, Any] | None = None
        if not self.db.connection().in_transaction:
            cache = self.db.current_cache("knowledge_state")
            found: KnowledgeState | None = cache.get(key)
            if found is not None:
                return found
        with self.db.read() as conn:
            row = conn.execute(
                "SELECT embedder, dimension, version, index_dtype FROM knowledge_state"
                f" WHERE {_WORKSPACE}",
                [organization_id, environment],
            ).fetchone()
        if row is None:
            state = KnowledgeState(None, None, 0)
        else:
            state = KnowledgeState(
                row["embedder"], row["dimension"], row["version"], row["index_dtype"]
            )
        if cache is not None and len(cache) < CACHE_LIMIT:
            cache[key] = state
        return state

    def claim_index_dtype(self, organization_id: str, environment: str, index_dtype: str) -> str:
        """The workspace's index dtype: the stored one, else ``index_dtype``, stored now."""
        with self.db.write() as conn:
            # a new row starts at version 0, which reads like no row at all
            row = conn.execute(
                "INSERT INTO knowledge_state (organization_id, environment, version,"
                " index_dtype) VALUES (?, ?, 0, ?) ON CONFLICT (organization_id, environment)"
                " DO UPDATE SET index_dtype = COALESCE(index_dtype, excluded.index_dtype)"
                " RETURNING index_dtype",
                [organization_id, environment, index_dtype],
            ).fetchone()
        return str(row[0])

    def changes_since(
        self, organization_id: str, environment: str, version: int, *, max_rows: int
    ) -> KnowledgeChanges | None:
        """The rows added and ids deleted after ``version``, read in one snapshot.

        ``None`` when the change log cannot bring ``version`` up to date by itself:
        it is older than the log keeps (a re-embed or pruned tombstones), newer than
        the store (the database was replaced), or more than ``max_rows`` rows were
        added since (loading the whole workspace is then the better deal).
        """
        with self.db.snapshot() as conn:
            state = conn.execute(
                f"SELECT dimension, version, log_floor FROM knowledge_state WHERE {_WORKSPACE}",
                [organization_id, environment],
            ).fetchone()
            current = 0 if state is None else int(state["version"])
            if state is None or version == current:
                empty = np.empty(0, dtype=np.int64)
                return KnowledgeChanges(current, empty, np.empty((0, 0), dtype=np.float32), empty)
            if version < state["log_floor"] or version > current:
                return None
            dimension = int(state["dimension"])
            rows = conn.execute(
                "SELECT id, count FROM vector_segments"
                f" WHERE {_WORKSPACE} AND version > ? ORDER BY id",
                [organization_id, environment, version],
            ).fetchall()
            total = sum(row["count"] for row in rows)
            if total > max_rows:
                return None
            ids = np.empty(total, dtype="<i8")
            vectors = np.empty((total, dimension), dtype="<f4")
            start = 0
            for row in rows:
                end = start + row["count"]
                _read_blob(conn, row["id"], "ids", ids[start:end])
                _read_blob(conn, row["id"], "vectors", vectors[start:end])
                start = end
            deleted = [
                np.frombuffer(row["ids"], dtype="<i8")
                for row in conn.execute(
                    f"SELECT ids FROM knowledge_tombstones WHERE {_WORKSPACE} AND version > ?",
                    [organization_id, environment, version],
                )
            ]
        gone = np.concatenate(deleted) if deleted else np.empty(0, dtype=np.int64)
        return KnowledgeChanges(current, ids, vectors, gone.astype(np.int64, copy=False))

    def _bump(
        self,
        conn: sqlite3.Connection,
        organization_id: str,
        environment: str,
        embedder: str | None = None,
        dimension: int | None = None,
        *,
        check: bool = False,
    ) -> int:
        """Advance the workspace version (in the caller's transaction); the new version.

        ``check``: raise ``StaleEmbedder`` unless the workspace's embedder and dimension
        are (now) ``embedder`` and ``dimension``: the check a document write makes in
        its own transaction instead of a read before it.
        """
        row = conn.execute(
            "INSERT INTO knowledge_state (organization_id, environment, embedder, dimension,"
            " version) VALUES (?, ?, ?, ?, 1) ON CONFLICT (organization_id, environment) DO"
            " UPDATE SET version = version + 1,"
            " embedder = COALESCE(embedder, excluded.embedder),"
            " dimension = COALESCE(dimension, excluded.dimension)"
            " RETURNING version, embedder, dimension",
            [organization_id, environment, embedder, dimension],
        ).fetchone()
        if check and (row[1] != embedder or row[2] != dimension):
            raise StaleEmbedder(f"the workspace is indexed by {row[1]!r} with dimension {row[2]}")
        return int(row[0])

    def get_document(
        self, organization_id: str, environment: str, document_id: str
    ) -> Document | None:
        """A document of this workspace, or ``None``."""
        with self.db.read() as conn:
            row = first_row(
                self.db.table(conn, "documents"),
                f"id = ? AND {_WORKSPACE}",
                [document_id, organization_id, environment],
            )
        return _document(row) if row else None

    def list_documents(
        self, organization_id: str, environment: str, *, limit: int, starting_after: str | None
    ) -> tuple[list[Document], bool]:
        """A page of documents, newest first."""
        with self.db.read() as conn:
            rows, more = page_rows(
                self.db.table(conn, "documents"),
                scope=(organization_id, environment),
                limit=limit,
                starting_after=starting_after,
            )
        return [_document(row) for row in rows], more

    def delete_document(self, organization_id: str, environment: str, document_id: str) -> bool:
        """Delete a document, its chunks and vectors in one transaction; bumps the version.

        Its tombstone holds the deleted vector ids and its sentence counts (for the
        in-memory sums of ``term_counts`` in every process).
        """
        with self.db.write() as conn:
            row = conn.execute(
                f"SELECT seq FROM documents WHERE id = ? AND {_WORKSPACE}",
                [document_id, organization_id, environment],
            ).fetchone()
            if row is None:
                return False
            # before the document, whose foreign key would drop them unread
            terms = conn.execute(
                "DELETE FROM document_terms WHERE document_seq = ?"
                " RETURNING version, sentences, stems",
                [row["seq"]],
            ).fetchone()
            conn.execute("DELETE FROM documents WHERE seq = ?", [row["seq"]])
            conn.execute("DELETE FROM chunks WHERE document_id = ?", [document_id])
            conn.execute("DELETE FROM ingest_jobs WHERE document_id = ?", [document_id])
            gone = b"".join(
                row["ids"]
                for row in conn.execute(
                    f"DELETE FROM vector_segments WHERE document_id = ? AND {_WORKSPACE}"
                    " RETURNING ids",
                    [document_id, organization_id, environment],
                ).fetchall()
            )
            version = self._bump(conn, organization_id, environment)
            if gone or terms is not None:
                conn.execute(
                    "INSERT INTO knowledge_tombstones (organization_id, environment, version,"
                    " ids, term_version, term_sentences, term_stems) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [
                        organization_id,
                        environment,
                        version,
                        gone,
                        *(tuple(terms) if terms is not None else (None, None, None)),
                    ],
                )
            self._prune_tombstones(conn, organization_id, environment, version)
        return True

    def _prune_tombstones(
        self, conn: sqlite3.Connection, organization_id: str, environment: str, version: int
    ) -> None:
        """Forget deletions older than ``TOMBSTONE_VERSIONS`` versions (raising the floor)."""
        floor = version - TOMBSTONE_VERSIONS
        if floor <= 0:
            return
        conn.execute(
            f"DELETE FROM knowledge_tombstones WHERE {_WORKSPACE} AND version <= ?",
            [organization_id, environment, floor],
        )
        conn.execute(
            f"UPDATE knowledge_state SET log_floor = MAX(log_floor, ?) WHERE {_WORKSPACE}",
            [floor, organization_id, environment],
        )

    def _insert_term_counts(
        self,
        conn: sqlite3.Connection,
        organization_id: str,
        environment: str,
        document_seq: int,
        version: int,
        sentences: int,
        stems: Mapping[str, int],
    ) -> None:
        """A document's sentence count and per-stem sentence counts as one row, in the
        transaction that stores its chunks (``version``: the one it bumped to); they
        leave with it (``delete_document`` copies them into its tombstone)."""
        conn.execute(
            "INSERT INTO document_terms (document_seq, organization_id, environment, version,"
            " sentences, stems) VALUES (?, ?, ?, ?, ?, ?)",
            [
                document_seq,
                organization_id,
                environment,
                version,
                sentences,
                pack_stems(stems),
            ],
        )

    def term_counts(
        self, organization_id: str, environment: str, stems: Sequence[str]
    ) -> tuple[int, dict[str, int]]:
        """The workspace's sentences and, per stem of ``stems``, how many hold it
        (stems no sentence holds are left out): sums over its documents' counts.

        The sums are kept in memory per workspace, built on the first call and brought
        up to date at each later one from the change log (documents whose counts were
        stored, and tombstones holding the counts of those deleted, after the sums'
        version), so any process's writes are seen; rebuilt from every document's row
        when the log no longer reaches back that far.
        """
        wanted = {stem for stem in stems if stem}
        key = (organization_id, environment)
        sums = self._term_sums
        with sums.lock:
            entry = self._current_term_sums(key, sums.entries.get(key))
            sums.entries[key] = entry
            counts = entry.counts
            return entry.sentences, {stem: counts[stem] for stem in wanted if counts.get(stem)}

    def _current_term_sums(self, key: tuple[str, str], entry: TermSums | None) -> TermSums:
        """``entry`` brought up to the store's version (a new one when it cannot be)."""
        with self.db.snapshot() as conn:
            state = conn.execute(
                f"SELECT version, log_floor FROM knowledge_state WHERE {_WORKSPACE}", key
            ).fetchone()
            version, floor = (0, 0) if state is None else (state["version"], state["log_floor"])
            if entry is not None and entry.version == version:
                return entry
            if entry is None or not floor <= entry.version < version:
                entry = TermSums(version)
                rows = conn.execute(
                    f"SELECT sentences, stems FROM document_terms WHERE {_WORKSPACE}", key
                )
                for row in rows:
                    entry.add(row["sentences"], row["stems"], 1)
                return entry
            for row in conn.execute(
                f"SELECT sentences, stems FROM document_terms WHERE {_WORKSPACE} AND version > ?",
                [*key, entry.version],
            ):
                entry.add(row["sentences"], row["stems"], 1)
            # counts stored after the entry's version and deleted since were never added
            for row in conn.execute(
                "SELECT term_sentences, term_stems FROM knowledge_tombstones"
                f" WHERE {_WORKSPACE} AND version > ? AND term_version <= ?",
                [*key, entry.version, entry.version],
            ):
                entry.add(row["term_sentences"], row["term_stems"], -1)
            entry.version = version
            return entry

    def get_chunks(self, chunk_ids: Sequence[int]) -> dict[int, StoredChunk]:
        """Chunks by id (with their document's source); missing ids are left out."""
        if not chunk_ids:
            return {}
        marks = ", ".join("?" for _ in chunk_ids)
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT chunks.id, chunks.document_id, chunks.text, chunks.pages,"
                " chunks.page_offsets, documents.source FROM chunks JOIN documents ON documents.id = chunks.document_id"
                f" WHERE chunks.id IN ({marks})",
                [int(i) for i in chunk_ids],
            ).fetchall()
        return {
            row["id"]: StoredChunk(
                row["id"],
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
        """``(document_id, chunk ids, chunk texts)`` per document, for re-embedding."""
        with self.db.read() as conn:
            documents = [
                row["id"]
                for row in self.db.table(conn, "documents").rows_where(
                    _WORKSPACE, [organization_id, environment], select="id", order_by="seq"
                )
            ]
        for document_id in documents:
            with self.db.read() as conn:
                rows = list(
                    self.db.table(conn, "chunks").rows_where(
                        "document_id = ?", [document_id], select="id, text", order_by="ordinal"
                    )
                )
            yield document_id, [row["id"] for row in rows], [row["text"] for row in rows]

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
        """Store a ``processing`` document and its job (the raw upload) atomically.

        The upload goes in through incremental blob I/O: a bound blob is copied by
        SQLite and the copy stays attached to the cached statement until it runs again
        (50 MB held after a 50 MB upload).
        """
        with self.db.write() as conn:
            self._insert_document_row(conn, organization_id, environment, document)
            cursor = conn.execute(
                "INSERT INTO ingest_jobs (document_id, organization_id, environment, kind,"
                " filename, content_type, data, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, zeroblob(?), ?)",
                [
                    document.id,
                    organization_id,
                    environment,
                    kind,
                    filename,
                    content_type,
                    len(data),
                    now,
                ],
            )
            assert cursor.lastrowid is not None
            with conn.blobopen("ingest_jobs", "data", cursor.lastrowid) as blob:
                blob.write(data)

    def claim_ingest_job(self, *, now: float, lease_seconds: float) -> IngestJob | None:
        """Lease a job that nobody holds (or whose lease ran out), atomically, fairly.

        Fair across workspaces: the oldest job of the workspace with the fewest jobs
        leased right now (by any process), then with the fewest jobs queued, so one
        tenant's queue of slow uploads cannot starve another's, even with one worker.
        The claim counts as an attempt; the lease lasts ``lease_seconds``.
        """
        with self.db.write() as conn:
            row = conn.execute(
                "WITH load AS (SELECT organization_id, environment, COUNT(*) AS jobs,"
                " COUNT(CASE WHEN leased_until > ? THEN 1 END) AS leased FROM ingest_jobs"
                " GROUP BY organization_id, environment)"
                " SELECT j.document_id FROM ingest_jobs j JOIN load l"
                " ON l.organization_id = j.organization_id AND l.environment = j.environment"
                " WHERE j.leased_until IS NULL OR j.leased_until <= ?"
                " ORDER BY l.leased, l.jobs, j.created_at LIMIT 1",
                [now, now],
            ).fetchone()
            if row is None:
                return None
            job = conn.execute(
                "UPDATE ingest_jobs SET leased_until = ?, attempts = attempts + 1"
                " WHERE document_id = ? RETURNING document_id, organization_id, environment,"
                " kind, filename, content_type, attempts",
                [now + lease_seconds, row["document_id"]],
            ).fetchone()
        return IngestJob(
            document_id=job["document_id"],
            organization_id=job["organization_id"],
            environment=job["environment"],
            kind=job["kind"],
            filename=job["filename"],
            content_type=job["content_type"],
            attempts=job["attempts"],
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
                "UPDATE ingest_jobs SET leased_until = NULL, attempts = MAX(attempts - 1, 0)"
                " WHERE document_id = ?",
                [document_id],
            )

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

        Sets its ``content_type``, ``pages`` and ``chunks`` from ``document`` and drops
        its job. ``None`` (and nothing written) if the document is no longer processing
        (deleted meanwhile, or finished by another worker).
        """
        with self.db.write() as conn:
            row = conn.execute(
                "UPDATE documents SET status = 'ready', last_error = NULL, content_type = ?,"
                f" pages = ?, chunks = ? WHERE id = ? AND {_WORKSPACE} AND status = 'processing'"
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
            ids, version = self._insert_chunks(
                conn, organization_id, environment, document, chunks, embedder, vectors, keep
            )
            if term_counts is not None:
                self._insert_term_counts(
                    conn, organization_id, environment, row["seq"], version, *term_counts
                )
            return ids

    def fail_document(
        self, organization_id: str, environment: str, document_id: str, error: Problem
    ) -> bool:
        """Mark a ``processing`` document ``failed`` with ``error`` and drop its job."""
        with self.db.write() as conn:
            cursor = conn.execute(
                "UPDATE documents SET status = 'failed', last_error = ?"
                f" WHERE id = ? AND {_WORKSPACE} AND status = 'processing'",
                [error.model_dump_json(), document_id, organization_id, environment],
            )
            conn.execute("DELETE FROM ingest_jobs WHERE document_id = ?", [document_id])
        return cursor.rowcount > 0
