"""The SQLite schema, as numbered sqlite-utils migrations (applied in order, once)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

from sqlite_utils import Database as UtilsDatabase
from sqlite_utils import Migrations

migrations = Migrations("agentcore")


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


def run_script(db: UtilsDatabase, script: str) -> None:
    """Run a migration script statement by statement, inside the caller's transaction.

    ``sqlite3``'s ``executescript()`` would COMMIT it first, and migrations run inside
    one ``BEGIN IMMEDIATE`` so that concurrent openers queue and a failing migration
    leaves nothing behind.
    """
    for statement in statements(script):
        db.execute(statement)


@migrations()
def m001_tenancy_and_agents(db: UtilsDatabase) -> None:
    """Organizations, API keys and agents."""
    run_script(
        db,
        """
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
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
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
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        );
        CREATE INDEX agents_workspace ON agents (organization_id, environment, seq);
        """,
    )


@migrations()
def m002_knowledge(db: UtilsDatabase) -> None:
    """Documents, chunks (the integer id is the vector id) and vector segments."""
    run_script(
        db,
        """
        CREATE TABLE documents (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            source TEXT NOT NULL,
            content_type TEXT NOT NULL,
            pages INTEGER NOT NULL,
            chunks INTEGER NOT NULL,
            bytes INTEGER NOT NULL,
            created_at TEXT NOT NULL
        );
        CREATE INDEX documents_workspace ON documents (organization_id, environment, seq);
        CREATE TABLE chunks (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            ordinal INTEGER NOT NULL,
            text TEXT NOT NULL,
            pages TEXT NOT NULL
        );
        CREATE INDEX chunks_document ON chunks (document_id);
        CREATE INDEX chunks_workspace ON chunks (organization_id, environment);
        CREATE TABLE vector_segments (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            document_id TEXT,
            embedder TEXT NOT NULL,
            dimension INTEGER NOT NULL,
            count INTEGER NOT NULL,
            ids BLOB NOT NULL,
            vectors BLOB NOT NULL
        );
        CREATE INDEX vector_segments_workspace
            ON vector_segments (organization_id, environment, document_id);
        CREATE TABLE knowledge_state (
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            embedder TEXT,
            dimension INTEGER,
            version INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (organization_id, environment)
        );
        """,
    )


@migrations()
def m003_events_and_webhooks(db: UtilsDatabase) -> None:
    """The event log, webhook subscriptions, the delivery outbox and attempts."""
    run_script(
        db,
        """
        CREATE TABLE events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            type TEXT NOT NULL,
            timestamp TEXT NOT NULL,
            data TEXT NOT NULL
        );
        CREATE INDEX events_workspace ON events (organization_id, environment, seq);
        CREATE TABLE webhook_subscriptions (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            url TEXT NOT NULL,
            events TEXT NOT NULL,
            status TEXT NOT NULL,
            secret TEXT NOT NULL,
            description TEXT,
            previous_secret TEXT,
            previous_secret_expires_at REAL,
            failing_since REAL,
            disabled_reason TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        );
        CREATE INDEX webhook_subscriptions_workspace
            ON webhook_subscriptions (organization_id, environment, seq);
        CREATE TABLE webhook_deliveries (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            event_id TEXT NOT NULL,
            subscription_id TEXT NOT NULL,
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            status TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_at REAL,
            leased_until REAL,
            last_status_code INTEGER,
            last_error TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        );
        CREATE INDEX webhook_deliveries_due ON webhook_deliveries (status, next_attempt_at);
        CREATE INDEX webhook_deliveries_subscription
            ON webhook_deliveries (subscription_id, seq);
        CREATE TABLE webhook_attempts (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            delivery_id TEXT NOT NULL,
            subscription_id TEXT NOT NULL,
            attempted_at TEXT NOT NULL,
            status_code INTEGER,
            error TEXT,
            duration_ms REAL NOT NULL
        );
        CREATE INDEX webhook_attempts_delivery ON webhook_attempts (delivery_id, seq);
        """,
    )


@migrations()
def m004_chat_and_idempotency(db: UtilsDatabase) -> None:
    """Conversations, their messages, and stored idempotent responses."""
    run_script(
        db,
        """
        CREATE TABLE conversations (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            agent_id TEXT NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        );
        CREATE INDEX conversations_workspace ON conversations (organization_id, environment);
        CREATE TABLE messages (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation_id TEXT NOT NULL REFERENCES conversations(id),
            role TEXT NOT NULL,
            content TEXT NOT NULL,
            citations TEXT NOT NULL DEFAULT '[]',
            created_at TEXT NOT NULL
        );
        CREATE INDEX messages_conversation ON messages (conversation_id, seq);
        CREATE TABLE idempotency_keys (
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            key TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            status TEXT NOT NULL,
            response_status INTEGER,
            response_body BLOB,
            response_headers TEXT,
            created_at REAL NOT NULL,
            PRIMARY KEY (organization_id, environment, key)
        );
        """,
    )


@migrations()
def m005_chunk_page_offsets(db: UtilsDatabase) -> None:
    """Where each page starts inside a chunk, so quotes cite only their own pages."""
    run_script(db, "ALTER TABLE chunks ADD COLUMN page_offsets TEXT NOT NULL DEFAULT '[]'")


@migrations()
def m006_knowledge_change_log(db: UtilsDatabase) -> None:
    """A per-workspace change log, so a cached index catches up by applying only the delta.

    Each vector segment records the workspace version that added it; each deletion
    leaves a tombstone (the deleted ids) under the version that deleted them. The log
    covers the versions after ``knowledge_state.log_floor``: existing workspaces start
    with a floor at their current version (their old segments carry version 0).
    """
    run_script(
        db,
        """
        ALTER TABLE vector_segments ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
        CREATE INDEX vector_segments_version
            ON vector_segments (organization_id, environment, version);
        ALTER TABLE knowledge_state ADD COLUMN log_floor INTEGER NOT NULL DEFAULT 0;
        UPDATE knowledge_state SET log_floor = version;
        CREATE TABLE knowledge_tombstones (
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            version INTEGER NOT NULL,
            ids BLOB NOT NULL
        );
        CREATE INDEX knowledge_tombstones_version
            ON knowledge_tombstones (organization_id, environment, version);
        """,
    )


@migrations()
def m007_rate_limit_buckets(db: UtilsDatabase) -> None:
    """Token buckets kept in the store, so every process sharing it enforces one limit."""
    run_script(
        db,
        """
        CREATE TABLE rate_limit_buckets (
            key_id TEXT PRIMARY KEY,
            tokens REAL NOT NULL,
            updated_at REAL NOT NULL,
            allowed INTEGER NOT NULL
        ) WITHOUT ROWID;
        """,
    )


@migrations()
def m008_document_status_and_ingest_jobs(db: UtilsDatabase) -> None:
    """Document status and last error; the durable queue of background ingestion jobs."""
    run_script(
        db,
        """
        ALTER TABLE documents ADD COLUMN status TEXT NOT NULL DEFAULT 'ready';
        ALTER TABLE documents ADD COLUMN last_error TEXT;
        CREATE TABLE ingest_jobs (
            document_id TEXT PRIMARY KEY REFERENCES documents(id) ON DELETE CASCADE,
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            kind TEXT NOT NULL,
            filename TEXT NOT NULL,
            content_type TEXT,
            data BLOB NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            leased_until REAL,
            created_at REAL NOT NULL
        );
        CREATE INDEX ingest_jobs_lease ON ingest_jobs (leased_until, created_at);
        """,
    )


@migrations()
def m009_term_counts(db: UtilsDatabase) -> None:
    """Per document: its sentences (``term = ''``) and how many hold each word stem.

    Written when a document is indexed and dropped with it (the foreign key), so a
    workspace's sentence frequencies are sums over its documents, never a recount
    (see ``agentcore/knowledge/terms.py``).
    """
    run_script(
        db,
        """
        CREATE TABLE term_counts (
            document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            term TEXT NOT NULL,
            sentences INTEGER NOT NULL,
            PRIMARY KEY (document_id, term)
        ) WITHOUT ROWID;
        CREATE INDEX term_counts_term ON term_counts (organization_id, environment, term);
        """,
    )


@migrations()
def m010_workspace_index_dtype(db: UtilsDatabase) -> None:
    """How each workspace's index stores its rows (``Settings.index_dtype``), fixed by its
    first write; workspaces that exist already were built with float32 rows."""
    run_script(
        db,
        """
        ALTER TABLE knowledge_state ADD COLUMN index_dtype TEXT;
        UPDATE knowledge_state SET index_dtype = 'float32';
        """,
    )


@migrations()
def m011_document_terms(db: UtilsDatabase) -> None:
    """A document's sentence counts as one packed row instead of one row per stem.

    ``term_counts`` put about 45 rows per document into scattered leaves of its term
    index, which made each ingestion commit write several times the pages it otherwise
    does. ``document_terms`` keeps one row per ready document, keyed by the
    document's ``seq`` (appended in ingestion order): its sentence count, the version
    of the write that stored it, and ``stems`` as ``"stem count"`` lines. A deletion
    copies the row into its tombstone (``term_*`` columns), so a process's in-memory
    sums follow the change log like the vector index (see ``KnowledgeStore.term_counts``).
    Existing counts move over (at version 0, which every log floor covers).
    """
    run_script(
        db,
        """
        CREATE TABLE document_terms (
            document_seq INTEGER PRIMARY KEY REFERENCES documents(seq) ON DELETE CASCADE,
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            version INTEGER NOT NULL,
            sentences INTEGER NOT NULL,
            stems TEXT NOT NULL
        );
        CREATE INDEX document_terms_version
            ON document_terms (organization_id, environment, version);
        INSERT INTO document_terms
            (document_seq, organization_id, environment, version, sentences, stems)
            SELECT documents.seq, documents.organization_id, documents.environment, 0,
                MAX(CASE WHEN term_counts.term = '' THEN term_counts.sentences ELSE 0 END),
                COALESCE(GROUP_CONCAT(CASE WHEN term_counts.term <> ''
                    THEN term_counts.term || ' ' || term_counts.sentences END, char(10)), '')
            FROM term_counts JOIN documents ON documents.id = term_counts.document_id
            GROUP BY documents.seq;
        DROP TABLE term_counts;
        ALTER TABLE knowledge_tombstones ADD COLUMN term_version INTEGER;
        ALTER TABLE knowledge_tombstones ADD COLUMN term_sentences INTEGER;
        ALTER TABLE knowledge_tombstones ADD COLUMN term_stems TEXT;
        """,
    )


@migrations()
def m012_drop_chunks_workspace_index(db: UtilsDatabase) -> None:
    """Drop ``chunks_workspace``, an index on ``chunks (organization_id, environment)``
    that no query reads (chunks are found by id or by ``document_id``).

    Every ingestion commit wrote one of its pages besides the chunk itself: without
    it a document's write touches one b-tree fewer (about one WAL frame in 18).
    """
    run_script(db, "DROP INDEX IF EXISTS chunks_workspace;")
