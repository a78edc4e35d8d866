"""``SQLStore``: everything agentcore keeps, in SQL written once for both databases."""

from __future__ import annotations

from agentcore.storage.base import ObservableStore, Store
from agentcore.storage.records import Backlog, ConnectionStats
from agentcore.storage.sql.agents import AgentTables
from agentcore.storage.sql.conversations import ConversationTables
from agentcore.storage.sql.documents import DocumentTables
from agentcore.storage.sql.idempotency import IdempotencyTables
from agentcore.storage.sql.keys import KeyTables
from agentcore.storage.sql.queries import read_row
from agentcore.storage.sql.rate_limits import RateLimitTables
from agentcore.storage.sql.webhooks import WebhookTables


class SQLStore(
    KeyTables,
    AgentTables,
    DocumentTables,
    WebhookTables,
    ConversationTables,
    IdempotencyTables,
    RateLimitTables,
    Store,
    ObservableStore,
):
    """A ``Store`` over one SQL database (subclassing the protocol, so that mypy refuses to
    build a store that leaves any of its methods out).

    Its table modules write each statement once against ``db`` (the database's
    ``Database``) in the words of ``dialect``; a subclass per database
    (``SQLiteStore``, ``PostgresStore``) opens the connections, migrates, and fills in
    the hooks where the two databases really differ (term counts, pgvector rows,
    waking other nodes).
    """

    def ping(self) -> None:
        read_row(self.db, "SELECT 1")

    def backlog(self, now: float) -> Backlog:
        # two indexed counts: the metrics read them at each scrape, never per request
        with self.db.snapshot() as conn:
            jobs = conn.execute(
                "SELECT COUNT(*) AS total, COALESCE(SUM(CASE WHEN leased_until > ? THEN 1"
                " ELSE 0 END), 0) AS running FROM ingest_jobs",
                [now],
            ).fetchone()
            # one count per status, so each reads its own index (PostgreSQL's are partial)
            deliveries = {
                row["status"]: int(row["n"])
                for row in conn.execute(
                    "SELECT 'pending' AS status, COUNT(*) AS n FROM webhook_deliveries"
                    " WHERE status = 'pending' UNION ALL SELECT 'failed', COUNT(*)"
                    " FROM webhook_deliveries WHERE status = 'failed'"
                )
            }
        running = int(jobs["running"])
        return Backlog(
            ingest_queued=int(jobs["total"]) - running,
            ingest_running=running,
            deliveries_pending=deliveries["pending"],
            deliveries_failed=deliveries["failed"],
        )

    def connection_stats(self) -> ConnectionStats:
        return self.db.connection_stats()

    def close(self) -> None:
        self.db.close()
