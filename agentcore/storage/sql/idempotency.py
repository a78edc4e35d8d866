"""Idempotency keys and the results they replay, in SQL (Stripe's Idempotency-Key semantics)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from agentcore.storage.base import IdempotencyStore
from agentcore.storage.records import StoredResult
from agentcore.storage.sql.database import Tables
from agentcore.storage.sql.queries import write

Claim = Literal["new", "replay", "mismatch", "in_progress"]
_KEY = "organization_id = ? AND environment = ? AND key = ?"


def _holder(claimed_at: float | None) -> tuple[str, list[float]]:
    """The condition naming one claim of a key (``claimed_at``: the ``now`` it was made
    with), so a holder that was taken over for dead writes nothing over its successor."""
    return ("", []) if claimed_at is None else (" AND created_at = ?", [claimed_at])


class IdempotencyTables(Tables, IdempotencyStore):
    """One row per (workspace, key) in ``idempotency_keys``: in progress, then the
    result to replay.

    The result's JSON body is kept as UTF-8 bytes in ``response_body`` (SQLite rows of
    some earlier versions hold it as text, which reads the same); ``response_headers``
    is no longer used. ``created_at`` is when the key was claimed (the row expires
    ``ttl`` seconds later, and it names the claim to its holder's writes);
    ``lease_until`` is when a claim still in progress lapses unless its holder renews
    it first (``renew_idempotency_keys``; NULL: at the ttl). ``conversation_id`` names
    the conversation whose messages the kept result holds (deleted with it).
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
        lease: float | None = None,
    ) -> tuple[Claim, StoredResult | None]:
        # An expired row, or a claim whose lease lapsed without a result (its holder
        # stopped renewing it), is removed, then ``INSERT ... ON CONFLICT DO NOTHING``
        # decides the race: exactly one caller inserts; the others read the row the
        # winner committed.
        scope = [organization_id, environment, key]
        with self.db.write() as conn:
            conn.execute(
                f"DELETE FROM idempotency_keys WHERE {_KEY} AND (created_at <= ?"
                " OR (status = 'in_progress' AND lease_until <= ?))",
                [*scope, now - ttl, now],
            )
            inserted = conn.execute(
                "INSERT INTO idempotency_keys (organization_id, environment, key,"
                " fingerprint, status, created_at, lease_until)"
                " VALUES (?, ?, ?, ?, 'in_progress', ?, ?) ON CONFLICT DO NOTHING",
                [*scope, fingerprint, now, None if lease is None else now + lease],
            )
            if inserted.rowcount == 1:
                return "new", None
            row = conn.execute(f"SELECT * FROM idempotency_keys WHERE {_KEY}", scope).fetchone()
        if row is None:  # released between our insert attempt and this read: try again
            return self.claim_idempotency_key(
                organization_id, environment, key, fingerprint, now=now, ttl=ttl, lease=lease
            )
        if row["fingerprint"] != fingerprint:
            return "mismatch", None
        if row["status"] != "done":
            return "in_progress", None
        body = row["response_body"]
        text = body if isinstance(body, str) else bytes(body).decode()
        return "replay", StoredResult(row["response_status"], text, row["conversation_id"])

    def finish_idempotency_key(
        self,
        organization_id: str,
        environment: str,
        key: str,
        result: StoredResult,
        *,
        claimed_at: float | None = None,
    ) -> None:
        holder, args = _holder(claimed_at)
        scope = [organization_id, environment, key]
        write(
            self.db,
            "UPDATE idempotency_keys SET status = 'done', response_status = ?,"
            " response_body = ?, response_headers = NULL, conversation_id = ?"
            f" WHERE {_KEY}{holder}",
            [result.status, result.body.encode(), result.conversation_id, *scope, *args],
        )

    def release_idempotency_key(
        self, organization_id: str, environment: str, key: str, *, claimed_at: float | None = None
    ) -> None:
        holder, args = _holder(claimed_at)
        sql = f"DELETE FROM idempotency_keys WHERE {_KEY} AND status = 'in_progress'{holder}"
        write(self.db, sql, [organization_id, environment, key, *args])

    def renew_idempotency_keys(
        self, claims: Sequence[tuple[str, str, str, float]], *, until: float
    ) -> list[tuple[str, str, str, float]]:
        lost = []
        with self.db.write() as conn:  # one transaction, however many claims
            for claim in claims:
                renewed = conn.execute(
                    f"UPDATE idempotency_keys SET lease_until = ? WHERE {_KEY}"
                    " AND created_at = ? AND status = 'in_progress'",
                    [until, *claim],
                )
                if renewed.rowcount == 0:
                    lost.append(claim)
        return lost

    def sweep_idempotency_keys(self, *, before: float, limit: int) -> int:
        # bounded, so one pass is a short write however many keys expired at once
        sql = (
            "DELETE FROM idempotency_keys WHERE (organization_id, environment, key) IN"
            " (SELECT organization_id, environment, key FROM idempotency_keys"
            " WHERE created_at <= ? LIMIT ?)"
        )
        return max(write(self.db, sql, [before, limit]), 0)
