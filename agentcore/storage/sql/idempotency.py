"""Idempotency keys and the results they replay, in SQL (Stripe's Idempotency-Key semantics)."""

from __future__ import annotations

from typing import Literal

from agentcore.storage.base import IdempotencyStore
from agentcore.storage.records import StoredResult
from agentcore.storage.sql.database import Tables
from agentcore.storage.sql.queries import write

Claim = Literal["new", "replay", "mismatch", "in_progress"]
_KEY = "organization_id = ? AND environment = ? AND key = ?"


class IdempotencyTables(Tables, IdempotencyStore):
    """One row per (workspace, key) in ``idempotency_keys``: in progress, then the
    result to replay.

    The result's JSON body is kept as UTF-8 bytes in ``response_body`` (SQLite rows of
    some earlier versions hold it as text, which reads the same); ``response_headers``
    is no longer used.
    """

    def claim_idempotency_key(
        self,
        organization_id: str,
        environment: str,
        key: str,
        fingerprint: str,
        *,
        now: float,
        ttl: float,
    ) -> tuple[Claim, StoredResult | None]:
        # An expired row is removed, then ``INSERT ... ON CONFLICT DO NOTHING`` decides
        # the race: exactly one caller inserts; the others read the row the winner committed.
        scope = [organization_id, environment, key]
        with self.db.write() as conn:
            conn.execute(
                f"DELETE FROM idempotency_keys WHERE {_KEY} AND created_at <= ?",
                [*scope, now - ttl],
            )
            inserted = conn.execute(
                "INSERT INTO idempotency_keys (organization_id, environment, key,"
                " fingerprint, status, created_at) VALUES (?, ?, ?, ?, 'in_progress', ?)"
                " ON CONFLICT DO NOTHING",
                [*scope, fingerprint, now],
            )
            if inserted.rowcount == 1:
                return "new", None
            row = conn.execute(f"SELECT * FROM idempotency_keys WHERE {_KEY}", scope).fetchone()
        if row is None:  # released between our insert attempt and this read: try again
            return self.claim_idempotency_key(
                organization_id, environment, key, fingerprint, now=now, ttl=ttl
            )
        if row["fingerprint"] != fingerprint:
            return "mismatch", None
        if row["status"] != "done":
            return "in_progress", None
        body = row["response_body"]
        text = body if isinstance(body, str) else bytes(body).decode()
        return "replay", StoredResult(row["response_status"], text)

    def finish_idempotency_key(
        self, organization_id: str, environment: str, key: str, result: StoredResult
    ) -> None:
        write(
            self.db,
            "UPDATE idempotency_keys SET status = 'done', response_status = ?,"
            f" response_body = ?, response_headers = NULL WHERE {_KEY}",
            [result.status, result.body.encode(), organization_id, environment, key],
        )

    def release_idempotency_key(self, organization_id: str, environment: str, key: str) -> None:
        sql = f"DELETE FROM idempotency_keys WHERE {_KEY} AND status = 'in_progress'"
        write(self.db, sql, [organization_id, environment, key])
