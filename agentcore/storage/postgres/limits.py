"""PostgreSQL token buckets: one row per key, taken from with one atomic UPSERT."""

from __future__ import annotations

from agentcore.storage.postgres.connection import Database, retrying
from agentcore.storage.records import TokenTake

# The refill as of %(now)s (never negative if clocks disagree), capped at the burst.
_REFILL = "LEAST(%(burst)s, b.tokens + GREATEST(0.0, %(now)s - b.updated_at) * %(rate)s)"


class RateLimitStore:
    """Token buckets shared by every node on the database."""

    db: Database

    @retrying
    def take_token(self, key_id: str, *, rate: float, burst: float, now: float) -> TokenTake:
        """Take one token from ``key_id``'s bucket (a new bucket starts full).

        One autocommit UPSERT: the row lock of ``ON CONFLICT DO UPDATE`` serialises
        concurrent takes of one key on every node, and each sees the latest tokens.
        """
        params = {"key": key_id, "rate": float(rate), "burst": float(burst), "now": float(now)}
        with self.db.read() as conn:
            row = conn.execute(
                "INSERT INTO rate_limit_buckets AS b (key_id, tokens, updated_at, allowed)"
                " VALUES (%(key)s, CASE WHEN %(burst)s >= 1 THEN %(burst)s - 1"
                " ELSE %(burst)s END, %(now)s, %(burst)s >= 1)"
                " ON CONFLICT (key_id) DO UPDATE SET"
                f" tokens = CASE WHEN {_REFILL} >= 1 THEN {_REFILL} - 1 ELSE {_REFILL} END,"
                " updated_at = GREATEST(b.updated_at, %(now)s),"
                f" allowed = {_REFILL} >= 1"
                " RETURNING tokens, allowed",
                params,
            ).fetchone()
        assert row is not None  # an UPSERT ... RETURNING always returns its row
        return TokenTake(allowed=bool(row["allowed"]), tokens=float(row["tokens"]))
