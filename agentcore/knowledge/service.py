"""KnowledgeService: ingest, list, delete and search the documents of one workspace."""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, get_args

import numpy as np
import numpy.typing as npt

from agentcore.cancellation import Cancellation
from agentcore.errors import (
    Cancelled,
    Conflict,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    ValidationFailed,
    check_unicode,
)
from agentcore.ids import new_id, utcnow
from agentcore.knowledge.chunking import Chunk, chunk_pages
from agentcore.knowledge.embedders import bounded_text
from agentcore.knowledge.filters import MetadataCache, Selection, check_filter, check_metadata
from agentcore.knowledge.outcomes import Outcome, document_event, outcome_of
from agentcore.knowledge.parsing import (
    PDF,
    ParsedDocument,
    TextBudget,
    WorkBudget,
    check_text,
    check_upload,
    decode_text,
    parse_document,
    parse_text,
    text_kind,
)
from agentcore.knowledge.terms import TermStats
from agentcore.knowledge.vectors import Embedding, Rows, VectorBackend
from agentcore.knowledge.workers import Completed
from agentcore.observer import Observer, unobserved
from agentcore.schema import (
    MAX_EXTERNAL_ID_CHARS,
    Deleted,
    Document,
    DocumentList,
    Filter,
    SearchMode,
    SearchResponse,
    SearchResult,
)
from agentcore.storage.records import IngestJob, StoredChunk, WrittenDocument

if TYPE_CHECKING:
    from agentcore.config import Settings
    from agentcore.events import Event, EventBus
    from agentcore.knowledge.jobs import IngestionJobs
    from agentcore.knowledge.keywords import KeywordCache
    from agentcore.knowledge.terms import TermCounter
    from agentcore.storage.base import KnowledgeStore
    from agentcore.workspace import Workspace

SEARCH_MODES: tuple[str, ...] = get_args(SearchMode)
QUERIES_AT_ONCE = 64
"""Most queries ``search_many`` scores together (more gain little, and cost memory)."""
IDS_AT_ONCE = 6_400
"""Most hits whose chunks ``search_many`` reads in one statement: well within either
database's limit on a statement's parameters (PostgreSQL's is 65,535)."""
RRF_K = 60
"""Reciprocal-rank fusion's constant (Cormack et al.): a result ranked ``r`` (from 1) by
one ranking adds ``1 / (RRF_K + r)`` to its fused score."""
HYBRID_DEPTH = 50
"""Candidates each ranking gives a hybrid search to fuse (at least ``top_k``)."""
KEYWORD_DEPTH = 50
"""Keyword candidates checked against ``min_score`` (at least ``top_k``)."""


@dataclass(frozen=True)
class Hit:
    """A ranked chunk: its cosine ``score`` and the ``rank`` its search ordered by."""

    chunk: StoredChunk
    score: float
    rank: float


def _stored_now() -> datetime:
    # the store keeps milliseconds: return what a later get returns
    now = utcnow()
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def _indexed(
    vectors: npt.NDArray[np.float32], keep: npt.NDArray[np.bool_]
) -> Callable[[WrittenDocument | None], Rows | None]:
    """The rows a document's write indexed, from what the store returns (every chunk id
    in order and the document's seq; ``None``: nothing written): the ``keep`` ones,
    their vectors, and their label (the document's seq)."""

    def rows(written: WrittenDocument | None) -> Rows | None:
        if written is None:
            return None
        ids = np.asarray(written.chunk_ids, dtype=np.int64)
        if not keep.all():
            ids, kept = ids[keep], vectors[keep]
        else:
            kept = vectors
        return ids, kept, np.full(ids.shape[0], written.seq, dtype=np.int64)

    return rows


def _added(
    document: Document, vectors: npt.NDArray[np.float32], keep: npt.NDArray[np.bool_]
) -> Callable[[WrittenDocument | None], Rows | None] | None:
    """``_indexed`` for a write that only adds ``document``; ``None`` for one that may
    also delete (a replacement, under an ``external_id``): the cached index then reads
    the change log, which holds both."""
    return None if document.external_id is not None else _indexed(vectors, keep)


def check_external_id(external_id: str | None) -> str | None:
    """``external_id`` if it is one (1-256 characters, no NUL), else a 422 naming it."""
    if external_id is None:
        return None
    check_unicode(external_id, param="external_id")
    if (
        not isinstance(external_id, str)
        or not 1 <= len(external_id) <= MAX_EXTERNAL_ID_CHARS
        or "\x00" in external_id
    ):
        raise ValidationFailed(
            f"external_id must be a string of 1-{MAX_EXTERNAL_ID_CHARS} characters (no NUL).",
            param="external_id",
        )
    return external_id


@dataclass(frozen=True)
class _Labels:
    """What a caller names an upload by, besides its content: metadata, external id."""

    metadata: dict[str, Any]
    external_id: str | None


def _wait_until(cancellation: Cancellation | None) -> float | None:
    """When a caller with ``cancellation`` stops waiting for a worker: a little before its
    deadline (an HTTP request's), so it can still answer 202 in time; ``None``: never."""
    deadline = None if cancellation is None else cancellation.deadline
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    return deadline - min(1.0, max(left, 0.0) / 10)


class KnowledgeService:
    """The knowledge core of one workspace; reached as ``workspace.knowledge``.

    :param workspace: whose documents, and the scopes the caller holds.
    :param store: where documents, chunks and vectors are kept.
    :param settings: upload, chunking and search limits.
    :param index: where the core ranks vectors (its workspace indexes, or the store).
    :param embedding: the core's embedder: chunks and queries become rows there.
    :param jobs: the core's ingestion jobs (worker processes, or a thread): uploads
        that are not small plain text go there; ``None``: every upload is indexed in
        the calling thread, or queued for ``wait=False``.
    :param terms: counts each indexed document's sentences and word stems, stored with
        it for ``term_stats`` (chat's word rarity); ``None``: no counts are kept.
    :param metadata: the core's tables of document metadata, which filters read
        (``None``: one of its own).
    :param keywords: the core's keyword (BM25) indexes; ``None``: keyword and hybrid
        searches are refused.
    :param events: the core's event bus: a background job's document publishes
        ``document.ready`` on it (``None``: no event).
    :param observer: told the seconds each ``search`` took, or those of ``n``
        searches answered together and ``n`` (the core's metrics).
    """

    def __init__(
        self,
        workspace: Workspace,
        *,
        store: KnowledgeStore,
        settings: Settings,
        index: VectorBackend,
        embedding: Embedding,
        jobs: IngestionJobs | None = None,
        terms: TermCounter | None = None,
        metadata: MetadataCache | None = None,
        keywords: KeywordCache | None = None,
        events: EventBus | None = None,
        observer: Observer = unobserved,
    ) -> None:
        self._ws = workspace
        self._observer = observer
        self._jobs = jobs
        self._terms = terms
        self._store = store
        self._settings = settings
        self._cache = index
        self._embedding = embedding
        self._metadata = metadata or MetadataCache(store)
        self._keywords = keywords
        self._events = events

    # ingestion -----------------------------------------------------------------

    def ingest_file(
        self,
        data: bytes,
        *,
        filename: str,
        content_type: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        external_id: str | None = None,
        wait: bool | None = None,
        cancellation: Cancellation | None = None,
    ) -> Document:
        """Parse, chunk, embed and store a PDF, Markdown or text file. Write scope.

        ``metadata``: the document's attributes (at most 16 keys of 1-64 characters;
        values strings of at most 512 characters, numbers or booleans), which search
        filters and agents' knowledge select by; anything else is a 422 naming the key,
        and nothing is stored.

        ``external_id``: your own id for the document (1-256 characters: a path, a URL,
        another system's id). When the new document is ready, the workspace's ready
        document with the same ``external_id``, if any, is deleted in the same
        transaction: searches see the old version's chunks until they see the new
        one's, never both or neither. The new document has a new ``id``; an upload that
        fails leaves the old version as it was.

        Either the whole document is stored (document, chunks, vectors in one
        transaction) or nothing is. Once the core is started (``core.start()``; the
        HTTP app's lifespan does it), PDFs and all but small text files are parsed and
        embedded in a worker process, under the ``ingest_*`` time and memory limits;
        the upload is stored as a ``processing`` document first.

        :param wait: ``True``: return the document ``ready``, or raise its error, and
            then nothing is stored (a worker process indexes it when the core is
            started, else this thread). ``False``: store the upload as a job and return
            the document at once in status ``processing`` (the core's workers make it
            ``ready`` or ``failed``; poll ``get``). ``None`` (default): files larger
            than ``ingest_sync_max_bytes`` as ``False``; smaller ones are waited for
            while a worker of this process is free to take them and ``cancellation``'s
            deadline allows (then ``processing`` is returned and the job goes on; an
            error while waiting is raised, nothing stored), or indexed in this thread
            when the core is not started.
        :param cancellation: the caller's deadline or disconnect. Work in this thread
            stops at its next checkpoint, storing nothing; with ``wait=True`` a job in
            a worker is stopped too (nothing stored); otherwise waiting ends.
        """
        self._ws.require("write")
        attributes = check_metadata(metadata)
        own_id = check_external_id(external_id)
        source, kind = check_upload(
            data, filename, content_type, max_bytes=self._settings.max_upload_bytes
        )
        return self._ingest(
            "file",
            data,
            filename,
            content_type,
            source,
            kind,
            wait,
            cancellation,
            _Labels(attributes, own_id),
            parse=lambda: self._parse_file(data, filename, content_type, cancellation),
        )

    def ingest_text(
        self,
        source: str,
        text: str,
        *,
        metadata: Mapping[str, Any] | None = None,
        external_id: str | None = None,
        wait: bool | None = None,
        cancellation: Cancellation | None = None,
    ) -> Document:
        """Store text under a source name, as a file of that name would be. Write scope.

        The source's extension says the type: ``.md`` (or ``.markdown``) is Markdown,
        one page; anything else is plain text, split into pages at form feeds (``\\f``),
        so ``ingest_text("notes.txt", "A.\\fB.")`` has two pages. ``metadata``,
        ``external_id``, ``wait`` and ``cancellation`` work as for ``ingest_file``.
        """
        self._ws.require("write")
        attributes = check_metadata(metadata)
        check_unicode(source, param="source")
        check_unicode(text, param="text")
        own_id = check_external_id(external_id)
        if len(text) > self._settings.max_text_chars:
            raise ValidationFailed(
                f"The text is longer than {self._settings.max_text_chars} characters;"
                " upload it as a file instead.",
                code="text_too_long",
                param="text",
            )
        encoded = text.encode()
        if len(encoded) > self._settings.max_upload_bytes:
            raise PayloadTooLarge(
                f"The text exceeds the limit of {self._settings.max_upload_bytes} bytes.",
                code="file_too_large",
                param="text",
            )
        check_text(source, text)
        return self._ingest(
            "text",
            encoded,
            source,
            None,
            source.strip(),
            text_kind(source),
            wait,
            cancellation,
            _Labels(attributes, own_id),
            parse=lambda: parse_text(source, text),
        )

    def _ingest(
        self,
        job_kind: str,
        data: bytes,
        filename: str,
        declared: str | None,
        source: str,
        content_type: str,
        wait: bool | None,
        cancellation: Cancellation | None,
        labels: _Labels,
        *,
        parse: Callable[[], ParsedDocument],
    ) -> Document:
        """Queue, index in this thread, or hand to a worker and wait: see ``ingest_file``."""
        settings = self._settings
        size = len(data)
        if wait is False or (wait is None and size > settings.ingest_sync_max_bytes):
            document = self._processing(source, content_type, size, labels)
            self._store_job(document, job_kind, filename, declared, data)
            return document
        jobs = self._jobs
        if (
            jobs is None
            or not jobs.isolated
            or (content_type != PDF and size <= settings.ingest_inline_max_bytes)
        ):
            return self._store_parsed(parse(), size, cancellation, labels)
        if cancellation is not None:
            cancellation.check()  # already stopped: store nothing
        document = self._processing(source, content_type, size, labels)
        outcome = jobs.run_and_wait(
            document.id,
            lambda: self._store_job(document, job_kind, filename, declared, data),
            lambda: outcome_of(self._store.get_document(*self._scope, document.id)),
            organization_id=self._ws.organization_id,
            block=wait is True,
            until=None if wait else _wait_until(cancellation),
            cancellation=cancellation,
        )
        return self._waited(document, outcome, wait is True, cancellation)

    def _waited(
        self,
        document: Document,
        outcome: Outcome | None,
        block: bool,
        cancellation: Cancellation | None,
    ) -> Document:
        """What a caller that waited for a worker gets: the ready document, the
        ``processing`` one (its job goes on), or the job's error with nothing stored."""
        if outcome is not None and outcome.document is not None:
            return outcome.document
        if outcome is not None and outcome.gone:
            raise Conflict(
                "The document was deleted before it was indexed.", code="document_deleted"
            )
        error = None if outcome is None else outcome.error
        if error is None and not block:
            return document  # still processing, or given back to the queue at shutdown
        self._discard(document.id)
        if error is not None:
            raise error
        if cancellation is not None:
            cancellation.check()
        raise Cancelled("The core stopped before the document was indexed.", code="cancelled")

    @property
    def _scope(self) -> tuple[str, str]:
        return self._ws.organization_id, self._ws.environment

    def _processing(self, source: str, content_type: str, size: int, labels: _Labels) -> Document:
        return Document(
            id=new_id("doc"),
            source=source,
            content_type=content_type,
            pages=0,
            chunks=0,
            bytes=size,
            created_at=_stored_now(),
            status="processing",
            metadata=labels.metadata,
            external_id=labels.external_id,
        )

    def _store_job(
        self, document: Document, kind: str, filename: str, declared: str | None, data: bytes
    ) -> None:
        """Store a ``processing`` document and its job (the raw upload), atomically, and
        tell the jobs runtime."""
        self._store.insert_processing_document(
            *self._scope,
            document,
            kind=kind,
            filename=filename,
            content_type=declared,
            data=data,
            now=time.time(),
        )
        if self._jobs is not None:
            self._jobs.wake()

    def _parse_file(
        self,
        data: bytes,
        filename: str,
        content_type: str | None,
        cancellation: Cancellation | None,
    ) -> ParsedDocument:
        """``parse_document`` with this core's limits: size, pages, the text budget (a
        document that extracts to more text than ``max_document_chunks`` chunks could
        hold is refused while it is extracted, not after) and the work budget (CPU time
        and drawing operators, however little text they yield)."""
        settings = self._settings
        return parse_document(
            data,
            filename,
            content_type,
            max_bytes=settings.max_upload_bytes,
            max_pages=settings.max_pdf_pages,
            budget=TextBudget(
                page_chars=settings.max_pdf_page_chars,
                total_chars=settings.max_document_chunks * settings.chunk_target_chars,
            ),
            work=WorkBudget.for_size(
                len(data),
                cpu_seconds=settings.ingest_cpu_seconds,
                cpu_seconds_per_mib=settings.ingest_cpu_seconds_per_mib,
                page_cpu_seconds=settings.ingest_page_cpu_seconds,
                page_operators=settings.max_pdf_page_operators,
                page_xobjects=settings.max_pdf_page_xobjects,
            ),
            cancellation=cancellation,
        )

    def _chunk(
        self, parsed: ParsedDocument, cancellation: Cancellation | None
    ) -> builtins.list[Chunk]:
        settings = self._settings
        chunks = chunk_pages(
            parsed.pages,
            target_chars=settings.chunk_target_chars,
            overlap_chars=settings.chunk_overlap_chars,
            max_chunks=settings.max_document_chunks,
            cancellation=cancellation,
        )
        if not chunks:
            raise ValidationFailed(
                "The document has no text to index.", code="no_text", param="file"
            )
        return chunks

    def _bounded(self, chunks: builtins.list[Chunk]) -> builtins.list[str]:
        """The chunk texts as embedders and term counts read them (``bounded_text``)."""
        limit = self._settings.max_token_chars
        return [bounded_text(chunk.text, limit) for chunk in chunks]

    def _embed(
        self, texts: builtins.list[str], cancellation: Cancellation | None
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_], str]:
        """Unit vectors of the ``_bounded`` chunk texts, the mask of indexable rows, the
        embedder's name."""
        return self._embedding.passages(texts, cancellation=cancellation, bounded=True)

    def _store_parsed(
        self,
        parsed: ParsedDocument,
        size: int,
        cancellation: Cancellation | None,
        labels: _Labels,
    ) -> Document:
        chunks = self._chunk(parsed, cancellation)
        texts = self._bounded(chunks)
        vectors, keep, embedder = self._embed(texts, cancellation)
        document = Document(
            id=new_id("doc"),
            source=parsed.source,
            content_type=parsed.content_type,
            pages=len(parsed.pages),
            chunks=len(chunks),
            bytes=size,
            created_at=_stored_now(),
            metadata=labels.metadata,
            external_id=labels.external_id,
        )
        ws = self._ws
        counts = self._count_terms(texts)

        def store_write() -> WrittenDocument:
            return self._store.insert_document(
                ws.organization_id,
                ws.environment,
                document,
                [(chunk.text, chunk.pages, chunk.page_offsets) for chunk in chunks],
                embedder,
                vectors,
                keep,
                term_counts=counts,
            )

        if cancellation is not None:
            cancellation.check()  # the last point at which stopping leaves nothing behind
        self._cache.write(
            ws.organization_id, ws.environment, store_write, added=_added(document, vectors, keep)
        )
        return document

    def run_job(self, job: IngestJob, cancellation: Cancellation) -> Completed | None:
        """Index a leased background job's upload; the document becomes ``ready``.

        Called by the core's ingestion worker. Returns the ready document and its
        ``document.ready`` event (recorded in the outbox in the same transaction, so
        once; the caller announces it to in-process listeners), or ``None`` when the
        document is no longer ``processing`` (deleted meanwhile). Errors propagate: the
        worker records them as the document's ``last_error``.
        """
        ws = self._ws
        document = self._store.get_document(ws.organization_id, ws.environment, job.document_id)
        if document is None or document.status != "processing":
            return None
        data = self._store.ingest_job_data(job.document_id)
        if data is None:
            return None
        if job.kind == "text":
            parsed = parse_text(job.filename, decode_text(data, param="text"))
        else:
            parsed = self._parse_file(data, job.filename, job.content_type, cancellation)
        del data  # the chunks hold the text from here on: let the upload go
        chunks = self._chunk(parsed, cancellation)
        ready = document.model_copy(
            update={
                "content_type": parsed.content_type,
                "pages": len(parsed.pages),
                "chunks": len(chunks),
                "status": "ready",
            }
        )
        del parsed
        texts = self._bounded(chunks)
        vectors, keep, embedder = self._embed(texts, cancellation)
        counts = self._count_terms(texts)
        events = self._events
        event: Event | None = None

        def ready_event(stored: Document) -> Event:
            # made in the store's transaction, of the metadata stored then
            nonlocal event
            assert events is not None
            event = events.prepare(
                "document.ready",
                document_event(stored),
                organization_id=ws.organization_id,
                environment=ws.environment,
            )
            return event

        def store_write() -> WrittenDocument | None:
            return self._store.complete_document(
                ws.organization_id,
                ws.environment,
                ready,
                [(chunk.text, chunk.pages, chunk.page_offsets) for chunk in chunks],
                embedder,
                vectors,
                keep,
                term_counts=counts,
                event=None if events is None else ready_event,
            )

        cancellation.check()
        written = self._cache.write(
            ws.organization_id, ws.environment, store_write, added=_added(ready, vectors, keep)
        )
        if written is None:
            return None
        return Completed(written.document or ready, event)

    def _count_terms(self, texts: builtins.list[str]) -> tuple[int, Mapping[str, int]] | None:
        """A document's sentence counts (of its ``_bounded`` chunk texts), stored with its
        chunks (none without a counter)."""
        if self._terms is None:
            return None
        counts = self._terms.count(texts)
        return counts.sentences, counts.stems

    def term_stats(self, text: str) -> TermStats:
        """How many sentences this workspace holds and how many of them hold each stem of
        ``text`` (a question): the rarity chat weighs question words by. Read scope."""
        self._ws.require("read")
        if self._terms is None:
            return TermStats(0)
        stems = self._terms.stems(bounded_text(text, self._settings.max_token_chars))
        if not stems:
            return TermStats(0)
        ws = self._ws
        sentences, counts = self._store.term_counts(ws.organization_id, ws.environment, stems)
        return TermStats(sentences, counts)

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
            limit=self._settings.page_size(limit),
            starting_after=starting_after,
        )
        return DocumentList(documents=documents, has_more=more)

    def update(self, document_id: str, *, metadata: Mapping[str, Any]) -> Document:
        """Replace a document's metadata (``{}`` clears it). Write scope.

        Searches see the change at once, in every process and on every node: the write
        advances the workspace's version, and each process's filters catch up with the
        documents written since (``MetadataCache``). Bad metadata is a 422 naming the
        key, and nothing changes.
        """
        self._ws.require("write")
        attributes = check_metadata(metadata)
        updated = self._store.update_metadata(*self._scope, document_id, attributes)
        if updated is None:
            raise NotFound(f"No document with id {document_id!r}.", param="id")
        return updated

    def delete(self, document_id: str) -> Deleted:
        """Delete a document; its chunks leave search at once, and a worker indexing it
        (in this process) is stopped at once. Write scope."""
        self._ws.require("write")
        if not self._discard(document_id):
            raise NotFound(f"No document with id {document_id!r}.", param="id")
        return Deleted(id=document_id)

    def _discard(self, document_id: str) -> bool:
        """Delete a document (whatever its status; its job too, stopping a worker of this
        process that runs it); whether it existed."""

        def store_write() -> bool:
            return self._store.delete_document(*self._scope, document_id)

        deleted = self._cache.write(*self._scope, store_write)
        if deleted and self._jobs is not None:
            self._jobs.forget(document_id)
        return deleted

    # search --------------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        top_k: int | None = None,
        min_score: float | None = None,
        filter: Filter | Mapping[str, Any] | None = None,
        mode: SearchMode | None = None,
    ) -> SearchResponse:
        """The ``top_k`` chunks best matching ``query``. Read scope.

        :param filter: only chunks of documents whose metadata it selects (OpenAI's
            attribute-filter shape, a dict or a ``Filter``), applied before the top
            ``top_k`` is taken; a malformed filter is a 422 naming the bad part.
        :param mode: ``"vector"`` (default): by cosine similarity; ``"keyword"``: by
            BM25 over the query's word stems; ``"hybrid"``: both, fused by reciprocal
            rank. Each result's ``score`` is its cosine similarity in every mode, and
            ``rank_score`` what the mode ranked by; ``min_score`` drops results whose
            cosine score is lower.
        """
        self._ws.require("read")
        k = self._checked(query, top_k, min_score)
        mode = self._mode(mode)
        spec = check_filter(filter)
        began = time.perf_counter()
        hits = self._ranked(query, k, min_score, spec, mode)
        self._observer.searched(time.perf_counter() - began, 1)
        return _response(query, mode, hits)

    def search_many(
        self,
        queries: Sequence[str],
        *,
        top_k: int | None = None,
        min_score: float | None = None,
        filter: Filter | Mapping[str, Any] | None = None,
        mode: SearchMode | None = None,
    ) -> builtins.list[SearchResponse]:
        """``search`` for each of ``queries`` with the same options: their answers, in
        order. Read scope. A query ``search`` refuses makes the whole call fail with
        the same error (its ``param`` ``queries.<i>`` for the query itself).

        In ``vector`` mode without a filter the queries are embedded together and
        scored against the index in one matrix product, which costs about half of a
        search each when there are eight (the HTTP adapter batches concurrent
        searches so); a score may then differ from a lone search's in the last bit of
        its float32, and so may the order of two results that close.
        """
        self._ws.require("read")
        if isinstance(queries, str):  # a str is a Sequence[str]: one search per character
            raise ValidationFailed(
                "queries must be a list of queries, not one string (use search for one).",
                param="queries",
            )
        for at, query in enumerate(queries):
            try:
                k = self._checked(query, top_k, min_score)
            except ValidationFailed as error:
                error.param = f"queries.{at}" if error.param == "query" else error.param
                raise
        mode = self._mode(mode)
        if len(queries) < 2 or mode != "vector" or filter is not None:
            return [
                self.search(q, top_k=top_k, min_score=min_score, filter=filter, mode=mode)
                for q in queries
            ]
        answers: builtins.list[SearchResponse] = []
        step = max(1, min(QUERIES_AT_ONCE, IDS_AT_ONCE // k))
        for at in range(0, len(queries), step):
            answers += self._search_together(queries[at : at + step], k, min_score)
        return answers

    def _search_together(
        self, queries: Sequence[str], k: int, min_score: float | None
    ) -> builtins.list[SearchResponse]:
        """Vector searches of ``queries`` (checked), embedded and scored together."""
        began = time.perf_counter()
        vectors, usable = self._query_vectors(queries)
        empty = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32))
        ranked = [empty] * len(queries)
        if usable.any():
            matrix = vectors[usable].astype(np.float32, copy=False)
            found = self._cache.search_batch(*self._scope, matrix, k, min_score)
            for i, row in zip(np.flatnonzero(usable).tolist(), found, strict=True):
                ranked[i] = row
        wanted = {int(i) for ids, _ in ranked for i in ids.tolist()}
        chunks = self._store.get_chunks(sorted(wanted))
        answers = [
            _response(query, "vector", _found(chunks, ids, scores, scores))
            for query, (ids, scores) in zip(queries, ranked, strict=True)
        ]
        self._observer.searched(time.perf_counter() - began, len(queries))
        return answers

    def _checked(self, query: str, top_k: int | None, min_score: float | None) -> int:
        """The ``k`` of a search of ``query``, its arguments checked (422s)."""
        settings = self._settings
        if not query.strip():
            raise ValidationFailed("The query is empty.", code="empty_query", param="query")
        check_unicode(query, param="query")
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
        return k

    def _mode(self, mode: str | None) -> SearchMode:
        """``mode`` checked (default ``vector``); keyword modes need a keyword index."""
        if mode is None:
            return "vector"
        if mode not in SEARCH_MODES:
            raise ValidationFailed(
                f"mode must be one of {', '.join(SEARCH_MODES)}.", code="invalid_mode", param="mode"
            )
        if mode != "vector" and self._keywords is None:
            raise InvalidRequest(
                f"This core has no keyword index, so mode {mode!r} is unavailable.",
                code="mode_unavailable",
                param="mode",
            )
        return mode  # type: ignore[return-value]

    def index_is_current(self) -> bool:
        """Whether a search now runs on this process's loaded index as it is, without
        loading or catching up (one small read of the workspace's version). Read scope.

        The HTTP adapter asks before running a search on its event loop.
        """
        self._ws.require("read")
        return self._cache.is_current(self._ws.organization_id, self._ws.environment)

    def retrieve(
        self,
        query: str,
        k: int,
        min_score: float | None = None,
        *,
        filter: Filter | None = None,
        mode: SearchMode = "vector",
    ) -> builtins.list[tuple[StoredChunk, float]]:
        """The top ``k`` chunks and their cosine scores for ``query``, among the
        documents ``filter`` selects, ranked as ``mode`` says (no argument checks; chat
        uses it)."""
        self._ws.require("read")
        hits = self._ranked(query, k, min_score, filter, self._mode(mode))
        return [(hit.chunk, hit.score) for hit in hits]

    def _ranked(
        self, query: str, k: int, min_score: float | None, spec: Filter | None, mode: SearchMode
    ) -> builtins.list[Hit]:
        """The top ``k`` hits of ``query`` in ``mode``, among what ``spec`` selects."""
        within: Selection | None = None
        if spec is not None:
            within = self._metadata.selection(*self._scope, spec)
            if within.empty:
                return []
        vector = _Once(lambda: self._query_vector(query))
        if mode == "vector":
            ids, scores = self._cache.search(*self._scope, vector, k, min_score, within=within)
            return self._hits(ids, scores, scores)
        depth = max(k, HYBRID_DEPTH if mode == "hybrid" else KEYWORD_DEPTH)
        assert self._keywords is not None  # _mode refuses these modes without one
        keyword_ids, bm25 = self._keywords.get(*self._scope).search(
            query, depth, allow=within, ties=mode == "keyword"
        )
        if mode == "keyword":
            if min_score is None and keyword_ids.shape[0] > k:
                # the rows tied with the k-th stay: the cosine breaks ties, then the id
                cut = int(np.searchsorted(-bm25, -bm25[k - 1], side="right"))
                keyword_ids, bm25 = keyword_ids[:cut], bm25[:cut]
            cosine = self._similarities(vector, keyword_ids)
            order = np.lexsort((keyword_ids, -np.nan_to_num(cosine, nan=-2.0), -bm25))
            return self._hits(
                keyword_ids[order], cosine[order], bm25[order], k=k, min_score=min_score
            )
        vector_ids, vector_scores = self._cache.search(*self._scope, vector, depth, within=within)
        fused: dict[int, float] = {}
        for ranking in (vector_ids, keyword_ids):
            for rank, chunk_id in enumerate(ranking.tolist(), 1):
                fused[chunk_id] = fused.get(chunk_id, 0.0) + 1.0 / (RRF_K + rank)
        cosine_of = dict(zip(vector_ids.tolist(), vector_scores.tolist(), strict=True))
        only_keyword = np.asarray([i for i in keyword_ids.tolist() if i not in cosine_of], np.int64)
        cosine_of.update(
            zip(
                only_keyword.tolist(),
                self._similarities(vector, only_keyword).tolist(),
                strict=True,
            )
        )
        ids = np.asarray(list(fused), dtype=np.int64)
        ranks = np.asarray(list(fused.values()), dtype=np.float64)
        cosine = np.asarray([cosine_of[i] for i in fused], dtype=np.float32)
        order = np.lexsort((ids, -np.nan_to_num(cosine, nan=-2.0), -ranks))
        return self._hits(ids[order], cosine[order], ranks[order], k=k, min_score=min_score)

    def _query_vector(self, query: str) -> npt.NDArray[np.float32] | None:
        """The query's unit vector, or ``None`` when it embeds to nothing."""
        vectors, usable = self._query_vectors([query])
        return vectors[0] if usable[0] else None

    def _query_vectors(
        self, queries: Sequence[str]
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
        """The queries' vectors (a row each) and which embed to something, embedded in
        one call (``Embedding.queries``)."""
        return self._embedding.queries(queries)

    def _similarities(self, vector: _Once, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """The cosine scores of these rows (0 for all when the query embeds to nothing)."""
        query = vector()
        if query is None or not ids.size:
            return np.zeros(ids.shape[0], dtype=np.float32)
        return self._cache.similarities(*self._scope, query, ids)

    def _hits(
        self,
        ids: npt.NDArray[np.int64],
        scores: npt.NDArray[np.float32],
        ranks: npt.NDArray[Any],
        *,
        k: int | None = None,
        min_score: float | None = None,
    ) -> builtins.list[Hit]:
        """The chunks of ranked ``ids`` with their cosine ``scores`` and ``ranks``, best
        first: those scoring at least ``min_score`` (a row gone from the index, its
        score ``nan``, is left out), at most ``k``."""
        keep = ~np.isnan(scores)
        if min_score is not None:
            keep &= scores >= min_score
        ids, scores, ranks = ids[keep][:k], scores[keep][:k], ranks[keep][:k]
        return _found(self._store.get_chunks([int(i) for i in ids]), ids, scores, ranks)


def _found(
    chunks: dict[int, StoredChunk],
    ids: npt.NDArray[np.int64],
    scores: npt.NDArray[np.float32],
    ranks: npt.NDArray[Any],
) -> builtins.list[Hit]:
    """The hits of ranked ``ids`` among ``chunks`` (looked up by id): a chunk deleted
    between the index read and the lookup is skipped."""
    return [
        Hit(chunks[chunk_id], float(score), float(rank))
        for chunk_id, score, rank in zip(ids.tolist(), scores.tolist(), ranks.tolist(), strict=True)
        if chunk_id in chunks
    ]


def _response(query: str, mode: SearchMode, hits: builtins.list[Hit]) -> SearchResponse:
    """The answer to a search of ``query`` that found ``hits``."""
    results = [
        SearchResult(
            chunk=hit.chunk.text,
            score=hit.score,
            source=hit.chunk.source,
            pages=hit.chunk.pages,
            document_id=hit.chunk.document_id,
            metadata=hit.chunk.metadata,
            rank_score=hit.rank,
        )
        for hit in hits
    ]
    return SearchResponse(query=query, mode=mode, results=results)


class _Once:
    """``make()`` called at most once, when first needed (the query's embedding: a
    search with nothing to rank never embeds its query)."""

    def __init__(self, make: Callable[[], npt.NDArray[np.float32] | None]) -> None:
        self._make = make
        self._made = False
        self._value: npt.NDArray[np.float32] | None = None

    def __call__(self) -> npt.NDArray[np.float32] | None:
        if not self._made:
            self._value, self._made = self._make(), True
        return self._value
