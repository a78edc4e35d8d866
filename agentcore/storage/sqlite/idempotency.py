"""SQLite storage of idempotency keys and the results they replay (``agentcore.idempotency``)."""

from __future__ import annotations

from typing import Literal

from agentcore.storage.records import StoredResult
from agentcore.storage.sqlite.connection import Database

Claim = Literal["new", "replay", "mismatch", "in_progress"]


class IdempotencyStore:
    """One row per (workspace, key): in progress, then the result to replay.

    The result's JSON body goes in ``response_body`` (rows written by older versions
    hold it as bytes, which read the same); ``response_headers`` is no longer used.
    """

    db: Database

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
        """Claim ``key`` for a request, atomically.

        ``new``: the caller runs the request and must ``finish`` or ``release`` it;
        ``replay``: the stored result; ``mismatch``: the key was used with another
        request; ``in_progress``: a duplicate is running right now.
        """
        with self.db.write() as conn:
            row = conn.execute(
                "SELECT * FROM idempotency_keys WHERE organization_id = ? AND environment = ?"
                " AND key = ?",
                [organization_id, environment, key],
            ).fetchone()
            if row is not None and row["created_at"] + ttl <= now:
                conn.execute(
                    "DELETE FROM idempotency_keys WHERE organization_id = ? AND environment = ?"
                    " AND key = ?",
                    [organization_id, environment, key],
                )
                row = None
            if row is None:
                conn.execute(
                    "INSERT INTO idempotency_keys (organization_id, environment, key,"
                    " fingerprint, status, created_at) VALUES (?, ?, ?, ?, 'in_progress', ?)",
                    [organization_id, environment, key, fingerprint, now],
                )
                return "new", None
            if row["fingerprint"] != fingerprint:
                return "mismatch", None
            if row["status"] != "done":
                return "in_progress", None
            body = row["response_body"]
            if isinstance(body, bytes):
                body = body.decode()
            return "replay", StoredResult(row["response_status"], body)

    def finish_idempotency_key(
        self, organization_id: str, environment: str, key: str, result: StoredResult
    ) -> None:
        """Store the result to replay for ``key``."""
        with self.db.write() as conn:
            conn.execute(
                "UPDATE idempotency_keys SET status = 'done', response_status = ?,"
                " response_body = ?, response_headers = NULL WHERE organization_id = ?"
                " AND environment = ? AND key = ?",
                [result.status, result.body, organization_id, environment, key],
            )

    def release_idempotency_key(self, organization_id: str, environment: str, key: str) -> None:
        """Forget an in-progress claim whose request crashed, so a retry can run."""
        with self.db.write() as conn:
            conn.execute(
                "DELETE FROM idempotency_keys WHERE organization_id = ? AND environment = ?"
                " AND key = ? AND status = 'in_progress'",
                [organization_id, environment, key],
            )
