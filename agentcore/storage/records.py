"""Small records the stores return besides the wire models."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from agentcore.schema import Document, Usage, WebhookSubscription

Ids = npt.NDArray[np.int64]
"""Vector ids (a vector's id is its chunk's)."""
Vectors = npt.NDArray[np.float32]
"""Vectors, one row each."""
ChunkRow = tuple[str, list[int], list[int]] | tuple[str, list[int], list[int], str | None]
"""One chunk as written: ``(text, pages, page offsets)``, and its location label if any."""
Chunks = Sequence[ChunkRow]
"""A document's chunks (``ChunkRow`` each)."""
TermCounts = tuple[int, Mapping[str, int]]
"""A document's ``(sentences, {stem: sentences holding it})``."""

#: Where the store keeps one vector: ``segment_id << LOCATOR_SHIFT | row_in_segment``
#: (a segment holds at most ``2**LOCATOR_SHIFT`` rows), or -1 for none.
LOCATOR_SHIFT = 20


def segment_locators(segment_ids: Sequence[int], counts: Sequence[int]) -> Ids:
    """The locators of the rows of consecutive vector segments: ``counts[i]`` rows of
    segment ``segment_ids[i]`` each, in one array (no Python per segment: SQLite's
    segments are small, so a workspace has many)."""
    sizes = np.asarray(counts, dtype=np.int64).reshape(-1)
    first = np.cumsum(sizes) - sizes  # each segment's first position in the result
    base = (np.asarray(segment_ids, dtype=np.int64).reshape(-1) << LOCATOR_SHIFT) - first
    return np.repeat(base, sizes) + np.arange(int(sizes.sum()), dtype=np.int64)


@dataclass(frozen=True)
class StoredChunk:
    """A chunk with its document's source: what search results are made of."""

    id: int
    document_id: str
    source: str
    text: str
    pages: list[int]
    page_offsets: list[int]
    metadata: dict[str, Any] = field(default_factory=dict)  # its document's
    location: str | None = None  # the label in force where it starts (``Chunk.location``)


@dataclass(frozen=True)
class KnowledgeState:
    """Which embedder indexed a workspace, its dimension, and a change counter.

    ``index_dtype`` is how the workspace's in-memory index stores its rows (a name in
    ``kernels.CODECS``), fixed by its first knowledge write (``claim_index_dtype``);
    ``None`` until then.
    """

    embedder: str | None
    dimension: int | None
    version: int
    index_dtype: str | None = None


class StaleEmbedder(Exception):
    """A document write found its workspace indexed by another embedder or dimension
    than its vectors'; the write stored nothing (``insert_document``,
    ``complete_document``). ``WorkspaceIndexes.write`` then brings the workspace to its
    embedder (a re-embed, or a 409 on a dimension change) and writes again."""


@dataclass(frozen=True)
class KnowledgeChanges:
    """What changed in a workspace's index after a version, up to ``version``.

    Rows added (ids and unit-length float32 vectors, one row each) and ids deleted;
    a cached index at the earlier version applies both (adds first) to reach
    ``version`` without reloading the workspace.
    """

    version: int
    added_ids: Ids
    added_vectors: Vectors
    deleted_ids: Ids
    # each added row's label: its document's ``seq`` (``-1``: none); ``None``: unknown
    added_labels: Ids | None = None


@dataclass(frozen=True)
class IndexRows:
    """A workspace's indexed rows as one snapshot read: ids, unit vectors (``None``
    when not asked for), each row's label, its document's ``seq`` (``-1``: none), and
    where the store keeps each row (``None`` when not asked for)."""

    ids: Ids
    vectors: Vectors | None
    labels: Ids
    locators: Ids | None = None  # ``LOCATOR_SHIFT``; asked for by ``load_index(located=True)``


@dataclass(frozen=True)
class WrittenDocument:
    """What a document write stored: every chunk id in chunk order (chunk ids are the
    vector ids), the document's ``seq``, the label its index rows carry, and (from
    ``complete_document``) the document as stored, with the metadata it holds then."""

    chunk_ids: list[int]
    seq: int
    document: Document | None = None


@dataclass(frozen=True)
class DocumentRow:
    """A document as filters see it: its ``seq`` (its rows' label), id, metadata, and
    who may read it (``access``: ``{"users": [...], "groups": [...]}``, ``None`` for
    everyone)."""

    seq: int
    id: str
    metadata: dict[str, Any]
    access: dict[str, list[str]] | None = None


@dataclass(frozen=True)
class DocumentChanges:
    """The documents written (stored, completed, or given new metadata) after a
    version, as of the workspace's ``version``."""

    version: int
    documents: list[DocumentRow]


@dataclass(frozen=True)
class TokenTake:
    """The outcome of taking one token from a stored bucket."""

    allowed: bool
    tokens: float  # left in the bucket after this take


@dataclass(frozen=True)
class StoredSubscription:
    """A webhook subscription with what only the server sees (secrets, failure state)."""

    public: WebhookSubscription
    organization_id: str
    environment: str
    secret: str
    previous_secret: str | None
    previous_secret_expires_at: float | None
    failing_since: float | None


@dataclass(frozen=True)
class DueDelivery:
    """A leased delivery with everything needed to send it."""

    id: str
    event_id: str
    subscription_id: str
    attempts: int
    url: str
    secrets: list[str]
    failing_since: float | None
    event_type: str
    event_timestamp: str
    event_data: dict[str, Any]


@dataclass(frozen=True)
class StoredMessage:
    """One message of a conversation; ``citations`` as ``[{source, pages}]``, ``usage``
    the tokens its chat model reported (answers only, when it reported any),
    ``tool_calls`` as ``[{id, type, name, arguments}]``; ``question`` and ``handoff``
    are what an agent's stats group by and tell apart (``AgentStore.agent_stats``)."""

    role: str
    content: str
    citations: list[dict[str, Any]]
    usage: Usage | None = None
    tool_calls: list[dict[str, Any]] | None = None  # an answer waiting for the caller's tools
    tool_call_id: str | None = None  # a ``tool`` message: the call whose output it is
    # the question normalised (``conversations.question_text``): a user's message, its
    # own; an answer, that of the message it answers
    question: str | None = None
    handoff: str | None = None  # an answer that handed off: why (the ``agent.handoff`` reason)


@dataclass(frozen=True)
class PendingTurn:
    """A chat turn paused for the outputs of tools the caller runs, kept with its
    conversation so any process can resume it: ``state`` is what the chat needs to go
    on (JSON), ``expires_at`` when it stops waiting (Unix seconds)."""

    id: str
    state: dict[str, Any]
    expires_at: float


@dataclass(frozen=True)
class Backlog:
    """Work waiting in the store, summed over every tenant (what the metrics report):
    ingestion jobs leased by a worker now (``running``) or waiting (``queued``), and
    webhook deliveries still to be sent or given up on."""

    ingest_queued: int
    ingest_running: int
    deliveries_pending: int
    deliveries_failed: int


@dataclass(frozen=True)
class ConnectionStats:
    """A store's database connections in this process: open now, and where the
    database's pool says so (PostgreSQL), those lent out, its maximum and the callers
    waiting for one; ``None`` where a database keeps no such count (SQLite opens one
    connection per thread and never makes a caller wait for one)."""

    open: int
    in_use: int | None = None
    max: int | None = None
    waiting: int | None = None


@dataclass(frozen=True)
class StoredResult:
    """The result kept for an idempotency key: a status and a JSON body.

    A success's body is the resource as JSON; a failure's (status 400 and up) is the
    error's fields (``AgentCoreError.as_dict``). Adapters turn it into a response.
    ``conversation_id`` names the conversation whose messages the body holds (a chat
    answer): deleting that conversation deletes the result too.
    """

    status: int
    body: str
    conversation_id: str | None = None

    @property
    def failed(self) -> bool:
        """Whether the kept result is an error."""
        return self.status >= 400


@dataclass(frozen=True)
class IngestJob:
    """A leased background ingestion job of a ``processing`` document.

    ``kind`` is ``file`` (bytes parsed like an upload, ``content_type`` as declared)
    or ``text`` (UTF-8 text stored under ``filename`` as its source name).
    ``attempts`` counts claims, this one included. The raw upload is read apart
    (``ingest_job_data``), so the worker holds it only while it parses it.
    """

    document_id: str
    organization_id: str
    environment: str
    kind: str
    filename: str
    content_type: str | None
    attempts: int


def segment_arrays(
    ids: npt.ArrayLike, vectors: npt.ArrayLike, dimension: int
) -> tuple[Ids, Vectors]:
    """``ids`` and ``vectors`` as the little-endian int64/float32 buffers every store
    persists as a vector segment; ``ValueError`` unless the shape is (len(ids), dimension).
    """
    id_array = np.ascontiguousarray(ids, dtype="<i8")
    matrix = np.ascontiguousarray(vectors, dtype="<f4")
    if matrix.ndim != 2 or matrix.shape != (len(id_array), dimension):
        raise ValueError("vectors must have shape (len(ids), dimension)")
    return id_array, matrix


@dataclass(frozen=True)
class StoredClientToken:
    """A client token's row, with what authenticating it needs from its minting key.

    ``key_revoked_at``/``key_expires_at`` are the minting key's: a token ends with it.
    """

    id: str
    organization_id: str
    organization: str
    environment: str
    key_id: str
    key_scopes: list[str]
    user: str
    groups: list[str]
    agents: list[str] | None
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None = None
    key_revoked_at: datetime | None = None
    key_expires_at: datetime | None = None
