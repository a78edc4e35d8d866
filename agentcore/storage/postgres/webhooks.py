"""PostgreSQL storage of events, webhook subscriptions, the delivery outbox and attempts.

Deliveries are claimed with ``FOR UPDATE SKIP LOCKED`` plus a lease: nodes claiming at
the same moment take disjoint rows without waiting for each other, and a delivery
leased by a node that died is claimed again once its lease has run out. Recording an
event sends ``NOTIFY agentcore_events`` at commit, so idle nodes wake at once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from psycopg import sql
from psycopg.rows import DictRow

from agentcore.events import Event
from agentcore.ids import new_id, now_iso
from agentcore.schema import Delivery, DeliveryAttempt, WebhookSubscription
from agentcore.storage.postgres.connection import (
    Conn,
    Database,
    page_rows,
    retrying,
    update_row,
)
from agentcore.storage.records import DueDelivery, StoredSubscription

_WORKSPACE = "organization_id = %s AND environment = %s"
CHANNEL = "agentcore_events"
_SUBSCRIPTION_COLUMNS = {
    "status",
    "secret",
    "previous_secret",
    "previous_secret_expires_at",
    "failing_since",
    "disabled_reason",
}


# A disabled subscription's pending deliveries end as failed (as SQLite's), so no
# delivery waits forever for a subscription nobody may re-enable.
_FAIL_PENDING_OF_DISABLED = (
    "UPDATE webhook_deliveries d SET status = 'failed', next_attempt_at = NULL,"
    " leased_until = NULL, updated_at = %s,"
    " last_error = 'subscription disabled: ' || COALESCE(s.disabled_reason, 'disabled')"
    " FROM webhook_subscriptions s WHERE s.id = %s AND s.status = 'disabled'"
    " AND d.subscription_id = s.id AND d.status = 'pending'"
)


def _fail_pending_of_disabled(conn: Conn, subscription_id: str) -> None:
    conn.execute(_FAIL_PENDING_OF_DISABLED, [now_iso(), subscription_id])


def _subscription(data: DictRow) -> StoredSubscription:
    public = WebhookSubscription(
        id=data["id"],
        status=data["status"],
        url=data["url"],
        events=json.loads(data["events"]),
        description=data.get("description"),
        disabled_reason=data["disabled_reason"],
        created_at=data["created_at"],
        updated_at=data["updated_at"],
    )
    return StoredSubscription(
        public=public,
        organization_id=data["organization_id"],
        environment=data["environment"],
        secret=data["secret"],
        previous_secret=data["previous_secret"],
        previous_secret_expires_at=data["previous_secret_expires_at"],
        failing_since=data["failing_since"],
    )


class WebhookStore:
    """Subscriptions and a durable outbox shared by every node."""

    db: Database

    # subscriptions ---------------------------------------------------------------

    @retrying
    def insert_subscription(
        self,
        organization_id: str,
        environment: str,
        *,
        url: str,
        events: Sequence[str],
        secret: str,
        description: str | None,
    ) -> StoredSubscription:
        """Store a new active subscription."""
        now = now_iso()
        with self.db.write() as conn:
            row = conn.execute(
                "INSERT INTO webhook_subscriptions (id, organization_id, environment, url,"
                " events, status, secret, description, created_at, updated_at)"
                " VALUES (%s, %s, %s, %s, %s, 'active', %s, %s, %s, %s) RETURNING *",
                [
                    new_id("whk"),
                    organization_id,
                    environment,
                    url,
                    json.dumps(list(events)),
                    secret,
                    description,
                    now,
                    now,
                ],
            ).fetchone()
        assert row is not None
        return _subscription(row)

    @retrying
    def get_subscription(
        self, organization_id: str | None, environment: str | None, subscription_id: str
    ) -> StoredSubscription | None:
        """A subscription of this workspace (any workspace if both are ``None``)."""
        with self.db.read() as conn:
            if organization_id is None:
                row = conn.execute(
                    "SELECT * FROM webhook_subscriptions WHERE id = %s", [subscription_id]
                ).fetchone()
            else:
                row = conn.execute(
                    f"SELECT * FROM webhook_subscriptions WHERE id = %s AND {_WORKSPACE}",
                    [subscription_id, organization_id, environment],
                ).fetchone()
        return _subscription(row) if row else None

    @retrying
    def list_subscriptions(
        self, organization_id: str, environment: str, *, limit: int, starting_after: str | None
    ) -> tuple[list[StoredSubscription], bool]:
        """A page of subscriptions, newest first."""
        with self.db.snapshot() as conn:
            rows, more = page_rows(
                conn,
                "webhook_subscriptions",
                scope=(organization_id, environment),
                limit=limit,
                starting_after=starting_after,
            )
        return [_subscription(row) for row in rows], more

    @retrying
    def update_subscription(self, subscription_id: str, **changes: Any) -> None:
        """Set status, secrets, failure tracking or the disabled reason; disabling it
        ends its pending deliveries as ``failed`` (in the same transaction)."""
        with self.db.write() as conn:
            update_row(
                conn,
                "webhook_subscriptions",
                subscription_id,
                changes,
                allowed=_SUBSCRIPTION_COLUMNS,
                stamp_column="updated_at",
                stamp=now_iso(),
            )
            if changes.get("status") == "disabled":
                _fail_pending_of_disabled(conn, subscription_id)

    @retrying
    def delete_subscription(
        self, organization_id: str, environment: str, subscription_id: str
    ) -> bool:
        """Delete a subscription; its pending deliveries end as failed."""
        with self.db.write() as conn:
            cursor = conn.execute(
                f"DELETE FROM webhook_subscriptions WHERE id = %s AND {_WORKSPACE}",
                [subscription_id, organization_id, environment],
            )
            if cursor.rowcount == 0:
                return False
            conn.execute(
                "UPDATE webhook_deliveries SET status = 'failed', next_attempt_at = NULL,"
                " last_error = 'subscription deleted', updated_at = %s"
                " WHERE subscription_id = %s AND status = 'pending'",
                [now_iso(), subscription_id],
            )
        return True

    # the outbox ------------------------------------------------------------------

    @retrying
    def record_event(
        self, event: Event, *, now: float, only_subscription: str | None = None
    ) -> int:
        """Store ``event`` and a pending delivery per matching active subscription.

        One transaction, which also notifies ``agentcore_events`` (delivered to the
        listening nodes when it commits). Returns how many deliveries were created.
        """
        with self.db.write() as conn:
            conn.execute(
                "INSERT INTO events (id, organization_id, environment, type, timestamp, data)"
                " VALUES (%s, %s, %s, %s, %s, %s)",
                [
                    event.id,
                    event.organization_id,
                    event.environment,
                    event.type,
                    event.timestamp,
                    json.dumps(event.data, separators=(",", ":")),
                ],
            )
            if only_subscription is not None:
                targets = [only_subscription]
            else:
                rows = conn.execute(
                    "SELECT id, events FROM webhook_subscriptions"
                    f" WHERE {_WORKSPACE} AND status = 'active'",
                    [event.organization_id, event.environment],
                ).fetchall()
                targets = [row["id"] for row in rows if event.type in json.loads(row["events"])]
            stamp = now_iso()
            if targets:
                with conn.cursor() as cursor:
                    cursor.executemany(
                        "INSERT INTO webhook_deliveries (id, event_id, subscription_id,"
                        " organization_id, environment, status, next_attempt_at, created_at,"
                        " updated_at) VALUES (%s, %s, %s, %s, %s, 'pending', %s, %s, %s)",
                        [
                            [
                                new_id("dlv"),
                                event.id,
                                subscription_id,
                                event.organization_id,
                                event.environment,
                                now,
                                stamp,
                                stamp,
                            ]
                            for subscription_id in targets
                        ],
                    )
                conn.execute(sql.SQL("NOTIFY {}").format(sql.Identifier(CHANNEL)))
        return len(targets)

    @retrying
    def claim_due_deliveries(
        self,
        *,
        now: float,
        lease_seconds: float,
        limit: int,
        busy_subscriptions: Sequence[str] = (),
    ) -> list[DueDelivery]:
        """Lease up to ``limit`` due deliveries of active subscriptions, oldest first.

        ``FOR UPDATE OF d SKIP LOCKED``: rows another node is leasing right now are
        skipped rather than waited for, and the lease set in the same transaction
        keeps them from every other claimer until it runs out.
        """
        with self.db.write() as conn:
            rows = conn.execute(
                "WITH due AS ("
                " SELECT d.seq FROM webhook_deliveries d"
                " JOIN webhook_subscriptions s ON s.id = d.subscription_id"
                " WHERE d.status = 'pending' AND d.next_attempt_at <= %s"
                " AND (d.leased_until IS NULL OR d.leased_until < %s)"
                " AND s.status = 'active' AND NOT (d.subscription_id = ANY(%s))"
                " ORDER BY d.next_attempt_at, d.seq LIMIT %s"
                " FOR UPDATE OF d SKIP LOCKED)"
                " UPDATE webhook_deliveries d SET leased_until = %s FROM due"
                " WHERE d.seq = due.seq RETURNING d.id, d.seq, d.next_attempt_at",
                [now, now, list(busy_subscriptions), limit, now + lease_seconds],
            ).fetchall()
            if not rows:
                return []
            order = sorted(rows, key=lambda row: (row["next_attempt_at"], row["seq"]))
            details = conn.execute(
                "SELECT d.id, d.event_id, d.subscription_id, d.attempts, s.url, s.secret,"
                " s.previous_secret, s.previous_secret_expires_at, s.failing_since,"
                " e.type, e.timestamp, e.data"
                " FROM webhook_deliveries d"
                " JOIN webhook_subscriptions s ON s.id = d.subscription_id"
                " JOIN events e ON e.id = d.event_id WHERE d.id = ANY(%s)",
                [[row["id"] for row in order]],
            ).fetchall()
        by_id = {row["id"]: row for row in details}
        claimed = []
        for leased in order:
            row = by_id[leased["id"]]
            previous = (
                [row["previous_secret"]]
                if row["previous_secret"] and (row["previous_secret_expires_at"] or 0) > now
                else []
            )
            claimed.append(
                DueDelivery(
                    id=row["id"],
                    event_id=row["event_id"],
                    subscription_id=row["subscription_id"],
                    attempts=row["attempts"],
                    url=row["url"],
                    secrets=[row["secret"], *previous],
                    failing_since=row["failing_since"],
                    event_type=row["type"],
                    event_timestamp=row["timestamp"],
                    event_data=json.loads(row["data"]),
                )
            )
        return claimed

    @retrying
    def next_due_at(self) -> float | None:
        """When the earliest pending delivery of an active subscription falls due."""
        with self.db.read() as conn:
            row = conn.execute(
                "SELECT MIN(GREATEST(d.next_attempt_at, COALESCE(d.leased_until, 0))) AS due"
                " FROM webhook_deliveries d JOIN webhook_subscriptions s"
                " ON s.id = d.subscription_id WHERE d.status = 'pending' AND s.status = 'active'"
            ).fetchone()
        return None if row is None or row["due"] is None else float(row["due"])

    @retrying
    def record_attempt(
        self,
        delivery: DueDelivery,
        *,
        attempted_at: str,
        status_code: int | None,
        error: str | None,
        duration_ms: float,
        outcome: str,
        next_attempt_at: float | None,
        subscription_changes: dict[str, Any],
    ) -> None:
        """Log an attempt and move the delivery (and maybe its subscription) on, atomically."""
        with self.db.write() as conn:
            conn.execute(
                "INSERT INTO webhook_attempts (delivery_id, subscription_id, attempted_at,"
                " status_code, error, duration_ms) VALUES (%s, %s, %s, %s, %s, %s)",
                [
                    delivery.id,
                    delivery.subscription_id,
                    attempted_at,
                    status_code,
                    error,
                    duration_ms,
                ],
            )
            conn.execute(
                "UPDATE webhook_deliveries SET attempts = attempts + 1, status = %s,"
                " next_attempt_at = %s, leased_until = NULL, last_status_code = %s,"
                " last_error = %s, updated_at = %s WHERE id = %s",
                [outcome, next_attempt_at, status_code, error, now_iso(), delivery.id],
            )
            changes = dict(subscription_changes)
            # the failure streak is decided here, not from the lease-time snapshot
            if outcome == "succeeded":
                changes.pop("failing_since", None)
                conn.execute(
                    "UPDATE webhook_subscriptions SET failing_since = NULL, updated_at = %s"
                    " WHERE id = %s AND failing_since IS NOT NULL",
                    [now_iso(), delivery.subscription_id],
                )
            elif changes.get("failing_since") is not None:
                conn.execute(
                    "UPDATE webhook_subscriptions"
                    " SET failing_since = COALESCE(failing_since, %s) WHERE id = %s",
                    [changes.pop("failing_since"), delivery.subscription_id],
                )
            if changes:
                self.update_subscription(delivery.subscription_id, **changes)
            # disabled meanwhile (by another delivery's 410): a retry would wait forever
            _fail_pending_of_disabled(conn, delivery.subscription_id)

    @retrying
    def list_deliveries(
        self,
        organization_id: str,
        environment: str,
        subscription_id: str,
        *,
        limit: int,
        starting_after: str | None,
    ) -> tuple[list[Delivery], bool]:
        """A page of a subscription's deliveries with their attempts, newest first."""
        with self.db.snapshot() as conn:
            rows, more = page_rows(
                conn,
                "webhook_deliveries",
                scope=(organization_id, environment),
                limit=limit,
                starting_after=starting_after,
                filters=sql.SQL("subscription_id = %s"),
                filter_params=[subscription_id],
            )
            ids = [row["id"] for row in rows]
            types = {
                r["id"]: r["type"]
                for r in conn.execute(
                    "SELECT id, type FROM events WHERE id = ANY(%s)",
                    [[row["event_id"] for row in rows]],
                ).fetchall()
            }
            attempts: dict[str, list[DeliveryAttempt]] = {i: [] for i in ids}
            for a in conn.execute(
                "SELECT delivery_id, attempted_at, status_code, error, duration_ms"
                " FROM webhook_attempts WHERE delivery_id = ANY(%s) ORDER BY seq",
                [ids],
            ).fetchall():
                attempts[a.pop("delivery_id")].append(DeliveryAttempt(**a))
        deliveries = [
            Delivery(
                id=row["id"],
                event_id=row["event_id"],
                event_type=types.get(row["event_id"], ""),
                status=row["status"],
                attempts=attempts[row["id"]],
                next_attempt_at=row["next_attempt_at"],
                created_at=row["created_at"],
            )
            for row in rows
        ]
        return deliveries, more

    @retrying
    def delivery_counts(self) -> dict[str, int]:
        """How many deliveries are in each status (for tests and benchmarks)."""
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT status, COUNT(*) AS n FROM webhook_deliveries GROUP BY status"
            ).fetchall()
        return {row["status"]: int(row["n"]) for row in rows}
