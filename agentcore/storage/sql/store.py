"""``SQLStore``: everything agentcore keeps, in SQL written once for both databases."""

from __future__ import annotations

from agentcore.storage.base import Store
from agentcore.storage.sql.agents import AgentTables
from agentcore.storage.sql.conversations import ConversationTables
from agentcore.storage.sql.documents import DocumentTables
from agentcore.storage.sql.idempotency import IdempotencyTables
from agentcore.storage.sql.keys import KeyTables
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
):
    """A ``Store`` over one SQL database (subclassing the protocol, so that mypy refuses to
    build a store that leaves any of its methods out).

    Its table modules write each statement once against ``db`` (the database's
    ``Database``) in the words of ``dialect``; a subclass per database
    (``SQLiteStore``, ``PostgresStore``) opens the connections, migrates, and fills in
    the hooks where the two databases really differ (term counts, pgvector rows,
    waking other nodes).
    """

    url: str
    #: Whether several machines may serve this store at once (PostgreSQL: yes; a SQLite
    #: file: no). ``rate_limit_backend = "auto"`` keeps token buckets in such a store.
    shared_by_nodes: bool

    def ping(self) -> None:
        """``SELECT 1``: raises when the database does not answer (on PostgreSQL
        ``ServiceUnavailable`` once retries found no connection)."""
        with self.db.read() as conn:
            conn.execute("SELECT 1").fetchone()

    def close(self) -> None:
        """Close every connection."""
        self.db.close()
