"""The one ingest pipeline: parse, chunk, embed, count terms, write.

The same code indexes an upload wherever it runs: in the caller's thread (a small text
document), on a thread of the core (no worker processes), or in a worker process, which
builds only what it needs for this (``agentcore._ingest_worker``). The write goes through a
``Writer``: the core's ``VectorBackend.write`` (its index kept in step at once) or, in a
worker, the workspace's embedder check alone (the core's index catches up from the
store's change log, as with any other process's write).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from agentcore._ids import new_id, utcnow
from agentcore.errors import ValidationFailed
from agentcore.keys import check_environment
from agentcore.knowledge._chunking import Chunk, chunk_pages
from agentcore.knowledge.embedders import bounded_text
from agentcore.knowledge.ingest._outcomes import document_event
from agentcore.knowledge.ingest._parsing import (
    ParsedDocument,
    TextBudget,
    WorkBudget,
    decode_text,
    parse_document,
    parse_text,
)
from agentcore.knowledge.ingest._scans import Ocr
from agentcore.knowledge.ingest._workers import Completed
from agentcore.schema import Document, DocumentAccess
from agentcore.storage.base import DocumentStore, IngestStore

if TYPE_CHECKING:
    from agentcore._cancellation import Cancellation
    from agentcore.config import Settings
    from agentcore.events import Event, EventBus
    from agentcore.knowledge.ocr import OcrEngine
    from agentcore.knowledge.terms import TermCounter
    from agentcore.knowledge.vectors import Embedding, Rows
    from agentcore.storage.records import ChunkRow, IngestJob, WrittenDocument

__all__ = [
    "IngestPipeline",
    "IngestingStore",
    "Labels",
    "Writer",
    "parse_with_limits",
    "stored_now",
]

T = TypeVar("T")


def parse_with_limits(
    settings: Settings,
    data: bytes,
    filename: str,
    content_type: str | None,
    cancellation: Cancellation | None = None,
    ocr: OcrEngine | None = None,
) -> ParsedDocument:
    """``parse_document`` with the limits of ``settings``: size, pages, the text budget (a
    document that extracts to more text than ``max_document_chunks`` chunks could hold is
    refused while it is extracted, not after) and the work budget (CPU time and drawing
    operators, however little text they yield). ``ocr``, when given, may take as many
    wall-clock seconds as the work budget allows CPU seconds: a page's, and the file's
    over all its pages."""
    work = WorkBudget.for_size(
        len(data),
        cpu_seconds=settings.ingest_cpu_seconds,
        cpu_seconds_per_mib=settings.ingest_cpu_seconds_per_mib,
        page_cpu_seconds=settings.ingest_page_cpu_seconds,
        page_operators=settings.max_pdf_page_operators,
        page_xobjects=settings.max_pdf_page_xobjects,
    )
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
        work=work,
        cancellation=cancellation,
        ocr=None
        if ocr is None
        else Ocr(ocr, page_seconds=work.page_cpu_seconds, document_seconds=work.cpu_seconds),
    )


class IngestingStore(DocumentStore, IngestStore, Protocol):
    """What ingestion keeps: its writes and queue of jobs, and the documents whose
    status it checks."""


class Writer(Protocol):
    """How the pipeline writes a document: ``VectorBackend.write``'s shape."""

    def __call__(
        self,
        organization_id: str,
        environment: str,
        store_write: Callable[[], T],
        *,
        added: Callable[[T], Rows | None] | None = None,
    ) -> T:
        """Run ``store_write`` on the workspace's configured embedder's vectors (and keep
        what ranks them in step; ``added``: the rows a write that only adds made)."""
        ...


@dataclass(frozen=True)
class Labels:
    """What a caller names an upload by, besides its content: metadata, external id, and
    who may read it (``None``: everyone)."""

    metadata: dict[str, Any]
    external_id: str | None = None
    access: DocumentAccess | None = None


def stored_now() -> datetime:
    """Now, as the store keeps it (milliseconds): what a later read returns."""
    now = utcnow()
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


@dataclass(frozen=True)
class _Prepared:
    """A parsed document made ready to write: its chunks, their unit vectors (``keep``:
    the rows that embed to something), the embedder's name and the sentence counts."""

    chunks: list[Chunk]
    vectors: npt.NDArray[np.float32]
    keep: npt.NDArray[np.bool_]
    embedder: str
    counts: tuple[int, Mapping[str, int]] | None

    def rows(self) -> list[ChunkRow]:
        """Each chunk's text, pages, page offsets and location, as the store writes them."""
        return [
            (chunk.text, chunk.pages, chunk.page_offsets, chunk.location) for chunk in self.chunks
        ]

    def added(self, document: Document) -> Callable[[WrittenDocument | None], Rows | None] | None:
        """The rows a write of ``document`` adds, from what the store returns (every
        chunk id in order and the document's seq; ``None``: nothing written); ``None``
        for a write that may also delete (a replacement, under an ``external_id``):
        then the index reads the change log, which holds both."""
        if document.external_id is not None:
            return None
        vectors, keep = self.vectors, self.keep

        def rows(written: WrittenDocument | None) -> Rows | None:
            if written is None:
                return None
            ids = np.asarray(written.chunk_ids, dtype=np.int64)
            kept = vectors
            if not keep.all():
                ids, kept = ids[keep], vectors[keep]
            return ids, kept, np.full(ids.shape[0], written.seq, dtype=np.int64)

        return rows


class IngestPipeline:
    """Indexes uploads: the steps every upload goes through, wherever it runs.

    :param store: where documents, chunks and vectors are written.
    :param settings: the upload, parsing, chunking and work limits.
    :param embedding: the core's embedder.
    :param write: runs a document's store write (``Writer``).
    :param terms: counts each document's sentences and word stems, stored with it for
        chat's word rarity; ``None``: no counts are kept.
    :param events: a background job's document records ``document.ready`` here, in its
        store transaction; ``None``: no event.
    :param ocr: reads the scanned pages of PDFs (``Settings.ocr``); ``None``: they are
        indexed without text, and listed in the document's ``warnings``.
    """

    def __init__(
        self,
        store: IngestingStore,
        settings: Settings,
        embedding: Embedding,
        write: Writer,
        *,
        terms: TermCounter | None = None,
        events: EventBus | None = None,
        ocr: OcrEngine | None = None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._embedding = embedding
        self._write = write
        self._terms = terms
        self._events = events
        self._ocr = ocr

    def parse_upload(
        self,
        data: bytes,
        filename: str,
        content_type: str | None,
        cancellation: Cancellation | None = None,
    ) -> ParsedDocument:
        """``parse_document`` with this core's limits (``parse_with_limits``)."""
        return parse_with_limits(
            self._settings, data, filename, content_type, cancellation, self._ocr
        )

    def store_new(
        self,
        key: tuple[str, str],
        parsed: ParsedDocument,
        size: int,
        labels: Labels,
        cancellation: Cancellation | None = None,
    ) -> Document:
        """Index ``parsed`` (``size`` bytes uploaded) as a new ``ready`` document of the
        workspace ``key``, in one transaction; nothing is stored if it fails or
        ``cancellation`` fires first."""
        prepared = self._prepare(parsed, cancellation)
        document = Document(
            id=new_id("doc"),
            source=parsed.source,
            content_type=parsed.content_type,
            pages=len(parsed.pages),
            chunks=len(prepared.chunks),
            bytes=size,
            created_at=stored_now(),
            metadata=labels.metadata,
            external_id=labels.external_id,
            access=labels.access,
            warnings=parsed.warnings,
        )

        def store_write() -> WrittenDocument:
            return self._store.insert_document(
                *key,
                document,
                prepared.rows(),
                prepared.embedder,
                prepared.vectors,
                prepared.keep,
                term_counts=prepared.counts,
            )

        if cancellation is not None:
            cancellation.check()  # the last point at which stopping leaves nothing behind
        self._write(*key, store_write, added=prepared.added(document))
        return document

    def run_ingest_job(self, job: IngestJob, cancellation: Cancellation) -> Completed | None:
        """Index a leased background job's upload; its document becomes ``ready``.

        What an ingestion worker runs (a process or a thread). Returns the ready
        document and its ``document.ready`` event (recorded in the outbox in the same
        transaction, so once; the caller announces it to in-process listeners), or
        ``None`` when the document is no longer ``processing`` (deleted meanwhile).
        Errors propagate: the worker records them as the document's ``last_error``.
        """
        key = (job.organization_id, job.environment)
        document = self._store.get_document(*key, job.document_id)
        if document is None or document.status != "processing":
            return None
        data = self._store.ingest_job_data(job.document_id)
        if data is None:
            return None
        if job.kind == "text":
            parsed = parse_text(job.filename, decode_text(data, param="text"))
        else:
            parsed = self.parse_upload(data, job.filename, job.content_type, cancellation)
        del data  # the chunks hold the text from here on: let the upload go
        prepared = self._prepare(parsed, cancellation)
        ready = document.model_copy(
            update={
                "content_type": parsed.content_type,
                "pages": len(parsed.pages),
                "chunks": len(prepared.chunks),
                "status": "ready",
                "warnings": parsed.warnings,
            }
        )
        del parsed
        recorded = _ReadyEvent(self._events, key)

        def store_write() -> WrittenDocument | None:
            return self._store.complete_document(
                *key,
                ready,
                prepared.rows(),
                prepared.embedder,
                prepared.vectors,
                prepared.keep,
                term_counts=prepared.counts,
                event=recorded.make if self._events is not None else None,
            )

        cancellation.check()
        written = self._write(*key, store_write, added=prepared.added(ready))
        if written is None:
            return None
        return Completed(written.document or ready, recorded.event)

    def _prepare(self, parsed: ParsedDocument, cancellation: Cancellation | None) -> _Prepared:
        """Chunk ``parsed``, embed its chunks and count their sentences (each chunk's text
        as embedders read it: ``bounded_text``)."""
        settings = self._settings
        chunks = chunk_pages(
            parsed.pages,
            labels=parsed.labels,
            target_chars=settings.chunk_target_chars,
            overlap_chars=settings.chunk_overlap_chars,
            max_chunks=settings.max_document_chunks,
            cancellation=cancellation,
        )
        if not chunks:
            raise ValidationFailed(
                "The document has no text to index.", code="no_text", param="file"
            )
        texts = [bounded_text(chunk.text, settings.max_token_chars) for chunk in chunks]
        vectors, keep, embedder = self._embedding.passages(
            texts, cancellation=cancellation, bounded=True
        )
        counts = None
        if self._terms is not None:
            counted = self._terms.count(texts)
            counts = counted.sentences, counted.stems
        return _Prepared(chunks, vectors, keep, embedder, counts)


class _ReadyEvent:
    """The ``document.ready`` event of a job's document, made in the store's transaction
    of the metadata stored then (a PATCH while the job ran may have replaced it)."""

    def __init__(self, events: EventBus | None, key: tuple[str, str]) -> None:
        self._events = events
        self._key = key
        self.event: Event | None = None

    def make(self, stored: Document) -> Event:
        """The event for ``stored`` (kept in ``event``)."""
        assert self._events is not None
        organization_id, environment = self._key
        self.event = self._events.prepare(
            "document.ready",
            document_event(stored),
            organization_id=organization_id,
            environment=check_environment(environment),
        )
        return self.event
