"""Uploads: where a workspace's upload is indexed, and what its caller is answered.

An upload is indexed in the caller's thread (small text, or no worker processes), or
stored as a ``processing`` document and its job, and then either returned at once or
waited for while a worker of this process takes it (see ``KnowledgeService.ingest_file``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from agentcore._ids import new_id
from agentcore.errors import Cancelled, Conflict
from agentcore.knowledge.ingest._formats import INLINE_TYPES
from agentcore.knowledge.ingest._outcomes import Outcome, outcome_of
from agentcore.knowledge.ingest._parsing import ParsedDocument
from agentcore.knowledge.ingest._pipeline import (
    IngestingStore,
    IngestPipeline,
    Labels,
    stored_now,
)
from agentcore.schema import Document

if TYPE_CHECKING:
    from agentcore._cancellation import Cancellation
    from agentcore.config import Settings
    from agentcore.knowledge.ingest._jobs import IngestionJobs

__all__ = ["Upload", "Uploads"]


class Upload:
    """One upload, checked: its bytes and how it is named and typed.

    :param kind: ``"file"`` or ``"text"`` (a job parses it again accordingly).
    :param data: the bytes (a text's UTF-8).
    :param filename: the uploaded name (a text's source).
    :param declared: the declared media type (``None`` for a text).
    :param source: the document's source name.
    :param content_type: the canonical type detected.
    :param labels: its metadata and external id.
    :param parse: parses it, in the calling thread.
    """

    def __init__(
        self,
        kind: str,
        data: bytes,
        filename: str,
        declared: str | None,
        source: str,
        content_type: str,
        labels: Labels,
        parse: Callable[[], ParsedDocument],
    ) -> None:
        self.kind = kind
        self.data = data
        self.filename = filename
        self.declared = declared
        self.source = source
        self.content_type = content_type
        self.labels = labels
        self.parse = parse

    def processing(self) -> Document:
        """Its document as queued: ``processing``, no pages or chunks yet."""
        return Document(
            id=new_id("doc"),
            source=self.source,
            content_type=self.content_type,
            pages=0,
            chunks=0,
            bytes=len(self.data),
            created_at=stored_now(),
            status="processing",
            metadata=self.labels.metadata,
            external_id=self.labels.external_id,
            access=self.labels.access,
        )


class Uploads:
    """The uploads of one workspace.

    :param key: the workspace: ``(organization_id, environment)``.
    :param store: where a queued upload and its job are kept.
    :param settings: the ``ingest_*`` sizes.
    :param pipeline: indexes an upload in the calling thread.
    :param jobs: the core's ingestion jobs; ``None``: every upload is indexed in the
        calling thread, or queued for ``wait=False``.
    :param discard: deletes a document (and its job): what a failed waited-for upload
        leaves is taken back.
    """

    def __init__(
        self,
        key: tuple[str, str],
        *,
        store: IngestingStore,
        settings: Settings,
        pipeline: IngestPipeline,
        jobs: IngestionJobs | None,
        discard: Callable[[str], bool],
    ) -> None:
        self._key = key
        self._store = store
        self._settings = settings
        self._pipeline = pipeline
        self._jobs = jobs
        self._discard = discard

    def ingest(
        self, upload: Upload, wait: bool | None, cancellation: Cancellation | None
    ) -> Document:
        """Queue ``upload``, index it in this thread, or hand it to a worker and wait, as
        ``KnowledgeService.ingest_file`` says for ``wait``."""
        settings = self._settings
        size = len(upload.data)
        if wait is False or (wait is None and size > settings.ingest_sync_max_bytes):
            document = upload.processing()
            self._store_job(document, upload)
            return document
        jobs = self._jobs
        if (
            jobs is None
            or not jobs.isolated
            or (upload.content_type in INLINE_TYPES and size <= settings.ingest_inline_max_bytes)
        ):
            parsed = upload.parse()
            return self._pipeline.store_new(self._key, parsed, size, upload.labels, cancellation)
        if cancellation is not None:
            cancellation.check()  # already stopped: store nothing
        document = upload.processing()
        outcome = jobs.run_and_wait(
            document.id,
            lambda: self._store_job(document, upload),
            lambda: outcome_of(self._store.get_document(*self._key, document.id)),
            organization_id=self._key[0],
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

    def _store_job(self, document: Document, upload: Upload) -> None:
        """Store a ``processing`` document and its job (the raw upload), atomically, and
        tell the jobs runtime."""
        self._store.insert_processing_document(
            *self._key,
            document,
            kind=upload.kind,
            filename=upload.filename,
            content_type=upload.declared,
            data=upload.data,
            now=time.time(),
        )
        if self._jobs is not None:
            self._jobs.wake()


def _wait_until(cancellation: Cancellation | None) -> float | None:
    """When a caller with ``cancellation`` stops waiting for a worker: a little before its
    deadline (an HTTP request's), so it can still answer 202 in time; ``None``: never."""
    deadline = None if cancellation is None else cancellation.deadline
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    return deadline - min(1.0, max(left, 0.0) / 10)
