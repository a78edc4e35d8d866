"""The PostgreSQL schema, as numbered migrations applied in order, once, under a lock.

The tables mirror the SQLite store's (``storage/sqlite/schema.py``) column for column,
so both stores answer the same conformance suite. ``migrate`` runs inside one
transaction holding a transaction-level advisory lock, so two nodes starting at once
queue instead of racing, and a database migrated by newer code is refused.
"""

from __future__ import annotations

from agentcore.storage.postgres.connection import Conn

# pg_advisory_xact_lock key of schema changes: "agentcore" as a stable 64-bit number
MIGRATION_LOCK = 0x6167656E74636F72

MIGRATIONS: list[tuple[str, str]] = [
    (
        "tenancy_and_agents",
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
            seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
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
    ),
    (
        "knowledge",
        """
        CREATE TABLE documents (
            seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            source TEXT NOT NULL,
            content_type TEXT NOT NULL,
            pages INTEGER NOT NULL,
            chunks INTEGER NOT NULL,
            bytes BIGINT NOT NULL,
            created_at TEXT NOT NULL
        );
        CREATE INDEX documents_workspace ON documents (organization_id, environment, seq);
        CREATE TABLE chunks (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            ordinal INTEGER NOT NULL,
            text TEXT NOT NULL,
            pages TEXT NOT NULL,
            page_offsets TEXT NOT NULL DEFAULT '[]'
        );
        CREATE INDEX chunks_document ON chunks (document_id);
        CREATE INDEX chunks_workspace ON chunks (organization_id, environment);
        CREATE TABLE vector_segments (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            document_id TEXT,
            embedder TEXT NOT NULL,
            dimension INTEGER NOT NULL,
            count INTEGER NOT NULL,
            ids BYTEA NOT NULL,
            vectors BYTEA NOT NULL
        );
        ALTER TABLE vector_segments ALTER COLUMN ids SET STORAGE EXTERNAL;
        ALTER TABLE vector_segments ALTER COLUMN vectors SET STORAGE EXTERNAL;
        CREATE INDEX vector_segments_workspace
            ON vector_segments (organization_id, environment, document_id);
        CREATE TABLE knowledge_state (
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            embedder TEXT,
            dimension INTEGER,
            version BIGINT NOT NULL DEFAULT 0,
            PRIMARY KEY (organization_id, environment)
        );
        """,
    ),
    (
        "events_and_webhooks",
        """
        CREATE TABLE events (
            seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            type TEXT NOT NULL,
            timestamp TEXT NOT NULL,
            data TEXT NOT NULL
        );
        CREATE INDEX events_workspace ON events (organization_id, environment, seq);
        CREATE TABLE webhook_subscriptions (
            seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            url TEXT NOT NULL,
            events TEXT NOT NULL,
            status TEXT NOT NULL,
            secret TEXT NOT NULL,
            description TEXT,
            previous_secret TEXT,
            previous_secret_expires_at DOUBLE PRECISION,
            failing_since DOUBLE PRECISION,
            disabled_reason TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        );
        CREATE INDEX webhook_subscriptions_workspace
            ON webhook_subscriptions (organization_id, environment, seq);
        CREATE TABLE webhook_deliveries (
            seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            event_id TEXT NOT NULL,
            subscription_id TEXT NOT NULL,
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            status TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_at DOUBLE PRECISION,
            leased_until DOUBLE PRECISION,
            last_status_code INTEGER,
            last_error TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        );
        CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
            WHERE status = 'pending';
        CREATE INDEX webhook_deliveries_subscription
            ON webhook_deliveries (subscription_id, seq);
        CREATE TABLE webhook_attempts (
            seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            delivery_id TEXT NOT NULL,
            subscription_id TEXT NOT NULL,
            attempted_at TEXT NOT NULL,
            status_code INTEGER,
            error TEXT,
            duration_ms DOUBLE PRECISION NOT NULL
        );
        CREATE INDEX webhook_attempts_delivery ON webhook_attempts (delivery_id, seq);
        """,
    ),
    (
        "chat_and_idempotency",
        """
        CREATE TABLE conversations (
            seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            agent_id TEXT NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        );
        CREATE INDEX conversations_workspace ON conversations (organization_id, environment);
        CREATE TABLE messages (
            seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
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
            response_body BYTEA,
            response_headers TEXT,
            created_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (organization_id, environment, key)
        );
        """,
    ),
    (
        # per version: the segments it added, the ids it deleted (tombstones); the log
        # covers the versions after log_floor (see storage/sqlite/schema.py, m006)
        "knowledge_change_log",
        """
        ALTER TABLE vector_segments ADD COLUMN version BIGINT NOT NULL DEFAULT 0;
        CREATE INDEX vector_segments_version
            ON vector_segments (organization_id, environment, version);
        ALTER TABLE knowledge_state ADD COLUMN log_floor BIGINT NOT NULL DEFAULT 0;
        UPDATE knowledge_state SET log_floor = version;
        CREATE TABLE knowledge_tombstones (
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            version BIGINT NOT NULL,
            ids BYTEA NOT NULL
        );
        CREATE INDEX knowledge_tombstones_version
            ON knowledge_tombstones (organization_id, environment, version);
        """,
    ),
    (
        "rate_limit_buckets",
        """
        CREATE TABLE rate_limit_buckets (
            key_id TEXT PRIMARY KEY,
            tokens DOUBLE PRECISION NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL,
            allowed BOOLEAN NOT NULL
        );
        """,
    ),
    (
        # document status and last error; the durable queue of background ingestion
        # jobs (see storage/sqlite/schema.py, m008)
        "document_status_and_ingest_jobs",
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
            data BYTEA NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            leased_until DOUBLE PRECISION,
            created_at DOUBLE PRECISION NOT NULL
        );
        ALTER TABLE ingest_jobs ALTER COLUMN data SET STORAGE EXTERNAL;
        CREATE INDEX ingest_jobs_lease ON ingest_jobs (created_at);
        """,
    ),
    (
        # per document: its sentences (term '') and how many hold each word stem;
        # dropped with the document (see storage/sqlite/schema.py, m009)
        "term_counts",
        """
        CREATE TABLE term_counts (
            document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
            organization_id TEXT NOT NULL,
            environment TEXT NOT NULL,
            term TEXT NOT NULL,
            sentences INTEGER NOT NULL,
            PRIMARY KEY (document_id, term)
        );
        CREATE INDEX term_counts_term ON term_counts (organization_id, environment, term);
        """,
    ),
]

# The pgvector table: created only when a node opens with ``vector_search = "pgvector"``
# (the extension may be absent where nobody asked for it), then kept up to date by
# every node, and filled from the segments when first created. ``embedding`` is a
# half-precision ``halfvec`` (half the bytes to scan; its distance functions also run
# on CPUs where this build's float ``vector`` ones do not), ``exact`` the float32 row
# that the candidates are re-scored with, so scores and order are the exact ones.
VECTOR_ROWS = """
    CREATE EXTENSION IF NOT EXISTS vector;
    CREATE TABLE IF NOT EXISTS vector_rows (
        chunk_id BIGINT PRIMARY KEY,
        organization_id TEXT NOT NULL,
        environment TEXT NOT NULL,
        document_id TEXT,
        dimension INTEGER NOT NULL,
        embedding halfvec NOT NULL,
        exact BYTEA NOT NULL
    );
    CREATE INDEX IF NOT EXISTS vector_rows_workspace
        ON vector_rows (organization_id, environment, document_id);
"""


class SchemaTooNew(RuntimeError):
    """The database was migrated by a newer agentcore than this one."""


def migrate(conn: Conn) -> int:
    """Apply pending migrations in one transaction under the advisory lock; the version."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", [MIGRATION_LOCK])
        conn.execute(
            "CREATE TABLE IF NOT EXISTS agentcore_migrations ("
            " version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
            " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        row = conn.execute("SELECT COALESCE(MAX(version), 0) AS v FROM agentcore_migrations")
        found = row.fetchone()
        current = int(found["v"]) if found else 0
        if current > len(MIGRATIONS):
            raise SchemaTooNew(
                f"The database schema is at version {current}, newer than this agentcore"
                f" (which knows versions up to {len(MIGRATIONS)}); upgrade agentcore."
            )
        for version, (name, script) in enumerate(MIGRATIONS, start=1):
            if version <= current:
                continue
            for statement in script.split(";"):
                if statement.strip():
                    conn.execute(statement.encode())
            conn.execute(
                "INSERT INTO agentcore_migrations (version, name) VALUES (%s, %s)",
                [version, name],
            )
    return len(MIGRATIONS)
