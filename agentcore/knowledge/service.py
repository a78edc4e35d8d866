"""KnowledgeService: ingest, list, delete and search the documents of one workspace."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from agentcore.errors import NotFound, PayloadTooLarge, ValidationFailed
from agentcore.ids import new_id, utcnow
from agentcore.knowledge.cache import IndexCache, nonzero_rows, unit_rows
from agentcore.knowledge.chunking import chunk_pages
from agentcore.knowledge.ingest import ParsedDocument, parse_document, parse_text
from agentcore.models import Deleted, Document, DocumentList, SearchResponse, SearchResult
from agentcore.storage.records import StoredChunk

if TYPE_CHECKING:
    from agentcore.config import Settings
    from agentcore.storage.base import KnowledgeStorage
    from agentcore.workspace import Workspace


class KnowledgeService:
    """The knowledge core of one workspace; reached as ``workspace.knowledge``.

    :param workspace: whose documents, and the scopes the caller holds.
    :param store: where documents, chunks and vectors are kept.
    :param settings: upload, chunking and search limits.
    :param index: the core's shared cache of workspace indexes (and its embedder).
    """

    def __init__(
        self,
        workspace: Workspace,
        *,
        store: KnowledgeStorage,
        settings: Settings,
        index: IndexCache,
    ) -> None:
        self._ws = workspace
        self._store = store
        self._settings = settings
        self._cache = index

    # ingestion -----------------------------------------------------------------

    def ingest_file(
        self, data: bytes, *, filename: str, content_type: str | None = None
    ) -> Document:
        """Parse, chunk, embed and store a PDF, Markdown or text file. Write scope.

        Either the whole document is stored (document, chunks, vectors in one
        transaction) or nothing is.
        """
        self._ws.require("write")
        parsed = parse_document(
            data,
            filename,
            content_type,
            max_bytes=self._settings.max_upload_bytes,
            max_pages=self._settings.max_pdf_pages,
        )
        return self._store_parsed(parsed, len(data))

    def ingest_text(self, source: str, text: str) -> Document:
        """Store plain text under a source name (one page). Write scope."""
        self._ws.require("write")
        if len(text) > self._settings.max_text_chars:
            raise ValidationFailed(
                f"The text is longer than {self._settings.max_text_chars} characters;"
                " upload it as a file instead.",
                code="text_too_long",
                param="text",
            )
        encoded = len(text.encode())
        if encoded > self._settings.max_upload_bytes:
            raise PayloadTooLarge(
                f"The text exceeds the limit of {self._settings.max_upload_bytes} bytes.",
                code="file_too_large",
                param="text",
            )
        return self._store_parsed(parse_text(source, text), encoded)

    def _store_parsed(self, parsed: ParsedDocument, size: int) -> Document:
        chunks = chunk_pages(
            parsed.pages,
            target_chars=self._settings.chunk_target_chars,
            overlap_chars=self._settings.chunk_overlap_chars,
        )
        if not chunks:
            raise ValidationFailed(
                "The document has no text to index.", code="no_text", param="file"
            )
        embedder = self._cache.embedder()
        vectors = unit_rows(embedder.embed([chunk.text for chunk in chunks], kind="passage"))
        now = utcnow()
        document = Document(
            id=new_id("doc"),
            source=parsed.source,
            content_type=parsed.content_type,
            pages=len(parsed.pages),
            chunks=len(chunks),
            bytes=size,
            # the store keeps milliseconds: return what a later get returns
            created_at=now.replace(microsecond=now.microsecond // 1000 * 1000),
        )
        keep = nonzero_rows(vectors)
        ws = self._ws

        def store_write() -> None:
            self._store.insert_document(
                ws.organization_id,
                ws.environment,
                document,
                [(chunk.text, chunk.pages, chunk.page_offsets) for chunk in chunks],
                embedder.name,
                vectors,
                keep,
            )

        self._cache.write(ws.organization_id, ws.environment, store_write)
        return document

    # documents -----------------------------------------------------------------

    def get(self, document_id: str) -> Document:
        """One document. Read scope."""
        self._ws.require("read")
        document = self._store.get_document(
            self._ws.organization_id, self._ws.environment, document_id
        )
        if document is None:
            raise NotFound(f"No document with id {document_id!r}.", param="id")
        return document

    def list(self, *, limit: int | None = None, starting_after: str | None = None) -> DocumentList:
        """A page of documents, newest first. Read scope."""
        self._ws.require("read")
        documents, more = self._store.list_documents(
            self._ws.organization_id,
            self._ws.environment,
            limit=self._ws.page_size(limit),
            starting_after=starting_after,
        )
        return DocumentList(documents=documents, has_more=more)

    def delete(self, document_id: str) -> Deleted:
        """Delete a document; its chunks leave search at once. Write scope."""
        self._ws.require("write")
        ws = self._ws

        def store_write() -> bool:
            return self._store.delete_document(ws.organization_id, ws.environment, document_id)

        if not self._cache.write(ws.organization_id, ws.environment, store_write):
            raise NotFound(f"No document with id {document_id!r}.", param="id")
        return Deleted(id=document_id)

    # search --------------------------------------------------------------------

    def search(
        self, query: str, *, top_k: int | None = None, min_score: float | None = None
    ) -> SearchResponse:
        """Chunks ranked by cosine similarity to ``query``. Read scope."""
        self._ws.require("read")
        settings = self._settings
        if not query.strip():
            raise ValidationFailed("The query is empty.", code="empty_query", param="query")
        if len(query) > settings.max_query_chars:
            raise ValidationFailed(
                f"The query is longer than {settings.max_query_chars} characters.",
                code="query_too_long",
                param="query",
            )
        k = settings.default_top_k if top_k is None else top_k
        if not 1 <= k <= settings.max_top_k:
            raise ValidationFailed(
                f"top_k must be between 1 and {settings.max_top_k}.",
                code="top_k_out_of_range",
                param="top_k",
            )
        if min_score is not None and not -1.0 <= min_score <= 1.0:
            raise ValidationFailed(
                "min_score must be between -1 and 1.",
                code="min_score_out_of_range",
                param="min_score",
            )
        results = [
            SearchResult(
                chunk=chunk.text,
                score=score,
                source=chunk.source,
                pages=chunk.pages,
                document_id=chunk.document_id,
            )
            for chunk, score in self.retrieve(query, k, min_score)
        ]
        return SearchResponse(query=query, results=results)

    def retrieve(
        self, query: str, k: int, min_score: float | None = None
    ) -> builtins.list[tuple[StoredChunk, float]]:
        """The top ``k`` chunks and scores for ``query`` (no argument checks; chat uses it)."""
        self._ws.require("read")

        def query_vector() -> npt.NDArray[np.float32] | None:
            vector: npt.NDArray[np.float32] = self._cache.embedder().embed([query], kind="query")[0]
            if not np.isfinite(vector).all() or not np.any(vector):
                return None
            return vector

        ids, scores = self._cache.search(
            self._ws.organization_id, self._ws.environment, query_vector, k, min_score
        )
        chunks = self._store.get_chunks([int(i) for i in ids])
        # a chunk deleted between the index read and this lookup is skipped
        return [
            (chunks[chunk_id], float(score))
            for chunk_id, score in zip(ids.tolist(), scores.tolist(), strict=True)
            if chunk_id in chunks
        ]
