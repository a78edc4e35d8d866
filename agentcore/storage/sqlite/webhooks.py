"""SQLite storage of events, webhook subscriptions, the delivery outbox and attempts."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from agentcore.events import Event
from agentcore.ids import new_id, now_iso
from agentcore.schema import Delivery, DeliveryAttempt, WebhookSubscription
from agentcore.storage.records import DueDelivery, StoredSubscription
from agentcore.storage.sqlite.connection import Database, checked_changes, first_row, page_rows

_WORKSPACE = "organization_id = ? AND environment = ?"
_SUBSCRIPTION_COLUMNS = {
    "status",
    "secret",
    "previous_secret",
    "previous_secret_expires_at",
    "failing_since",
    "disabled_reason",
}


# A disabled subscription's pending deliveries end as failed (one statement per store),
# so no delivery waits forever for a subscription nobody may re-enable; ``enable``
# applies to the events recorded after it.
_FAIL_PENDING_OF_DISABLED = (
    "UPDATE webhook_deliveries SET status = 'failed', next_attempt_at = NULL,"
    " leased_until = NULL, last_error = 'subscription disabled: ' || COALESCE("
    "(SELECT disabled_reason FROM webhook_subscriptions WHERE id = ?), 'disabled'),"
    " updated_at = ? WHERE subscription_id = ? AND status = 'pending' AND EXISTS ("
    "SELECT 1 FROM webhook_subscriptions WHERE id = ? AND status = 'disabled')"
)


def _fail_pending_of_disabled(conn: sqlite3.Connection, subscription_id: str) -> None:
    conn.execute(
        _FAIL_PENDING_OF_DISABLED, [subscription_id, now_iso(), subscription_id, subscription_id]
    )


def _subscription(data: Mapping[str, Any]) -> StoredSubscription:
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
    """Subscriptions and a durable outbox: events and deliveries commit before sending."""

    db: Database

    # subscriptions ---------------------------------------------------------------

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
        subscription_id = new_id("whk")
        with self.db.write() as conn:
            self.db.table(conn, "webhook_subscriptions").insert(
                {
                    "id": subscription_id,
                    "organization_id": organization_id,
                    "environment": environment,
                    "url": url,
                    "events": json.dumps(list(events)),
                    "status": "active",
                    "secret": secret,
                    "description": description,
                    "created_at": now,
                    "updated_at": now,
                }
            )
        found = self.get_subscription(organization_id, environment, subscription_id)
        assert found is not None
        return found

    def get_subscription(
        self, organization_id: str | None, environment: str | None, subscription_id: str
    ) -> StoredSubscription | None:
        """A subscription of this workspace (any workspace if both are ``None``)."""
        with self.db.read() as conn:
            subscriptions = self.db.table(conn, "webhook_subscriptions")
            if organization_id is None:
                row = first_row(subscriptions, "id = ?", [subscription_id])
            else:
                row = first_row(
                    subscriptions,
                    f"id = ? AND {_WORKSPACE}",
                    [subscription_id, organization_id, environment],
                )
        return _subscription(row) if row else None

    def list_subscriptions(
        self, organization_id: str, environment: str, *, limit: int, starting_after: str | None
    ) -> tuple[list[StoredSubscription], bool]:
        """A page of subscriptions, newest first."""
        with self.db.read() as conn:
            rows, more = page_rows(
                self.db.table(conn, "webhook_subscriptions"),
                scope=(organization_id, environment),
                limit=limit,
                starting_after=starting_after,
            )
        return [_subscription(row) for row in rows], more

    def update_subscription(self, subscription_id: str, **changes: Any) -> None:
        """Set status, secrets, failure tracking or the disabled reason; disabling it
        ends its pending deliveries as ``failed`` (in the same transaction).

        Raw SQL: sqlite-utils' ``update`` addresses a row by primary key, and this
        table's is ``seq`` (the keyset of its pages), not the ``id`` callers hold.
        """
        values = checked_changes(
            "webhook_subscriptions",
            changes,
            allowed=_SUBSCRIPTION_COLUMNS,
            stamp_column="updated_at",
            stamp=now_iso(),
        )
        assignments = ", ".join(f"{column} = ?" for column in values)
        with self.db.write() as conn:
            conn.execute(
                f"UPDATE webhook_subscriptions SET {assignments} WHERE id = ?",
                [*values.values(), subscription_id],
            )
            if values.get("status") == "disabled":
                _fail_pending_of_disabled(conn, subscription_id)

    def delete_subscription(
        self, organization_id: str, environment: str, subscription_id: str
    ) -> bool:
        """Delete a subscription; its pending deliveries end as failed (one transaction)."""
        with self.db.write() as conn:
            cursor = conn.execute(
                f"DELETE FROM webhook_subscriptions WHERE id = ? AND {_WORKSPACE}",
                [subscription_id, organization_id, environment],
            )
            if cursor.rowcount == 0:
                return False
            conn.execute(
                "UPDATE webhook_deliveries SET status = 'failed', next_attempt_at = NULL,"
                " last_error = 'subscription deleted', updated_at = ?"
                " WHERE subscription_id = ? AND status = 'pending'",
                [now_iso(), subscription_id],
            )
        return True

    # the outbox ------------------------------------------------------------------

    def record_event(
        self, event: Event, *, now: float, only_subscription: str | None = None
    ) -> int:
        """Store ``event`` and a pending delivery per matching active subscription.

        One transaction: after it commits, a crash cannot lose the event or its
        deliveries. ``only_subscription`` targets one subscription whatever its event
        list (test pings). Returns how many deliveries were created. Raw SQL, like the
        rest of the outbox below: every event runs it, and leases, attempts and
        failure streaks are conditional updates that the table API does not express.
        """
        with self.db.write() as conn:
            conn.execute(
                "INSERT INTO events (id, organization_id, environment, type, timestamp, data)"
                " VALUES (?, ?, ?, ?, ?, ?)",
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
            for subscription_id in targets:
                conn.execute(
                    "INSERT INTO webhook_deliveries (id, event_id, subscription_id,"
                    " organization_id, environment, status, next_attempt_at, created_at,"
                    " updated_at) VALUES (?, ?, ?, ?, ?, 'pending', ?, ?, ?)",
                    [
                        new_id("dlv"),
                        event.id,
                        subscription_id,
                        event.organization_id,
                        event.environment,
                        now,
                        stamp,
                        stamp,
                    ],
                )
        return len(targets)

    def claim_due_deliveries(
        self,
        *,
        now: float,
        lease_seconds: float,
        limit: int,
        busy_subscriptions: Sequence[str] = (),
    ) -> list[DueDelivery]:
        """Lease up to ``limit`` due deliveries of active subscriptions, oldest first.

        Leasing happens inside one write transaction, so two workers (even in two
        processes) never claim the same delivery; a lease that outlives a crashed
        worker expires and the delivery is claimed again (at-least-once).
        ``busy_subscriptions`` are skipped, so one slow receiver cannot take every slot.
        """
        busy = list(busy_subscriptions)
        marks = ", ".join("?" for _ in busy) or "''"
        with self.db.write() as conn:
            rows = conn.execute(
                "SELECT d.id, d.event_id, d.subscription_id, d.attempts, s.url, s.secret,"
                " s.previous_secret, s.previous_secret_expires_at, s.failing_since,"
                " e.type, e.timestamp, e.data"
                " FROM webhook_deliveries d"
                " JOIN webhook_subscriptions s ON s.id = d.subscription_id"
                " JOIN events e ON e.id = d.event_id"
                " WHERE d.status = 'pending' AND d.next_attempt_at <= ?"
                " AND (d.leased_until IS NULL OR d.leased_until < ?)"
                f" AND s.status = 'active' AND d.subscription_id NOT IN ({marks})"
                " ORDER BY d.next_attempt_at, d.seq LIMIT ?",
                [now, now, *busy, limit],
            ).fetchall()
            for row in rows:
                conn.execute(
                    "UPDATE webhook_deliveries SET leased_until = ? WHERE id = ?",
                    [now + lease_seconds, row["id"]],
                )
        return [
            DueDelivery(
                id=row["id"],
                event_id=row["event_id"],
                subscription_id=row["subscription_id"],
                attempts=row["attempts"],
                url=row["url"],
                secrets=[row["secret"]]
                + (
                    [row["previous_secret"]]
                    if row["previous_secret"] and (row["previous_secret_expires_at"] or 0) > now
                    else []
                ),
                failing_since=row["failing_since"],
                event_type=row["type"],
                event_timestamp=row["timestamp"],
                event_data=json.loads(row["data"]),
            )
            for row in rows
        ]

    def next_due_at(self) -> float | None:
        """When the earliest pending delivery of an active subscription falls due."""
        with self.db.read() as conn:
            row = conn.execute(
                "SELECT MIN(MAX(d.next_attempt_at, COALESCE(d.leased_until, 0)))"
                " FROM webhook_deliveries d JOIN webhook_subscriptions s"
                " ON s.id = d.subscription_id WHERE d.status = 'pending' AND s.status = 'active'"
            ).fetchone()
        return None if row[0] is None else float(row[0])

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
                " status_code, error, duration_ms) VALUES (?, ?, ?, ?, ?, ?)",
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
                "UPDATE webhook_deliveries SET attempts = attempts + 1, status = ?,"
                " next_attempt_at = ?, leased_until = NULL, last_status_code = ?,"
                " last_error = ?, updated_at = ? WHERE id = ?",
                [outcome, next_attempt_at, status_code, error, now_iso(), delivery.id],
            )
            changes = dict(subscription_changes)
            # The failure streak is decided here, not from the lease-time snapshot in
            # ``delivery``: deliveries leased together all saw the same old value.
            if outcome == "succeeded":
                changes.pop("failing_since", None)
                conn.execute(
                    "UPDATE webhook_subscriptions SET failing_since = NULL, updated_at = ?"
                    " WHERE id = ? AND failing_since IS NOT NULL",
                    [now_iso(), delivery.subscription_id],
                )
            elif changes.get("failing_since") is not None:
                conn.execute(
                    "UPDATE webhook_subscriptions SET failing_since = COALESCE(failing_since, ?)"
                    " WHERE id = ?",
                    [changes.pop("failing_since"), delivery.subscription_id],
                )
            if changes:
                self.update_subscription(delivery.subscription_id, **changes)
            # disabled meanwhile (by another delivery's 410): a retry would wait forever
            _fail_pending_of_disabled(conn, delivery.subscription_id)

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
                self.db.table(conn, "webhook_deliveries"),
                scope=(organization_id, environment),
                limit=limit,
                starting_after=starting_after,
                where="subscription_id = ?",
                where_args=[subscription_id],
            )
            deliveries = []
            for row in rows:
                event = first_row(
                    self.db.table(conn, "events"), "id = ?", [row["event_id"]], select="type"
                )
                attempts = self.db.table(conn, "webhook_attempts").rows_where(
                    "delivery_id = ?",
                    [row["id"]],
                    select="attempted_at, status_code, error, duration_ms",
                    order_by="seq",
                )
                deliveries.append(
                    Delivery(
                        id=row["id"],
                        event_id=row["event_id"],
                        event_type=event["type"] if event else "",
                        status=row["status"],
                        attempts=[DeliveryAttempt(**attempt) for attempt in attempts],
                        next_attempt_at=row["next_attempt_at"],
                        created_at=row["created_at"],
                    )
                )
        return deliveries, more

    def delivery_counts(self) -> dict[str, int]:
        """How many deliveries are in each status (for tests and benchmarks)."""
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT status, COUNT(*) AS n FROM webhook_deliveries GROUP BY status"
            ).fetchall()
        return {row["status"]: row["n"] for row in rows}
