"""PostgreSQL storage of idempotent responses (Stripe's Idempotency-Key semantics)."""

from __future__ import annotations

from typing import Literal

from agentcore.storage.postgres.connection import Database, retrying
from agentcore.storage.records import StoredResult

Claim = Literal["new", "replay", "mismatch", "in_progress"]
_KEY = "organization_id = %s AND environment = %s AND key = %s"


class IdempotencyStore:
    """One row per (workspace, key): in progress, then the response to replay."""

    db: Database

    @retrying
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
        """Claim ``key`` for a request, atomically across every node.

        An expired row is removed, then ``INSERT ... ON CONFLICT DO NOTHING`` decides
        the race: exactly one caller inserts (``new``); the others read the row the
        winner committed (after waiting on its row lock while it is uncommitted).
        """
        scope = [organization_id, environment, key]
        with self.db.write() as conn:
            conn.execute(
                f"DELETE FROM idempotency_keys WHERE {_KEY} AND created_at <= %s",
                [*scope, now - ttl],
            )
            inserted = conn.execute(
                "INSERT INTO idempotency_keys (organization_id, environment, key,"
                " fingerprint, status, created_at) VALUES (%s, %s, %s, %s, 'in_progress', %s)"
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
        return "replay", StoredResult(row["response_status"], bytes(row["response_body"]).decode())

    @retrying
    def finish_idempotency_key(
        self, organization_id: str, environment: str, key: str, result: StoredResult
    ) -> None:
        """Store the result to replay for ``key`` (its JSON body as UTF-8 bytes)."""
        with self.db.write() as conn:
            conn.execute(
                "UPDATE idempotency_keys SET status = 'done', response_status = %s,"
                f" response_body = %s, response_headers = NULL WHERE {_KEY}",
                [result.status, result.body.encode(), organization_id, environment, key],
            )

    @retrying
    def release_idempotency_key(self, organization_id: str, environment: str, key: str) -> None:
        """Forget an in-progress claim whose request crashed, so a retry can run."""
        with self.db.write() as conn:
            conn.execute(
                f"DELETE FROM idempotency_keys WHERE {_KEY} AND status = 'in_progress'",
                [organization_id, environment, key],
            )
