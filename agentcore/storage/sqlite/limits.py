"""SQLite token buckets: one row per key, taken from with one atomic UPSERT."""

from __future__ import annotations

from agentcore.storage.records import TokenTake
from agentcore.storage.sqlite.connection import Database

# The refill as of :now (never negative if clocks disagree), capped at the burst.
_REFILL = "MIN(:burst, tokens + MAX(0.0, :now - updated_at) * :rate)"


class RateLimitStore:
    """Token buckets shared by every process that opens the same database."""

    db: Database

    def take_token(self, key_id: str, *, rate: float, burst: float, now: float) -> TokenTake:
        """Take one token from ``key_id``'s bucket (a new bucket starts full).

        One UPSERT statement, so one short write transaction: SQLite serialises it
        with every other writer of the file, in this process and in others.
        """
        row = self.db.write_one(
            "INSERT INTO rate_limit_buckets (key_id, tokens, updated_at, allowed)"
            " VALUES (:key, CASE WHEN :burst >= 1 THEN :burst - 1 ELSE :burst END, :now,"
            " :burst >= 1)"
            " ON CONFLICT (key_id) DO UPDATE SET"
            f" tokens = CASE WHEN {_REFILL} >= 1 THEN {_REFILL} - 1 ELSE {_REFILL} END,"
            " updated_at = MAX(updated_at, :now),"
            f" allowed = {_REFILL} >= 1"
            " RETURNING tokens, allowed",
            {"key": key_id, "rate": rate, "burst": burst, "now": now},
        )
        assert row is not None  # an UPSERT ... RETURNING always returns its row
        return TokenTake(allowed=bool(row["allowed"]), tokens=float(row["tokens"]))
