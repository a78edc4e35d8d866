"""Routes: /v1/knowledge — documents (upload, text, list, get, delete) and search."""

from __future__ import annotations

from collections.abc import Hashable
from typing import cast

from agentcore.errors import ValidationFailed
from agentcore.schema import (
    Deleted,
    Document,
    DocumentList,
    DocumentUpdate,
    SearchRequest,
    SearchResponse,
    TextDocumentCreate,
)
from agentcore_starlette.routing import PAGINATION, ApiRoute, Call


def create_document(call: Call) -> Document:
    """Ingest a PDF, Markdown or text file (multipart ``file``, and optionally
    ``metadata``: a JSON object, and ``external_id``). This path takes the JSON body of
    ``POST /v1/knowledge/documents/text`` as well (``{source, text, metadata?,
    external_id?}``), which is declared there so that generated clients get one
    request body per operation.

    201 with the ready document; 202 with it in status ``processing`` (poll ``GET``
    until ``ready`` or ``failed``, or subscribe to ``document.ready`` and
    ``document.failed``) when the file is larger than ``ingest_sync_max_bytes``, when
    every ingestion worker is busy, or when the worker is still at it as the request's
    deadline nears. The upload is stored before a worker starts on it, so it is never
    lost to a timeout; a file the worker refuses (a 4xx) is not kept.
    """
    knowledge = call.workspace.knowledge
    if call.upload is not None:
        upload = call.upload
        return knowledge.ingest_file(
            upload.data,
            filename=upload.filename,
            content_type=upload.content_type,
            metadata=upload.metadata,
            external_id=upload.external_id,
            access=upload.access,
            cancellation=call.cancellation,
        )
    body = cast(TextDocumentCreate, call.body)
    return knowledge.ingest_text(
        body.source,
        body.text,
        metadata=body.metadata,
        external_id=body.external_id,
        access=body.access,
        cancellation=call.cancellation,
    )


def create_text_document(call: Call) -> Document:
    """Ingest text sent as JSON ``{source, text, metadata?, external_id?}``, as a file of
    that name would be (``POST /v1/knowledge/documents`` takes the same body). 201 with
    the ready document, or 202 with it ``processing``, as for an upload."""
    return create_document(call)


def _processing(document: Document) -> bool:
    return document.status == "processing"


def list_documents(call: Call) -> DocumentList:
    """A page of documents, newest first."""
    return call.workspace.knowledge.list(
        limit=call.int_query("limit"), starting_after=call.str_query("starting_after")
    )


def get_document(call: Call) -> Document:
    """One document."""
    return call.workspace.knowledge.get(call.path["document_id"])


def update_document(call: Call) -> Document:
    """Replace a document's metadata and its access list (each when given); searches
    everywhere see it at once."""
    body = cast(DocumentUpdate, call.body)
    if not body.model_fields_set:  # the document declares minProperties: 1
        raise ValidationFailed(
            "Give the new metadata, the new access list, or both.", param="metadata"
        )
    if "access" in body.model_fields_set:
        return call.workspace.knowledge.update(
            call.path["document_id"], metadata=body.metadata, access=body.access
        )
    return call.workspace.knowledge.update(call.path["document_id"], metadata=body.metadata)


def delete_document(call: Call) -> Deleted:
    """Delete a document and its chunks."""
    return call.workspace.knowledge.delete(call.path["document_id"])


def _index_current(call: Call) -> bool:
    # a search now runs on the loaded index as it is: it neither loads nor catches up;
    # a reranked one waits for its reranker (a network call), so never on the event loop
    if cast(SearchRequest, call.body).rerank:
        return False
    return call.workspace.knowledge.index_is_current()


def search_knowledge(call: Call) -> SearchResponse:
    """Chunks ranked by cosine similarity to the query (``mode`` ``vector``), by BM25
    (``keyword``) or by both fused (``hybrid``), among the documents ``filter`` selects;
    with ``rerank``, the best of those by the core's reranker."""
    body = cast(SearchRequest, call.body)
    return call.workspace.knowledge.search(
        body.query,
        top_k=body.top_k,
        min_score=body.min_score,
        filter=body.filter,
        mode=body.mode,
        user=body.user,
        rerank=body.rerank,
    )


def _search_batch_key(call: Call) -> Hashable | None:
    # vector searches of one workspace with the same options, each for no end user, can
    # share one scan; a search for a user (``user`` in the body, or a client token, which
    # always acts for its user) sees only that user's documents, so it runs alone: the
    # batch runs as its first call's caller; a reranked search calls its reranker alone
    body = cast(SearchRequest, call.body)
    ws = call.workspace
    if body.filter is not None or body.user is not None or ws.client is not None:
        return None
    if body.rerank:
        return None
    if body.mode not in (None, "vector"):
        return None
    return (ws.organization_id, ws.environment, body.top_k, body.min_score)


def search_knowledge_batch(calls: list[Call]) -> list[SearchResponse]:
    """``search_knowledge`` for calls of one ``_search_batch_key``, answered together."""
    bodies = [cast(SearchRequest, call.body) for call in calls]
    return calls[0].workspace.knowledge.search_many(
        [body.query for body in bodies], top_k=bodies[0].top_k, min_score=bodies[0].min_score
    )


_ONE = "/knowledge/documents/{document_id}"
ROUTES = [
    ApiRoute(
        method="POST",
        path="/knowledge/documents",
        handler=create_document,
        response=Document,
        summary="Add a document",
        scope="write",
        tag="knowledge",
        body="json_or_upload",
        request=TextDocumentCreate,
        status_code=201,
        accepted=_processing,
    ),
    ApiRoute(
        method="POST",
        path="/knowledge/documents/text",
        handler=create_text_document,
        response=Document,
        summary="Add a document from text",
        scope="write",
        tag="knowledge",
        body="json",
        request=TextDocumentCreate,
        status_code=201,
        accepted=_processing,
    ),
    ApiRoute(
        method="GET",
        path="/knowledge/documents",
        handler=list_documents,
        response=DocumentList,
        summary="List documents",
        scope="read",
        tag="knowledge",
        query=PAGINATION,
    ),
    ApiRoute(
        method="GET",
        path=_ONE,
        handler=get_document,
        response=Document,
        summary="Retrieve a document",
        scope="read",
        tag="knowledge",
    ),
    ApiRoute(
        method="PATCH",
        path=_ONE,
        handler=update_document,
        response=Document,
        summary="Update a document's metadata",
        scope="write",
        tag="knowledge",
        body="json",
        request=DocumentUpdate,
    ),
    ApiRoute(
        method="DELETE",
        path=_ONE,
        handler=delete_document,
        response=Deleted,
        summary="Delete a document",
        scope="write",
        tag="knowledge",
    ),
    ApiRoute(
        method="POST",
        path="/knowledge/search",
        handler=search_knowledge,
        response=SearchResponse,
        summary="Search the knowledge core",
        scope="read",
        tag="knowledge",
        end_users=True,
        body="json",
        request=SearchRequest,
        quick_when=_index_current,
        batch_key=_search_batch_key,
        batch=search_knowledge_batch,
    ),
]
