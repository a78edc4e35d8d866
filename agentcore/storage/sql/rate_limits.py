"""Token buckets in SQL: one row per key, taken from with one atomic UPSERT."""

from __future__ import annotations

from functools import cache

from agentcore.storage.base import RateLimitStore
from agentcore.storage.records import TokenTake
from agentcore.storage.sql.database import Tables
from agentcore.storage.sql.dialect import Dialect


@cache
def _take_sql(d: Dialect) -> str:
    # the refill as of :now (never negative if clocks disagree), capped at the burst
    refill = f"{d.least}(:burst, b.tokens + {d.greatest}(0.0, :now - b.updated_at) * :rate)"
    return (
        "INSERT INTO rate_limit_buckets AS b (key_id, tokens, updated_at, allowed)"
        " VALUES (:key, CASE WHEN :burst >= 1 THEN :burst - 1 ELSE :burst END, :now,"
        " :burst >= 1)"
        " ON CONFLICT (key_id) DO UPDATE SET"
        f" tokens = CASE WHEN {refill} >= 1 THEN {refill} - 1 ELSE {refill} END,"
        f" updated_at = {d.greatest}(b.updated_at, :now),"
        f" allowed = {refill} >= 1"
        " RETURNING tokens, allowed"
    )


class RateLimitTables(Tables, RateLimitStore):
    """Token buckets in ``rate_limit_buckets``, shared by every process and node."""

    def take_token(self, key_id: str, *, rate: float, burst: float, now: float) -> TokenTake:
        # One UPSERT statement, so one short write: SQLite serialises it with every
        # other writer of the file; on PostgreSQL the row lock of ``ON CONFLICT DO
        # UPDATE`` serialises concurrent takes of one key, and each sees the latest tokens.
        row = self.db.write_one(
            _take_sql(self.dialect),
            {"key": key_id, "rate": float(rate), "burst": float(burst), "now": float(now)},
        )
        return TokenTake(allowed=bool(row["allowed"]), tokens=float(row["tokens"]))
