"""The schema of both databases, as one list of numbered migrations.

Each migration renders its statements for a ``Dialect`` (types, storage options). A
step that exists for one database only says so (``only``): SQLite files already had
``m005`` when the PostgreSQL schema was first written with that column in ``m002``.
Each database records what it applied in its own ledger, as the databases made by
earlier versions already do (``sqlite/migrations.py``, ``postgres/migrations.py``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from agentcore.storage.sql.database import Connection
from agentcore.storage.sql.dialect import Dialect

Render = Callable[[Dialect], str]


@dataclass(frozen=True)
class Migration:
    """One step of the schema: its name (``m001_...``), its statements in a dialect's
    words (``script(dialect)``), and the one dialect it exists for, if only one."""

    name: str
    script: Render
    only: str | None = None


MIGRATIONS: list[Migration] = []


#: what separates the columns of a ``CREATE TABLE`` below: the statements run stay byte
#: for byte those earlier versions ran (and stored in SQLite's schema), indentation too
_NEXT = ",\n" + " " * 12
#: the columns of a table scoped to a workspace (an organization's environment)
WORKSPACE = _NEXT.join(["organization_id TEXT NOT NULL", "environment TEXT NOT NULL"])
#: when an object was created and last changed
STAMPS = _NEXT.join(["created_at TEXT NOT NULL", "updated_at TEXT NOT NULL"])


def keyed(d: Dialect) -> str:
    """The first columns of a table of objects: ``seq``, their ``id``, their workspace."""
    return _NEXT.join([f"seq {d.serial_key}", "id TEXT NOT NULL UNIQUE", WORKSPACE])


def migration(*, only: str | None = None) -> Callable[[Render], Render]:
    """Append the decorated function to ``MIGRATIONS`` (its name is the step's name)."""

    def register(render: Render) -> Render:
        MIGRATIONS.append(Migration(render.__name__, render, only))
        return render

    return register


def migrations_for(dialect: Dialect) -> list[Migration]:
    """The steps ``dialect`` applies, in order."""
    return [step for step in MIGRATIONS if step.only in (None, dialect.name)]


def statements(script: str) -> Iterator[str]:
    """The statements of ``script``, each whole: a ``;`` inside a string, a comment or
    a trigger's ``BEGIN ... END`` does not end one (``sqlite3.complete_statement``
    decides, asked only at each ``;``, so this stays linear in the script's length).

    :raises ValueError: when the script ends inside an unfinished statement.
    """
    *pieces, last = script.split(";")
    pending = ""
    for piece in pieces:
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \t\r\n;"):
                yield pending.strip()
            pending = ""
    # after the last ";": nothing, a comment, or a final statement without its ";"
    pending += last
    if pending.strip() and not sqlite3.complete_statement(pending + "\n;"):
        raise ValueError(f"unfinished SQL statement: {pending.strip()[:80]!r}")
    if pending.strip():
        yield pending.strip()


def run_script(conn: Connection, script: str) -> None:
    """Run ``script`` on ``conn`` statement by statement, inside the caller's transaction
    (``executescript()`` would COMMIT it first)."""
    for statement in statements(script):
        conn.execute(statement)


@migration()
def m001_tenancy_and_agents(d: Dialect) -> str:
    """Organizations, API keys and agents."""
    return f"""
        CREATE TABLE organizations (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            created_at TEXT NOT NULL
        );
        CREATE TABLE api_keys (
            id TEXT PRIMARY KEY,
            organization_id TEXT NOT NULL REFERENCES organizations(id),
            environment TEXT NOT NULL CHECK (environment IN ('test', 'live')),
            scopes TEXT NOT NULL,
            digest TEXT NOT NULL UNIQUE,
            prefix TEXT NOT NULL,
            last4 TEXT NOT NULL,
            name TEXT,
            created_at TEXT NOT NULL,
            expires_at TEXT,
            revoked_at TEXT,
            last_used_at TEXT,
            rotated_from TEXT
        );
        CREATE INDEX api_keys_org ON api_keys (organization_id);
        CREATE TABLE agents (
            seq {d.serial_key},
            id TEXT NOT NULL UNIQUE,
            organization_id TEXT NOT NULL REFERENCES organizations(id),
            environment TEXT NOT NULL,
            name TEXT NOT NULL,
            role TEXT NOT NULL,
            status TEXT NOT NULL,
            system_prompt TEXT NOT NULL,
            tools TEXT NOT NULL,
            model TEXT,
            handoff_on_no_answer INTEGER NOT NULL DEFAULT 0,
            {STAMPS}
        );
        CREATE INDEX agents_workspace ON agents (organization_id, environment, seq);
        """


@migration()
def m002_knowledge(d: Dialect) -> str:
    """Documents, chunks (the integer id is the vector id) and vector segments."""
    page_offsets = d.either(sqlite="", postgres=",\n page_offsets TEXT NOT NULL DEFAULT '[]'")
    return f"""
        CREATE TABLE documents (
            {keyed(d)},
            source TEXT NOT NULL,
            content_type TEXT NOT NULL,
            pages INTEGER NOT NULL,
            chunks INTEGER NOT NULL,
            bytes {d.bigint} NOT NULL,
            created_at TEXT NOT NULL
        );
        CREATE INDEX documents_workspace ON documents (organization_id, environment, seq);
        CREATE TABLE chunks (
            id {d.serial_key},
            document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
            {WORKSPACE},
            ordinal INTEGER NOT NULL,
            text TEXT NOT NULL,
            pages TEXT NOT NULL{page_offsets}
        );
        CREATE INDEX chunks_document ON chunks (document_id);
        CREATE INDEX chunks_workspace ON chunks (organization_id, environment);
        CREATE TABLE vector_segments (
            id {d.serial_key},
            {WORKSPACE},
            document_id TEXT,
            embedder TEXT NOT NULL,
            dimension INTEGER NOT NULL,
            count INTEGER NOT NULL,
            ids {d.blob} NOT NULL,
            vectors {d.blob} NOT NULL
        );
        {d.external("vector_segments", "ids", "vectors")}
        CREATE INDEX vector_segments_workspace
            ON vector_segments (organization_id, environment, document_id);
        CREATE TABLE knowledge_state (
            {WORKSPACE},
            embedder TEXT,
            dimension INTEGER,
            version {d.bigint} NOT NULL DEFAULT 0,
            PRIMARY KEY (organization_id, environment)
        );
        """


@migration()
def m003_events_and_webhooks(d: Dialect) -> str:
    """The event log, webhook subscriptions, the delivery outbox and attempts."""
    # SQLite's files have indexed every delivery by status; PostgreSQL's schema, written
    # later, indexes only the pending ones (the only ones a claim looks for)
    due = d.either(
        sqlite="(status, next_attempt_at)", postgres="(next_attempt_at) WHERE status = 'pending'"
    )
    return f"""
        CREATE TABLE events (
            {keyed(d)},
            type TEXT NOT NULL,
            timestamp TEXT NOT NULL,
            data TEXT NOT NULL
        );
        CREATE INDEX events_workspace ON events (organization_id, environment, seq);
        CREATE TABLE webhook_subscriptions (
            {keyed(d)},
            url TEXT NOT NULL,
            events TEXT NOT NULL,
            status TEXT NOT NULL,
            secret TEXT NOT NULL,
            description TEXT,
            previous_secret TEXT,
            previous_secret_expires_at {d.real},
            failing_since {d.real},
            disabled_reason TEXT,
            {STAMPS}
        );
        CREATE INDEX webhook_subscriptions_workspace
            ON webhook_subscriptions (organization_id, environment, seq);
        CREATE TABLE webhook_deliveries (
            seq {d.serial_key},
            id TEXT NOT NULL UNIQUE,
            event_id TEXT NOT NULL,
            subscription_id TEXT NOT NULL,
            {WORKSPACE},
            status TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_at {d.real},
            leased_until {d.real},
            last_status_code INTEGER,
            last_error TEXT,
            {STAMPS}
        );
        CREATE INDEX webhook_deliveries_due ON webhook_deliveries {due};
        CREATE INDEX webhook_deliveries_subscription
            ON webhook_deliveries (subscription_id, seq);
        CREATE TABLE webhook_attempts (
            seq {d.serial_key},
            delivery_id TEXT NOT NULL,
            subscription_id TEXT NOT NULL,
            attempted_at TEXT NOT NULL,
            status_code INTEGER,
            error TEXT,
            duration_ms {d.real} NOT NULL
        );
        CREATE INDEX webhook_attempts_delivery ON webhook_attempts (delivery_id, seq);
        """


@migration()
def m004_chat_and_idempotency(d: Dialect) -> str:
    """Conversations, their messages, and stored idempotent responses."""
    return f"""
        CREATE TABLE conversations (
            {keyed(d)},
            agent_id TEXT NOT NULL,
            {STAMPS}
        );
        CREATE INDEX conversations_workspace ON conversations (organization_id, environment);
        CREATE TABLE messages (
            seq {d.serial_key},
            conversation_id TEXT NOT NULL REFERENCES conversations(id),
            role TEXT NOT NULL,
            content TEXT NOT NULL,
            citations TEXT NOT NULL DEFAULT '[]',
            created_at TEXT NOT NULL
        );
        CREATE INDEX messages_conversation ON messages (conversation_id, seq);
        CREATE TABLE idempotency_keys (
            {WORKSPACE},
            key TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            status TEXT NOT NULL,
            response_status INTEGER,
            response_body {d.blob},
            response_headers TEXT,
            created_at {d.real} NOT NULL,
            PRIMARY KEY (organization_id, environment, key)
        );
        """


@migration(only="sqlite")
def m005_chunk_page_offsets(d: Dialect) -> str:
    """Where each page starts inside a chunk, so quotes cite only their own pages."""
    return "ALTER TABLE chunks ADD COLUMN page_offsets TEXT NOT NULL DEFAULT '[]'"


@migration()
def m006_knowledge_change_log(d: Dialect) -> str:
    """A per-workspace change log, so a cached index catches up by applying only the delta.

    Each vector segment records the workspace version that added it; each deletion
    leaves a tombstone (the deleted ids) under the version that deleted them. The log
    covers the versions after ``knowledge_state.log_floor``: existing workspaces start
    with a floor at their current version (their old segments carry version 0).
    """
    return f"""
        ALTER TABLE vector_segments ADD COLUMN version {d.bigint} NOT NULL DEFAULT 0;
        CREATE INDEX vector_segments_version
            ON vector_segments (organization_id, environment, version);
        ALTER TABLE knowledge_state ADD COLUMN log_floor {d.bigint} NOT NULL DEFAULT 0;
        UPDATE knowledge_state SET log_floor = version;
        CREATE TABLE knowledge_tombstones (
            {WORKSPACE},
            version {d.bigint} NOT NULL,
            ids {d.blob} NOT NULL
        );
        CREATE INDEX knowledge_tombstones_version
            ON knowledge_tombstones (organization_id, environment, version);
        """


@migration()
def m007_rate_limit_buckets(d: Dialect) -> str:
    """Token buckets kept in the store, so every process sharing it enforces one limit."""
    return f"""
        CREATE TABLE rate_limit_buckets (
            key_id TEXT PRIMARY KEY,
            tokens {d.real} NOT NULL,
            updated_at {d.real} NOT NULL,
            allowed {d.boolean} NOT NULL
        ){d.without_rowid};
        """


@migration()
def m008_document_status_and_ingest_jobs(d: Dialect) -> str:
    """Document status and last error; the durable queue of background ingestion jobs."""
    # claims order by created_at; SQLite's files also lead the index with the lease
    lease = d.either(sqlite="(leased_until, created_at)", postgres="(created_at)")
    return f"""
        ALTER TABLE documents ADD COLUMN status TEXT NOT NULL DEFAULT 'ready';
        ALTER TABLE documents ADD COLUMN last_error TEXT;
        CREATE TABLE ingest_jobs (
            document_id TEXT PRIMARY KEY REFERENCES documents(id) ON DELETE CASCADE,
            {WORKSPACE},
            kind TEXT NOT NULL,
            filename TEXT NOT NULL,
            content_type TEXT,
            data {d.blob} NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            leased_until {d.real},
            created_at {d.real} NOT NULL
        );
        {d.external("ingest_jobs", "data")}
        CREATE INDEX ingest_jobs_lease ON ingest_jobs {lease};
        """


@migration()
def m009_term_counts(d: Dialect) -> str:
    """Per document: its sentences (``term = ''``) and how many hold each word stem.

    Written when a document is indexed and dropped with it (the foreign key), so a
    workspace's sentence frequencies are sums over its documents, never a recount
    (see ``agentcore/knowledge/terms.py``). m011 packs them into ``document_terms``.
    """
    return f"""
        CREATE TABLE term_counts (
            document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
            {WORKSPACE},
            term TEXT NOT NULL,
            sentences INTEGER NOT NULL,
            PRIMARY KEY (document_id, term)
        ){d.without_rowid};
        CREATE INDEX term_counts_term ON term_counts (organization_id, environment, term);
        """


@migration()
def m010_workspace_index_dtype(d: Dialect) -> str:
    """How each workspace's index stores its rows (``Settings.index_dtype``), fixed by its
    first write; workspaces that exist already were built with float32 rows."""
    return """
        ALTER TABLE knowledge_state ADD COLUMN index_dtype TEXT;
        UPDATE knowledge_state SET index_dtype = 'float32';
        """


@migration()
def m011_document_terms(d: Dialect) -> str:
    """A document's sentence counts as one packed row instead of one row per stem.

    ``term_counts`` put about 45 rows per document into scattered leaves of its term
    index, which made each SQLite ingestion commit write several times the pages it
    otherwise does. ``document_terms`` is keyed by the document's ``seq`` (appended in
    ingestion order), ``stems`` as ``"stem count"`` lines. A deletion copies the row into
    its tombstone, so each process's in-memory sums follow the change log like the vector
    index (see ``sql/terms.py``). Existing counts move over at version 0, which every log
    floor covers.
    """
    concat = d.either(sqlite="GROUP_CONCAT", postgres="STRING_AGG")
    newline = d.either(sqlite="char(10)", postgres="chr(10)")
    return f"""
        CREATE TABLE document_terms (
            document_seq {d.bigint} PRIMARY KEY REFERENCES documents(seq) ON DELETE CASCADE,
            {WORKSPACE},
            version {d.bigint} NOT NULL,
            sentences INTEGER NOT NULL,
            stems TEXT NOT NULL
        );
        CREATE INDEX document_terms_version
            ON document_terms (organization_id, environment, version);
        INSERT INTO document_terms
            (document_seq, organization_id, environment, version, sentences, stems)
            SELECT documents.seq, documents.organization_id, documents.environment, 0,
                MAX(CASE WHEN term_counts.term = '' THEN term_counts.sentences ELSE 0 END),
                COALESCE({concat}(CASE WHEN term_counts.term <> ''
                    THEN term_counts.term || ' ' || term_counts.sentences END, {newline}), '')
            FROM term_counts JOIN documents ON documents.id = term_counts.document_id
            GROUP BY documents.seq;
        DROP TABLE term_counts;
        ALTER TABLE knowledge_tombstones ADD COLUMN term_version {d.bigint};
        ALTER TABLE knowledge_tombstones ADD COLUMN term_sentences INTEGER;
        ALTER TABLE knowledge_tombstones ADD COLUMN term_stems TEXT;
        """


@migration()
def m012_drop_chunks_workspace_index(d: Dialect) -> str:
    """Drop ``chunks_workspace``, an index on ``chunks (organization_id, environment)``
    that no query reads (chunks are found by id or by ``document_id``).

    Every ingestion commit wrote one of its pages besides the chunk itself: without
    it a document's write touches one b-tree fewer (about one WAL frame in 18).
    """
    return "DROP INDEX IF EXISTS chunks_workspace;"


@migration()
def m013_fail_pending_of_disabled(d: Dialect) -> str:
    """End as ``failed`` the deliveries still pending for subscriptions disabled before
    the stores did it at the moment of disabling (they waited forever)."""
    now = d.either(
        sqlite="strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
        postgres="to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')",
    )
    return f"""
        UPDATE webhook_deliveries SET status = 'failed', next_attempt_at = NULL,
            leased_until = NULL, updated_at = {now},
            last_error = 'subscription disabled: ' || COALESCE((SELECT disabled_reason
                FROM webhook_subscriptions WHERE webhook_subscriptions.id
                = webhook_deliveries.subscription_id), 'disabled')
        WHERE status = 'pending' AND subscription_id IN
            (SELECT id FROM webhook_subscriptions WHERE status = 'disabled');
        """


@migration()
def m014_conversation_history(d: Dialect) -> str:
    """What the conversation routes read: an id and the token usage of each message, a
    message count per conversation, and keyset indexes for listing conversations (all,
    or one agent's) newest first.

    PostgreSQL also indexes failed webhook deliveries, so the metrics can count them
    (SQLite's index of every delivery by status does already).
    """
    random_hex = d.either(
        sqlite="lower(hex(randomblob(12)))", postgres="substr(md5(random()::text || seq), 1, 24)"
    )
    failed = d.either(
        sqlite="",
        postgres="CREATE INDEX webhook_deliveries_failed ON webhook_deliveries (seq)"
        " WHERE status = 'failed';",
    )
    return f"""
        ALTER TABLE messages ADD COLUMN id TEXT;
        ALTER TABLE messages ADD COLUMN usage TEXT;
        UPDATE messages SET id = 'msg_' || {random_hex} WHERE id IS NULL;
        CREATE UNIQUE INDEX messages_id ON messages (id);
        ALTER TABLE conversations ADD COLUMN message_count INTEGER NOT NULL DEFAULT 0;
        UPDATE conversations SET message_count =
            (SELECT COUNT(*) FROM messages WHERE messages.conversation_id = conversations.id);
        DROP INDEX conversations_workspace;
        CREATE INDEX conversations_workspace ON conversations (organization_id, environment, seq);
        CREATE INDEX conversations_agent
            ON conversations (organization_id, environment, agent_id, seq);
        {failed}
        """


@migration()
def m015_document_metadata(d: Dialect) -> str:
    """Document metadata (a JSON object; NULL: none), the version of each document's last write,
    so every process's filters follow metadata changes through the change log; an
    agent's knowledge (a JSON object: the filter that selects its documents)."""
    return f"""
        ALTER TABLE documents ADD COLUMN metadata TEXT;
        ALTER TABLE documents ADD COLUMN version {d.bigint} NOT NULL DEFAULT 0;
        CREATE INDEX documents_version ON documents (organization_id, environment, version);
        ALTER TABLE agents ADD COLUMN knowledge TEXT;
        """


@migration()
def m016_idempotency_retention(d: Dialect) -> str:
    """Kept idempotent results go when they expire and with their conversation, and a
    claim is a lease its process renews: an index by claim time for the sweep of
    expired keys, the conversation a kept result holds messages of (``DELETE
    /v1/conversations/{id}`` deletes it too), and when a claim in progress lapses
    (``lease_until``; NULL, as on the rows of earlier versions: at the ttl)."""
    return f"""
        ALTER TABLE idempotency_keys ADD COLUMN conversation_id TEXT;
        ALTER TABLE idempotency_keys ADD COLUMN lease_until {d.real};
        CREATE INDEX idempotency_keys_conversation ON idempotency_keys (conversation_id)
            WHERE conversation_id IS NOT NULL;
        CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
        """


@migration()
def m017_document_external_id(d: Dialect) -> str:
    """A document's ``external_id`` (NULL: none): the caller's own name for it, unique
    among a workspace's ready documents, so an upload under it replaces the earlier
    version in the transaction that makes the new one ready (a processing or failed
    upload holds it too, and replaces nothing until it is ready)."""
    return """
        ALTER TABLE documents ADD COLUMN external_id TEXT;
        CREATE UNIQUE INDEX documents_external_id
            ON documents (organization_id, environment, external_id)
            WHERE external_id IS NOT NULL AND status = 'ready';
        """


@migration()
def m018_conversation_status(d: Dialect) -> str:
    """A conversation's ``status``: ``active`` (the agent answers) or ``handed_off`` (a
    person has it: the user's messages are kept and announced, the agent stays quiet
    until the conversation is released)."""
    return """
        ALTER TABLE conversations ADD COLUMN status TEXT NOT NULL DEFAULT 'active';
        """


@migration()
def m019_pending_tool_calls(d: Dialect) -> str:
    """Turns that wait for tools the caller runs: a message's tool calls (an answer that
    made them, JSON) and the call a ``tool`` message answers; a conversation's paused
    turn (``pending_id``, its state as JSON, when it stops waiting, and until when a
    resume in progress holds it: NULL when none)."""
    return f"""
        ALTER TABLE messages ADD COLUMN tool_calls TEXT;
        ALTER TABLE messages ADD COLUMN tool_call_id TEXT;
        ALTER TABLE conversations ADD COLUMN pending_id TEXT;
        ALTER TABLE conversations ADD COLUMN pending_turn TEXT;
        ALTER TABLE conversations ADD COLUMN pending_expires {d.real};
        ALTER TABLE conversations ADD COLUMN pending_lease {d.real};
        """


@migration()
def m020_agent_mcp_servers(d: Dialect) -> str:
    """An agent's remote MCP servers (JSON: each server as shown, and its headers as
    ``sealed_headers``, sealed when a key is configured); NULL for none."""
    return """
        ALTER TABLE agents ADD COLUMN mcp_servers TEXT;
        """


@migration()
def m021_document_access(d: Dialect) -> str:
    """Who may read a document (JSON ``{"users": [...], "groups": [...]}``): NULL for
    everyone in the workspace."""
    return """
        ALTER TABLE documents ADD COLUMN access TEXT;
        """


@migration()
def m022_conversation_user(d: Dialect) -> str:
    """The end user a conversation is for (the ``user`` it was started with): NULL when
    it was started for no one; listed by user with the index."""
    return """
        ALTER TABLE conversations ADD COLUMN user_id TEXT;
        CREATE INDEX conversations_user ON conversations (organization_id, environment, user_id);
        """


@migration()
def m023_message_feedback(d: Dialect) -> str:
    """A rating of an answer (JSON ``{rating, reason, rated_at}``): NULL until rated."""
    return """
        ALTER TABLE messages ADD COLUMN feedback TEXT;
        """


@migration()
def m024_client_tokens(d: Dialect) -> str:
    """Client tokens: one end user's short-lived credential, minted by a key (only the
    SHA-256 digest of its secret is kept); found by digest, revoked by user or key,
    swept by expiry."""
    return """
        CREATE TABLE client_tokens (
            id TEXT PRIMARY KEY,
            organization_id TEXT NOT NULL REFERENCES organizations(id),
            environment TEXT NOT NULL CHECK (environment IN ('test', 'live')),
            key_id TEXT NOT NULL,
            digest TEXT NOT NULL UNIQUE,
            user_id TEXT NOT NULL,
            groups TEXT NOT NULL,
            agents TEXT,
            created_at TEXT NOT NULL,
            expires_at TEXT NOT NULL,
            revoked_at TEXT
        );
        CREATE INDEX client_tokens_user ON client_tokens (organization_id, environment, user_id);
        CREATE INDEX client_tokens_key ON client_tokens (key_id);
        CREATE INDEX client_tokens_expiry ON client_tokens (expires_at);
        """


@migration()
def m025_message_stats(d: Dialect) -> str:
    """What an agent's stats group and tell apart: a message's ``question`` (a user's
    message: its own text normalised; an answer: that of the question it answers) and
    an answer's ``handoff`` (why it handed off: ``no_relevant_knowledge``,
    ``user_requested`` or the model's reason); NULL for the messages of earlier versions,
    whose question and handoff are not known."""
    return """
        ALTER TABLE messages ADD COLUMN question TEXT;
        ALTER TABLE messages ADD COLUMN handoff TEXT;
        """


@migration()
def m026_chunk_location(d: Dialect) -> str:
    """Where a chunk starts in its document, as a label (``Slide 3``, ``Sheet Sales``,
    the heading it falls under): NULL when its format names no parts."""
    return """
        ALTER TABLE chunks ADD COLUMN location TEXT;
        """


@migration()
def m027_document_warnings(d: Dialect) -> str:
    """What indexing found that a document's reader should know (a JSON list of
    ``{code, pages, detail}``: scanned pages with no text, pages read by OCR): NULL for
    none, as on the documents of earlier versions."""
    return """
        ALTER TABLE documents ADD COLUMN warnings TEXT;
        """


@migration()
def m028_keyword_snapshots(d: Dialect) -> str:
    """Each workspace's keyword index as of one version (``KeywordFiles``' bytes), in
    parts, so that a process with no keyword file of its own (a new node, a fresh
    container, ``index_dir = "off"``) reads it instead of tokenising every chunk."""
    return f"""
        CREATE TABLE keyword_snapshots (
            {WORKSPACE},
            part INTEGER NOT NULL,
            version {d.bigint} NOT NULL,
            data {d.blob} NOT NULL,
            PRIMARY KEY (organization_id, environment, part)
        );
        {d.external("keyword_snapshots", "data")}
        """


@migration()
def m029_term_sums(d: Dialect) -> str:
    """Each workspace's sentence counts summed over its documents as of one version
    (``stems``: the stems, one a line; ``counts``: each one's sum, little-endian int64), so
    that a process's first chat reads them instead of summing every document's row."""
    return f"""
        CREATE TABLE term_sums (
            {WORKSPACE},
            version {d.bigint} NOT NULL,
            sentences {d.bigint} NOT NULL,
            stems TEXT NOT NULL,
            counts {d.blob} NOT NULL,
            PRIMARY KEY (organization_id, environment)
        );
        {d.external("term_sums", "counts")}
        """
