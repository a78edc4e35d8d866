"""The ``Store`` protocol: what the core needs from a backend, in the slices it uses.

An internal interface: the seam between the core's policy and a database, which host
code never calls. The built-in stores implement it once, in ``storage/sql``, for SQLite
and PostgreSQL alike; a third-party store (returned by ``agentcore_open_store``)
implements ``Store``, every slice, and is held to the same contract by the conformance
suite (``tests/storage/test_store_conformance.py``, which runs each method of each
slice on both built-in stores; ``tests/storage/test_store_seam.py`` fails when a
method is added that the suite does not call).

Each slice is what one part of the core uses, and each part is typed with the
narrowest it needs, so a slice names exactly who depends on it:

- ``KeyStore``: organizations and API keys (``KeyManager``; ``AgentCore``)
- ``AgentStore``: agents, and the stats of their conversations (``AgentService``;
  chat reads them)
- ``DocumentStore``: documents and their chunks (``KnowledgeService``, ``Search``;
  ingestion reads a document's status)
- ``IndexStore``: each workspace's index state and change log, and what the indexes
  kept in step with them read: rows, texts, vectors (the vector engine in
  ``knowledge.vectors``, ``KeywordCache``, ``MetadataCache``)
- ``TermStore``: documents' sentence counts (``KnowledgeService.term_stats``)
- ``IngestStore``: the ingestion queue and the writes that make a document ready
  (``knowledge.ingest``)
- ``WebhookStore``: subscriptions and the event outbox (``WebhookService``,
  ``WebhookRuntime``)
- ``ConversationStore``: conversations and messages (``ChatService``,
  ``ConversationService``)
- ``IdempotencyStore``: idempotency keys (``IdempotencyKeys``)
- ``RateLimitStore``: token buckets shared by processes (``RateLimiter``)

``KnowledgeStore`` is the four knowledge slices (what ``KnowledgeService`` hands its
parts); ``Store`` is every slice and a lifecycle, held whole only by the composition
root (``AgentCore``). The optional capabilities at the end (``VectorSearchStore``,
``KeywordSnapshotStore``, ``ObservableStore``, ``BudgetedStore``, ``ReopenableStore``, ``EventWaiter``,
``Checkpointing``) are found with ``isinstance``; a store without one still works.

Every method takes plain values and returns models or small records, and scopes by
(organization_id, environment) where data is tenant data. Each call is one unit: a
write commits in a transaction of its own, all of it or nothing (``atomically``);
a read sees committed data, in one snapshot where its docstring says so. A write by
any process or node is seen by the next read of any other.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from datetime import datetime
from types import EllipsisType
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from agentcore._memory_budget import Residency, ResidencyStats
from agentcore.events import Event
from agentcore.schema import (
    Agent,
    AgentStats,
    ApiKey,
    Conversation,
    ConversationStatus,
    Delivery,
    Document,
    DocumentAccess,
    Feedback,
    Message,
    Organization,
    Problem,
)
from agentcore.storage.records import (
    Backlog,
    Chunks,
    ConnectionStats,
    DocumentChanges,
    DueDelivery,
    Ids,
    IndexRows,
    IngestJob,
    KnowledgeChanges,
    KnowledgeState,
    PendingTurn,
    StoredChunk,
    StoredClientToken,
    StoredMessage,
    StoredResult,
    StoredSubscription,
    TermCounts,
    TokenTake,
    Vectors,
    WrittenDocument,
)


class KeyStore(Protocol):
    """Organizations and API keys: what ``KeyManager`` and ``AgentCore`` use."""

    def ensure_organization(self, name: str) -> Organization:
        """The organization named ``name``, created if missing, in one transaction: of
        two callers creating it at once, both get the one stored."""

    def get_organization_by_name(self, name: str) -> Organization | None:
        """The organization named ``name``, or ``None``. One read."""

    def insert_key(self, key: ApiKey, organization_id: str, digest: str) -> None:
        """Store a new key's record and the SHA-256 digest of its secret, in one
        transaction."""

    def insert_keys(
        self,
        organization_id: str,
        keys: Sequence[tuple[ApiKey, str]],
        *,
        unless_usable_at: datetime | None = None,
    ) -> bool:
        """Store new keys' records, each with the SHA-256 digest of its secret, in one
        transaction; with ``unless_usable_at``, only if the organization has no key
        usable then (not revoked, not expired), checked in that transaction under the
        organization's row lock. Whether they were stored."""

    def find_key_by_digest(self, digest: str) -> tuple[ApiKey, str, str] | None:
        """``(key, organization_id, stored digest)``, or ``None``. One read; a change
        of the key (a revocation) by any process is seen by the very next call, even
        where answers are cached (every request authenticates)."""

    def get_key(self, key_id: str) -> ApiKey | None:
        """A key by id, or ``None``. One read."""

    def list_keys(self, organization_id: str) -> list[ApiKey]:
        """Keys of an organization, newest first. One read."""

    def update_key(self, key_id: str, **changes: Any) -> None:
        """Set ``revoked_at``, ``expires_at``, ``last_used_at`` or ``name`` (any other
        name: ``ValueError``), in one transaction."""

    def insert_client_token(self, token: StoredClientToken, digest: str) -> None:
        """Store a new client token's row and the SHA-256 digest of its secret."""

    def find_client_token_by_digest(self, digest: str) -> tuple[StoredClientToken, str] | None:
        """``(token, stored digest)``, with its organization's name and its minting key's
        scopes, revocation and expiry, or ``None``. One read; a revocation by any process
        is seen by the very next call."""

    def revoke_client_tokens(
        self, organization_id: str, environment: str, user: str, *, now: datetime
    ) -> int:
        """End every token of ``user`` in the workspace that is neither revoked nor
        expired at ``now``, in one transaction; how many."""

    def revoke_key_client_tokens(self, key_id: str, *, now: datetime) -> int:
        """End every live token minted by ``key_id`` (it was rotated); how many."""

    def sweep_client_tokens(self, *, before: datetime, limit: int) -> int:
        """Delete up to ``limit`` tokens that expired at ``before`` or earlier; how many."""


class AgentStore(Protocol):
    """Agents, and the stats of their conversations: what ``AgentService`` uses (and
    chat, to find the answering agent)."""

    def insert_agent(self, organization_id: str, environment: str, agent: Agent) -> None:
        """Store a new agent, in one transaction."""

    def get_agent(self, organization_id: str, environment: str, agent_id: str) -> Agent | None:
        """An agent of this workspace, or ``None``. One read."""

    def update_agent(
        self,
        organization_id: str,
        environment: str,
        agent: Agent,
        *,
        expected_status: str,
        fields: Collection[str] | None = None,
    ) -> bool:
        """Write an agent if its status is still ``expected_status``; whether it did.
        With ``fields``, only those (and ``updated_at``) are written, so a concurrent
        change of other fields stays; else every field is.

        Atomic: the check and the write are one, so of concurrent updates expecting
        the same status (on any node) exactly one succeeds.
        """

    def list_agents(
        self,
        organization_id: str,
        environment: str,
        *,
        limit: int,
        starting_after: str | None,
        statuses: tuple[str, ...],
    ) -> tuple[list[Agent], bool]:
        """A page of agents with one of ``statuses``, newest first, and ``has_more``,
        read in one snapshot; ``NotFound`` when ``starting_after`` is no agent of the
        workspace."""

    def agent_stats(
        self,
        organization_id: str,
        environment: str,
        agent_id: str,
        *,
        since: datetime | None,
        until: datetime | None,
        top: int,
    ) -> AgentStats:
        """What the agent's conversations (of this workspace) held from ``since``
        (included) to ``until`` (excluded), aware times (``None``: no bound), by each
        message's ``created_at``: the counts ``AgentStats`` describes, and its lists of
        at most ``top`` questions each. Aggregates the database computes (no message is
        read out), in one snapshot; an agent without messages has zeros.

        An answer is an ``assistant`` message without ``tool_calls``; ``answered``, one
        with citations; ``unanswered``, one without whose ``handoff`` is ``None`` or
        ``"no_relevant_knowledge"``; ``handoffs``, one with a ``handoff``. Questions are
        grouped by the messages' ``question`` (those without one are in no list):
        ``top_questions`` over the ``user`` messages, ``unanswered_questions`` over the
        unanswered answers; most first, ties by text in code point order.
        """

    def seal_mcp_headers(self, seal: Callable[[str], str]) -> int:
        """Replace every agent's stored MCP server headers by ``seal(value)`` where that
        changes them (``seal`` returns a value sealed already as it is), unless the
        agent's servers changed meanwhile; how many servers' headers were replaced, in
        every workspace. The agents are otherwise unchanged (``updated_at`` too). One
        transaction."""


class DocumentStore(Protocol):
    """Documents and their chunks as the knowledge service and search read and change
    them: what ``KnowledgeService`` and ``Search`` use (ingestion reads a document's
    status)."""

    def get_document(
        self, organization_id: str, environment: str, document_id: str
    ) -> Document | None:
        """A document of this workspace, or ``None``. One read."""

    def list_documents(
        self, organization_id: str, environment: str, *, limit: int, starting_after: str | None
    ) -> tuple[list[Document], bool]:
        """A page of documents, newest first, and ``has_more``, read in one snapshot;
        ``NotFound`` when ``starting_after`` is no document of the workspace."""

    def update_metadata(
        self,
        organization_id: str,
        environment: str,
        document_id: str,
        metadata: dict[str, Any] | None,
        *,
        access: DocumentAccess | None | EllipsisType = ...,
    ) -> Document | None:
        """Replace a document's metadata (unless ``None``) and its access list (unless
        ``...``; ``None`` is no list) and advance the workspace version, atomically; the
        updated document, or ``None`` when it is not in this workspace."""

    def delete_document(self, organization_id: str, environment: str, document_id: str) -> bool:
        """Delete a document with its chunks, vectors, sentence counts and any ingestion
        job; whether it existed. Atomic: one transaction that also advances the
        workspace version and logs the deleted rows (``IndexStore.changes_since``)."""

    def get_chunks(self, chunk_ids: Sequence[int]) -> dict[int, StoredChunk]:
        """Chunks by id (with their document's source and metadata); missing ids left
        out. One read."""


class IndexStore(Protocol):
    """Each workspace's index: its state and change log, the rows, texts and vectors
    the indexes kept in step with them read, and the re-embed that replaces them. What
    the vector engine (``knowledge.vectors``) uses, and the keyword indexes
    (``KeywordCache``) and document tables (``MetadataCache``) that follow the same
    version."""

    def knowledge_state(self, organization_id: str, environment: str) -> KnowledgeState:
        """Embedder, dimension, version and index dtype of a workspace index (version 0
        and no embedder for a workspace never written). One read; a write by any
        process is seen by the very next call, even where states are cached (every
        search asks)."""

    def claim_index_dtype(self, organization_id: str, environment: str, index_dtype: str) -> str:
        """The workspace's index dtype: the stored one, else ``index_dtype``, stored now.

        Atomic: of two processes claiming different dtypes for a new workspace, one
        wins and both get its dtype. Does not advance the workspace version.
        """

    def changes_since(
        self,
        organization_id: str,
        environment: str,
        version: int,
        *,
        max_rows: int,
        vectors: bool = True,
    ) -> KnowledgeChanges | None:
        """Rows added (with their labels, and their vectors if ``vectors``) and ids
        deleted after ``version``, read in one consistent snapshot.

        ``None`` when the change log cannot bring ``version`` up to date (older than
        the log keeps, e.g. after a re-embed; newer than the store; or more than
        ``max_rows`` rows added since): the caller then reloads the workspace.
        """

    def documents_changed(
        self, organization_id: str, environment: str, after: int | None
    ) -> DocumentChanges:
        """The workspace's version and the documents written after version ``after``
        (stored ready, completed, or given new metadata; ``None``: all), in one snapshot."""

    def load_index(
        self,
        organization_id: str,
        environment: str,
        dimension: int,
        *,
        vectors: bool = True,
        located: bool = False,
    ) -> IndexRows:
        """Every row of a workspace's index in one snapshot: ids, one contiguous float32
        matrix (``None`` unless ``vectors``), each row's label (its document's ``seq``,
        ``-1`` for rows of no document) and, if ``located``, where each row is kept: its
        locator (``records.LOCATOR_SHIFT``) for ``read_vector_rows``, valid for as long
        as the row is stored. ``ValueError`` when the stored vectors have another
        ``dimension``."""

    def load_vectors(
        self, organization_id: str, environment: str, dimension: int
    ) -> tuple[Ids, Vectors]:
        """Every vector of a workspace: an id array and one contiguous float32 matrix,
        in one snapshot (``load_index``'s ids and vectors)."""

    def locate_vectors(self, organization_id: str, environment: str, ids: Ids) -> Ids:
        """The locators of the workspace's vectors ``ids`` (-1 for an id not stored),
        read in one snapshot."""

    def read_vector_rows(
        self, organization_id: str, environment: str, locators: Ids, dimension: int
    ) -> Vectors:
        """The workspace's float32 vectors at ``locators``, one row each, read without
        reading their segments whole; a row no longer stored (or not the workspace's)
        is all NaN. Not one snapshot: a row deleted while it reads may read as NaN."""

    def count_vectors(self, organization_id: str, environment: str) -> int:
        """How many vectors a workspace stores. One read."""

    def chunk_texts_by_id(self, chunk_ids: Sequence[int]) -> dict[int, str]:
        """The texts of chunks by id (missing ids left out), read in one snapshot."""

    def iter_chunk_texts(
        self, organization_id: str, environment: str
    ) -> Iterator[tuple[str, list[int], list[str]]]:
        """``(document_id, chunk ids, texts)`` per document, oldest first. Not one
        snapshot: each document is read as the iterator reaches it (a workspace's
        texts are never all in memory), so one deleted meanwhile yields no chunks."""

    def add_vectors(
        self,
        organization_id: str,
        environment: str,
        document_id: str | None,
        embedder: str,
        dimension: int,
        ids: Ids,
        vectors: Vectors,
    ) -> None:
        """Append vectors as whole-buffer segments and advance the workspace version,
        atomically. ``ValueError`` when ``ids`` and ``vectors`` do not match (in number,
        or ``dimension``); ``records.StaleEmbedder`` (nothing stored) when the workspace
        is indexed by another embedder or dimension."""

    def replace_all_vectors(
        self,
        organization_id: str,
        environment: str,
        embedder: str,
        segments: Sequence[tuple[str | None, Ids, Vectors]],
        dimension: int,
    ) -> None:
        """Swap every vector of a workspace for new ones of ``embedder`` (a re-embed),
        atomically; the change log starts again after it (``changes_since`` from an
        earlier version answers ``None``)."""


class TermStore(Protocol):
    """Documents' sentence counts, summed per workspace: what ``KnowledgeService`` uses
    (its ``term_stats``, which chat's word rarity reads). They are written with their
    document (``IngestStore``) and deleted with it (``DocumentStore.delete_document``)."""

    def term_counts(
        self, organization_id: str, environment: str, stems: Sequence[str]
    ) -> tuple[int, dict[str, int]]:
        """``(sentences, {stem: sentences holding it})`` summed over the workspace's
        documents, for ``stems`` (those no sentence holds may be left out). As of one
        version of the workspace, read in one snapshot, and current: a write by any
        process is counted by the next call (sums kept in memory follow the change log)."""


class IngestStore(Protocol):
    """The writes that make a document searchable, and the queue of uploads waiting for
    them: what ``knowledge.ingest`` uses (``Uploads``, ``IngestPipeline``,
    ``IngestionJobs``; each also reads ``DocumentStore.get_document``).

    A document written with an ``external_id`` replaces, in the transaction that makes
    it ready, the ready document of its workspace that holds the same one. A write
    whose workspace is indexed by another embedder or dimension than its vectors'
    raises ``records.StaleEmbedder`` and stores nothing.
    """

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
        """Store a document (its metadata too), its chunks and the ``keep`` rows' vectors
        atomically, bumping the version; the chunk ids (in chunk order; they are the
        vector ids) and the document's ``seq``. Chunks outside ``keep`` are not indexed.

        ``term_counts`` (``(sentences, {stem: sentences holding it})``) are stored with
        them for ``term_counts`` and deleted with the document.
        """

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

    def claim_ingest_job(
        self,
        *,
        now: float,
        lease_seconds: float,
        excluding: Collection[str] = (),
    ) -> IngestJob | None:
        """Lease an unleased (or lease-expired) job; counts one attempt. Atomic: two
        callers (any process or node) never lease the same job.

        Fair across workspaces: the oldest job of the workspace (organization and
        environment) with the fewest jobs leased at ``now`` by any process, then with
        the fewest jobs queued. Jobs of the organizations in ``excluding`` (those that
        hold their share of the caller's workers) are left for later.
        """

    def ingest_job_data(self, document_id: str) -> bytes | None:
        """The raw upload of a job, or ``None`` if the job no longer exists. One read."""

    def renew_ingest_job(self, document_id: str, *, until: float) -> bool:
        """Extend a job's lease to ``until``; ``False`` if the job no longer exists.
        One transaction."""

    def release_ingest_job(self, document_id: str) -> None:
        """Drop a job's lease and take back the attempt its claim counted (shutdown),
        in one transaction."""

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
        """A ``processing`` document becomes ``ready`` with its chunks and vectors.

        Atomic: updates ``content_type``, ``pages``, ``chunks``, ``warnings`` and
        ``status``, deletes the job, inserts chunks and vectors, bumps the version, and
        records the event ``event`` makes of the ready document as stored in the outbox
        (as ``record_event``). The metadata is the stored one, read in the transaction (a
        ``update_metadata`` may have replaced ``document``'s meanwhile); the written
        document carries it. ``None`` and no write when the document is gone or not
        ``processing``.
        """

    def fail_document(
        self,
        organization_id: str,
        environment: str,
        document_id: str,
        error: Problem,
        event: Event | None = None,
    ) -> bool:
        """A ``processing`` document becomes ``failed`` with ``last_error``; its job goes.
        Whether it was ``processing``; only then is ``event`` recorded. One transaction."""


class KnowledgeStore(DocumentStore, IndexStore, TermStore, IngestStore, Protocol):
    """The four knowledge slices: what ``KnowledgeService`` uses, and hands its parts
    (``Search``, ``MetadataCache``, ``Uploads``) the slice each needs."""


class WebhookStore(Protocol):
    """Subscriptions and the event outbox: what ``WebhookService`` and ``WebhookRuntime`` use."""

    def insert_subscription(
        self,
        organization_id: str,
        environment: str,
        *,
        url: str,
        events: Sequence[str],
        secret: str,
        description: str | None,
    ) -> StoredSubscription:
        """Store a new active subscription, in one transaction."""

    def get_subscription(
        self, organization_id: str | None, environment: str | None, subscription_id: str
    ) -> StoredSubscription | None:
        """A subscription of this workspace (of any, if both are ``None``). One read."""

    def list_subscriptions(
        self, organization_id: str, environment: str, *, limit: int, starting_after: str | None
    ) -> tuple[list[StoredSubscription], bool]:
        """A page of subscriptions, newest first, and ``has_more``, read in one snapshot;
        ``NotFound`` when ``starting_after`` is no subscription of the workspace."""

    def update_subscription(self, subscription_id: str, **changes: Any) -> None:
        """Set status, secrets, failure tracking or the disabled reason (any other name:
        ``ValueError``), in one transaction. Disabling a subscription ends its pending
        deliveries as ``failed`` in that transaction, and so does recording an attempt
        of a subscription found disabled."""

    def delete_subscription(
        self, organization_id: str, environment: str, subscription_id: str
    ) -> bool:
        """Delete a subscription; its pending deliveries end as failed in the same
        transaction. Whether it existed."""

    def seal_secrets(self, plaintext_prefix: str, seal: Callable[[str], str]) -> int:
        """Replace every subscription's secret and previous secret that starts with
        ``plaintext_prefix`` (one stored as it is) by ``seal(value)``, unless it changed
        meanwhile (a rotation stored a new one); how many values were replaced. The
        subscriptions are otherwise unchanged (``updated_at`` too: the secret is the same).
        One transaction."""

    def record_event(
        self, event: Event, *, now: float, only_subscription: str | None = None
    ) -> int:
        """Store an event and a pending delivery per matching active subscription (only
        to ``only_subscription`` when given and active, whatever its event list) in one
        transaction; how many deliveries were created."""

    def claim_due_deliveries(
        self,
        *,
        now: float,
        lease_seconds: float,
        limit: int,
        busy_subscriptions: Sequence[str] = (),
    ) -> list[DueDelivery]:
        """Lease up to ``limit`` due deliveries of active subscriptions, oldest first,
        atomically, skipping those of ``busy_subscriptions``: two callers (any process
        or node) never lease the same delivery."""

    def next_due_at(self) -> float | None:
        """When the earliest pending delivery of an active subscription falls due (a
        leased one: when its lease ends), or ``None``. One read."""

    def delivery_pending(self, delivery_id: str) -> bool:
        """Whether a delivery still waits to be sent: not succeeded or failed (by its
        subscription's deletion or disabling, on any node) since it was claimed. One
        read."""

    def record_attempt(
        self,
        delivery: DueDelivery,
        *,
        attempted_at: str,
        status_code: int | None,
        error: str | None,
        duration_ms: float,
        outcome: str,
        next_attempt_at: float | None,
        subscription_changes: dict[str, Any],
    ) -> None:
        """Log an attempt and move the delivery on, atomically; a delivery ended
        meanwhile (``failed``: its subscription deleted or disabled) is moved on only
        by a successful attempt."""

    def list_deliveries(
        self,
        organization_id: str,
        environment: str,
        subscription_id: str,
        *,
        limit: int,
        starting_after: str | None,
    ) -> tuple[list[Delivery], bool]:
        """A page of a subscription's deliveries with their attempts, newest first, and
        ``has_more``, read in one snapshot."""


class ConversationStore(Protocol):
    """Conversations and their messages: what ``ChatService`` and
    ``ConversationService`` use."""

    def create_conversation(
        self,
        organization_id: str,
        environment: str,
        agent_id: str,
        messages: Sequence[StoredMessage] = (),
        *,
        conversation_id: str | None = None,
        status: ConversationStatus = "active",
        pending: PendingTurn | None = None,
        user: str | None = None,
    ) -> str:
        """Create a conversation holding ``messages`` (in one write: it is never seen
        without them) in ``status``, for the end user ``user`` (if any), with its first
        turn waiting as ``pending`` when given, and return its id: ``conversation_id``
        when given (a chat turn names it before it is stored), else a new one. One
        transaction."""

    def add_messages(
        self,
        conversation_id: str,
        messages: Sequence[StoredMessage],
        *,
        status: ConversationStatus | None = None,
        pending: PendingTurn | None = None,
        resumed: str | None = None,
    ) -> None:
        """Append messages to a conversation, set its ``status`` when given, and make
        ``pending`` its paused turn (``None``: it has none), in one transaction
        (``NotFound`` and nothing stored if it was deleted): a ``delete_conversation``
        at the same time either comes first or deletes these messages too. With
        ``resumed`` (the id of the paused turn these messages finish), ``Conflict`` and
        nothing stored unless that turn is still the conversation's."""

    def pending_turn(self, conversation_id: str, now: float) -> PendingTurn | None:
        """The conversation's paused turn, unless it expired by ``now``. One read."""

    def claim_pending_turn(
        self, conversation_id: str, now: float, lease_until: float
    ) -> PendingTurn | None:
        """Hold the conversation's paused turn for a resume until ``lease_until`` and
        return it; ``None`` when it has none (or it expired by ``now``); ``Conflict``
        when another resume holds it. One transaction."""

    def release_pending_turn(self, conversation_id: str, turn_id: str) -> None:
        """Let a resume that failed go: the turn waits again, for another resume."""

    def set_conversation_status(
        self,
        organization_id: str,
        environment: str,
        conversation_id: str,
        status: ConversationStatus,
    ) -> Conversation | None:
        """Set a conversation's ``status`` and return it, or ``None`` when it is not this
        workspace's. One transaction."""

    def recent_messages(self, conversation_id: str, limit: int) -> list[StoredMessage]:
        """The last ``limit`` messages, oldest first. One read."""

    def get_conversation(
        self, organization_id: str, environment: str, conversation_id: str
    ) -> Conversation | None:
        """A conversation of this workspace, or ``None``. One read."""

    def list_conversations(
        self,
        organization_id: str,
        environment: str,
        *,
        limit: int,
        starting_after: str | None,
        agent_id: str | None = None,
        user: str | None = None,
        agent_ids: Sequence[str] | None = None,
    ) -> tuple[list[Conversation], bool]:
        """A page of conversations (of one agent when ``agent_id`` is given, for one end
        user when ``user`` is, with one of ``agent_ids`` when that is given: none when it
        is empty), newest first, and whether more follow, read in one
        snapshot; ``NotFound`` when ``starting_after`` is no conversation of the
        workspace."""

    def rate_message(
        self,
        organization_id: str,
        environment: str,
        conversation_id: str,
        message_id: str,
        feedback: Feedback,
    ) -> Message | None:
        """Store ``feedback`` on an answer of a conversation of this workspace, replacing
        any earlier one, and return the message; ``None`` when the conversation or the
        message is not there. One transaction.

        :raises Conflict: (``not_an_answer``) the message is not the agent's answer.
        """

    def list_messages(
        self,
        organization_id: str,
        environment: str,
        conversation_id: str,
        *,
        limit: int,
        starting_after: str | None,
        newest_first: bool = False,
    ) -> tuple[list[Message], bool] | None:
        """A page of a conversation's messages, oldest first (or newest first), and
        whether more follow, read in one snapshot; ``None`` when the conversation is
        not this workspace's, ``NotFound`` when ``starting_after`` is no message of it."""

    def delete_conversation(
        self, organization_id: str, environment: str, conversation_id: str
    ) -> bool:
        """Delete a conversation and its messages, and the idempotent results that
        replay them (``IdempotencyStore``), in one transaction; whether it existed."""


class IdempotencyStore(Protocol):
    """Idempotency keys and the results they replay: what ``agentcore._idempotency`` uses."""

    def claim_idempotency_key(
        self,
        organization_id: str,
        environment: str,
        key: str,
        fingerprint: str,
        *,
        now: float,
        ttl: float,
        lease: float | None = None,
    ) -> tuple[Literal["new", "replay", "mismatch", "in_progress"], StoredResult | None]:
        """Claim an idempotency key atomically, across every process and node.

        ``new``: the caller runs the request and must ``finish`` or ``release`` it
        (naming its claim by ``now``); ``replay``: the stored result; ``mismatch``: the
        key was used with another request; ``in_progress``: a duplicate is running
        right now. A key claimed ``ttl`` seconds ago or more is forgotten. A claim
        lasts ``lease`` seconds (``None``: until the ttl) unless its holder renews it
        (``renew_idempotency_keys``); one still in progress when its lease lapsed is
        taken to be dead (its holder is gone) and claimed anew.
        """

    def finish_idempotency_key(
        self,
        organization_id: str,
        environment: str,
        key: str,
        result: StoredResult,
        *,
        claimed_at: float | None = None,
    ) -> None:
        """Store the result to replay (``claimed_at``: only if the claim made at that
        ``now`` still holds the key; ``None``: whichever does), in one transaction."""

    def release_idempotency_key(
        self, organization_id: str, environment: str, key: str, *, claimed_at: float | None = None
    ) -> None:
        """Forget an in-progress claim (``claimed_at`` as for ``finish_idempotency_key``),
        in one transaction."""

    def renew_idempotency_keys(
        self, claims: Sequence[tuple[str, str, str, float]], *, until: float
    ) -> list[tuple[str, str, str, float]]:
        """Extend to ``until`` the leases of ``claims`` (organization, environment, key
        and the ``now`` each was claimed with), in one transaction; the claims that no
        longer hold their key (finished, released, or taken over), which are not."""

    def sweep_idempotency_keys(self, *, before: float, limit: int) -> int:
        """Delete up to ``limit`` keys claimed at ``before`` or earlier (expired, with
        their results), in one transaction; how many went."""


class RateLimitStore(Protocol):
    """Token buckets shared by every process on the store (``rate_limit_backend = "store"``)."""

    def take_token(self, key_id: str, *, rate: float, burst: float, now: float) -> TokenTake:
        """Take one token from ``key_id``'s bucket, atomically for every process.

        The bucket refills at ``rate`` tokens a second up to ``burst`` (a new bucket
        starts full); ``now`` is Unix time, the clock every node shares.
        """


class Store(
    KeyStore,
    AgentStore,
    KnowledgeStore,
    WebhookStore,
    ConversationStore,
    IdempotencyStore,
    RateLimitStore,
    Protocol,
):
    """A backend for everything agentcore keeps: every slice above, plus its lifecycle.

    Services depend on the slice they use (``AgentStore``, ...); only the core, which
    wires them, holds the whole ``Store``.
    """

    url: str
    #: Whether several machines may serve this store at once (PostgreSQL: yes; a SQLite
    #: file: no). ``rate_limit_backend = "auto"`` keeps token buckets in such a store.
    shared_by_nodes: bool

    def ping(self) -> None:
        """Run the cheapest query there is; raises (``ServiceUnavailable`` or the
        driver's error) when the database does not answer. For health checks."""

    def close(self) -> None:
        """Release connections; the store is not used afterwards."""


@runtime_checkable
class VectorSearchStore(Protocol):
    """Optional capability: a store that ranks vectors itself (``vector_search="pgvector"``)."""

    def search_vectors(
        self,
        organization_id: str,
        environment: str,
        query: Vectors,
        k: int,
        *,
        documents: Sequence[str] | None = None,
        chunk_ids: Sequence[int] | None = None,
    ) -> tuple[Ids, Vectors]:
        """The ``k`` ids most cosine-similar to the unit vector ``query`` and their scores,
        best first, ties by ascending id (as ``VectorIndex.search``), among the rows of
        ``documents`` and of ``chunk_ids`` when given (before the top ``k`` is taken).
        One query, over the rows committed when it runs."""


@runtime_checkable
class KeywordSnapshotStore(Protocol):
    """Optional capability: a store that keeps each workspace's keyword index as bytes
    (the built-in stores), for the processes that have no keyword file of their own."""

    def keyword_snapshot(self, organization_id: str, environment: str) -> tuple[int, bytes] | None:
        """The workspace's stored keyword index: the version it reflects and its bytes;
        ``None`` when none is stored (or its parts are of different writes)."""

    def put_keyword_snapshot(
        self,
        organization_id: str,
        environment: str,
        version: int,
        data: bytes | bytearray | memoryview,
        *,
        replace: bool = False,
    ) -> bool:
        """Store ``data`` as the workspace's keyword index as of ``version``, replacing an
        older one (or one that is not whole, or claims a version the workspace has not
        reached); whether it was stored (not when the stored one is as new, unless
        ``replace``: the stored one was found unusable). One transaction."""


@runtime_checkable
class ObservableStore(Protocol):
    """A store that reports what the metrics show: its backlog and its connections
    (the built-in stores do; the metrics leave out what a store cannot report)."""

    def backlog(self, now: float) -> Backlog:
        """Ingestion jobs and webhook deliveries waiting, over every tenant, read in one
        snapshot."""

    def connection_stats(self) -> ConnectionStats:
        """This process's connections to the database (no query)."""


@runtime_checkable
class BudgetedStore(Protocol):
    """Optional capability: a store that keeps per-workspace caches of its own (the
    built-in stores: each workspace's sentence-count sums), which it can charge to the
    budget the core's indexes are under (``index_cache_bytes``)."""

    def share_budget(self, budget: Residency[Any, Any]) -> None:
        """Charge this store's per-workspace caches to ``budget`` (a ``Residency`` whose
        bounds they then share) from now on."""

    def cache_stats(self) -> ResidencyStats:
        """What those caches hold, are charged and have evicted (for the metrics)."""


@runtime_checkable
class ReopenableStore(Protocol):
    """Optional capability: a store that another process can open again (ingestion workers)."""

    def reopener(self) -> Callable[[], Store] | None:
        """A picklable function that opens this store's database in another process,
        without migrating it (this process did); ``None`` when no other process can
        reach the database (``:memory:``)."""


@runtime_checkable
class EventWaiter(Protocol):
    """Optional capability: a store that can tell a node when any node recorded an event."""

    def wait_for_events(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; ``True`` as soon as an event was recorded.

        ``False`` on timeout (or while the wake-up channel is broken): callers then poll,
        so a store without this capability, or a lost wake-up, only adds latency.
        """


@runtime_checkable
class Checkpointing(Protocol):
    """Optional capability: a store with housekeeping to run off the request path (a
    SQLite file folds its write-ahead log into the database)."""

    @property
    def checkpoint_interval(self) -> float | None:
        """Seconds between ``checkpoint()`` calls, or ``None`` when none are needed."""

    def checkpoint(self) -> bool:
        """Do the housekeeping due now, without waiting for readers or writers; whether
        there was any. The core's runtime calls it on a loop of its own."""
