"""KnowledgeService: the documents of one workspace, and search over them.

The facade host code reaches as ``workspace.knowledge``: it checks the caller's scope and
arguments, then hands the work to the rooms that do it: uploads to the ingest pipeline
(``knowledge.ingest``), searches to ``knowledge.search``, a document's reads and writes
to the store (its vectors kept in step by the core's ``VectorBackend``).
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from types import EllipsisType
from typing import TYPE_CHECKING, Any

from agentcore._cancellation import Cancellation
from agentcore.errors import NotFound, PayloadTooLarge, ValidationFailed, check_unicode
from agentcore.knowledge._filters import (
    MetadataCache,
    check_access,
    check_metadata,
    check_user,
)
from agentcore.knowledge._reranking import Reranking
from agentcore.knowledge._search import Search
from agentcore.knowledge.embedders import bounded_text
from agentcore.knowledge.ingest import (
    IngestionJobs,
    IngestPipeline,
    Labels,
    Upload,
    Uploads,
    check_text,
    check_upload,
    parse_text,
    text_kind,
)
from agentcore.knowledge.terms import TermStats
from agentcore.knowledge.vectors import Embedding, VectorBackend
from agentcore.observer import Observer, unobserved
from agentcore.schema import (
    MAX_EXTERNAL_ID_CHARS,
    Deleted,
    Document,
    DocumentAccess,
    DocumentList,
    EndUser,
    Filter,
    SearchMode,
    SearchResponse,
)
from agentcore.storage.records import StoredChunk

if TYPE_CHECKING:
    from agentcore.config import Settings
    from agentcore.knowledge._keyword_cache import KeywordCache
    from agentcore.knowledge.terms import TermCounter
    from agentcore.storage.base import KnowledgeStore
    from agentcore.workspace import Workspace

__all__ = ["KnowledgeService", "check_external_id"]


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


class KnowledgeService:
    """The knowledge core of one workspace; reached as ``workspace.knowledge``.

    :param workspace: whose documents, and the scopes the caller holds.
    :param store: where documents, chunks and vectors are kept.
    :param settings: upload, chunking and search limits.
    :param index: where the core ranks vectors (its workspace indexes, or the store).
    :param embedding: the core's embedder: queries become rows there.
    :param pipeline: the core's ingest pipeline: uploads indexed in this thread.
    :param jobs: the core's ingestion jobs (worker processes, or a thread): uploads
        that are not small plain text go there; ``None``: every upload is indexed in
        the calling thread, or queued for ``wait=False``.
    :param terms: the sentence and word-stem counts chat's word rarity reads
        (``term_stats``); ``None``: none are kept.
    :param metadata: the core's tables of document metadata, which filters read
        (``None``: one of its own).
    :param keywords: the core's keyword (BM25) indexes; ``None``: keyword and hybrid
        searches are refused.
    :param reranking: the core's rerankers; ``None``: reranked searches are refused.
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
        pipeline: IngestPipeline,
        jobs: IngestionJobs | None = None,
        terms: TermCounter | None = None,
        metadata: MetadataCache | None = None,
        keywords: KeywordCache | None = None,
        reranking: Reranking | None = None,
        observer: Observer = unobserved,
    ) -> None:
        self._ws = workspace
        self._store = store
        self._settings = settings
        self._index = index
        self._pipeline = pipeline
        self._jobs = jobs
        self._terms = terms
        key = (workspace.organization_id, workspace.environment)
        self._search = Search(
            key,
            store=store,
            settings=settings,
            index=index,
            embedding=embedding,
            metadata=metadata or MetadataCache(store),
            keywords=keywords,
            reranking=reranking,
            observer=observer,
        )
        self._uploads = Uploads(
            key, store=store, settings=settings, pipeline=pipeline, jobs=jobs, discard=self._discard
        )

    @property
    def _scope(self) -> tuple[str, str]:
        return self._ws.organization_id, self._ws.environment

    # ingestion -----------------------------------------------------------------

    def ingest_file(
        self,
        data: bytes,
        *,
        filename: str,
        content_type: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        external_id: str | None = None,
        access: DocumentAccess | Mapping[str, Any] | None = None,
        wait: bool | None = None,
        cancellation: Cancellation | None = None,
    ) -> Document:
        """Parse, chunk, embed and store a file. Write scope.

        PDF, Word (.docx), PowerPoint (.pptx), Excel (.xlsx), CSV, HTML, Markdown and
        plain text are read (Office files need the ``office`` extra); search results and
        citations of slides, sheets and headings name them in ``location``.

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

        ``access``: who may read it when a search or chat acts for an end user
        (``{"users": [...], "groups": [...]}``, at most 256 of each, 1-128 characters);
        ``None`` (default): everyone in the workspace.

        Either the whole document is stored (document, chunks, vectors in one
        transaction) or nothing is. Once the core is started (``core.start()``; the
        HTTP app's lifespan does it), PDFs, Office files, HTML and all but small text
        and CSV files are parsed and embedded in a worker process, under the
        ``ingest_*`` time and memory limits; the upload is stored as a ``processing``
        document first.

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
        labels = Labels(
            check_metadata(metadata), check_external_id(external_id), check_access(access)
        )
        source, kind = check_upload(
            data, filename, content_type, max_bytes=self._settings.max_upload_bytes
        )
        upload = Upload(
            "file",
            data,
            filename,
            content_type,
            source,
            kind,
            labels,
            parse=lambda: self._pipeline.parse_upload(data, filename, content_type, cancellation),
        )
        return self._uploads.ingest(upload, wait, cancellation)

    def ingest_text(
        self,
        source: str,
        text: str,
        *,
        metadata: Mapping[str, Any] | None = None,
        external_id: str | None = None,
        access: DocumentAccess | Mapping[str, Any] | None = None,
        wait: bool | None = None,
        cancellation: Cancellation | None = None,
    ) -> Document:
        """Store text under a source name, as a file of that name would be. Write scope.

        The source's extension says the type: ``.md`` (or ``.markdown``) is Markdown,
        one page; anything else is plain text, split into pages at form feeds (``\\f``),
        so ``ingest_text("notes.txt", "A.\\fB.")`` has two pages. ``metadata``,
        ``external_id``, ``access``, ``wait`` and ``cancellation`` work as for
        ``ingest_file``.
        """
        self._ws.require("write")
        attributes = check_metadata(metadata)
        check_unicode(source, param="source")
        check_unicode(text, param="text")
        labels = Labels(attributes, check_external_id(external_id), check_access(access))
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
        upload = Upload(
            "text",
            encoded,
            source,
            None,
            source.strip(),
            text_kind(source),
            labels,
            parse=lambda: parse_text(source, text),
        )
        return self._uploads.ingest(upload, wait, cancellation)

    def term_stats(self, text: str) -> TermStats:
        """How many sentences this workspace holds and how many of them hold each stem of
        ``text`` (a question): the rarity chat weighs question words by. Read scope."""
        self._ws.require("read", end_users=True)
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

    def update(
        self,
        document_id: str,
        *,
        metadata: Mapping[str, Any] | None = None,
        access: DocumentAccess | Mapping[str, Any] | None | EllipsisType = ...,
    ) -> Document:
        """Replace a document's metadata (``{}`` clears it; ``None`` keeps it) and its
        access list (``None``: everyone may read it; left out: kept). Write scope.

        Searches see the change at once, in every process and on every node: the write
        advances the workspace's version, and each process's filters catch up with the
        documents written since (``MetadataCache``). Bad metadata or a bad access list is
        a 422 naming the key, and nothing changes.
        """
        self._ws.require("write")
        attributes = None if metadata is None else check_metadata(metadata)
        readers = access if isinstance(access, EllipsisType) else check_access(access)
        updated = self._store.update_metadata(*self._scope, document_id, attributes, access=readers)
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

        deleted = self._index.write(*self._scope, store_write)
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
        user: EndUser | Mapping[str, Any] | None = None,
        rerank: bool = False,
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
        :param user: search for this end user (``{"id": ..., "groups": [...]}``): only
            documents without an access list, or whose list names the user or one of
            their groups, applied before the top ``top_k`` as ``filter`` is.
        :param rerank: have the core's reranker order the top ``rerank_candidates`` and
            keep its best ``top_k``, each with its ``rerank_score`` (a 400
            ``reranker_unavailable`` when the core has none); a reranker that fails or
            times out leaves the first order, without ``rerank_score``.
        """
        self._ws.require("read", end_users=True)
        reader = self._ws.reader(check_user(user))
        return self._search.search(
            query,
            top_k=top_k,
            min_score=min_score,
            filter=filter,
            mode=mode,
            user=reader,
            rerank=rerank,
        )

    def search_many(
        self,
        queries: Sequence[str],
        *,
        top_k: int | None = None,
        min_score: float | None = None,
        filter: Filter | Mapping[str, Any] | None = None,
        mode: SearchMode | None = None,
        user: EndUser | Mapping[str, Any] | None = None,
        rerank: bool = False,
    ) -> builtins.list[SearchResponse]:
        """``search`` for each of ``queries`` with the same options: their answers, in
        order. Read scope. A query ``search`` refuses makes the whole call fail with
        the same error (its ``param`` ``queries.<i>`` for the query itself).

        In ``vector`` mode without a filter the queries are embedded together and
        scored against the index in one matrix product, which costs about half of a
        search each when there are eight (the HTTP adapter batches concurrent
        searches so); a score may then differ from a lone search's in the last bit of
        its float32, and so may the order of two results that close. Reranked
        searches run one by one.
        """
        self._ws.require("read", end_users=True)
        reader = self._ws.reader(check_user(user))
        return self._search.search_many(
            queries,
            top_k=top_k,
            min_score=min_score,
            filter=filter,
            mode=mode,
            user=reader,
            rerank=rerank,
        )

    def index_is_current(self) -> bool:
        """Whether a search now runs on this process's loaded index as it is, without
        loading or catching up (one small read of the workspace's version). Read scope.

        The HTTP adapter asks before running a search on its event loop.
        """
        self._ws.require("read", end_users=True)
        return self._search.is_current()

    def retrieve(
        self,
        query: str,
        k: int,
        min_score: float | None = None,
        *,
        filter: Filter | None = None,
        mode: SearchMode = "vector",
        user: EndUser | None = None,
        rerank: bool = False,
    ) -> builtins.list[tuple[StoredChunk, float]]:
        """The top ``k`` chunks and their cosine scores for ``query``, among the
        documents ``filter`` selects that ``user`` may read, ranked as ``mode`` says and
        reranked with ``rerank`` when the core has a reranker (else logged and counted;
        no argument checks; chat uses it). Read scope."""
        self._ws.require("read", end_users=True)
        return self._search.retrieve(
            query, k, min_score, filter=filter, mode=mode, user=user, rerank=rerank
        )
