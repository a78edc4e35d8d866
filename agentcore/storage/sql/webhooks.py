"""Events, webhook subscriptions, the delivery outbox and attempts, in SQL.

A durable outbox: an event and its deliveries commit before anything is sent.
Deliveries are claimed with a lease inside one write transaction (SQLite's is exclusive;
PostgreSQL's claim adds ``FOR UPDATE ... SKIP LOCKED``, so nodes claiming at the same
moment take disjoint rows without waiting for each other); a delivery leased by a
worker that died is claimed again once its lease has run out (at-least-once).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any

from agentcore._ids import new_id, now_iso
from agentcore.events import Event
from agentcore.schema import Delivery, DeliveryAttempt, WebhookSubscription
from agentcore.storage.base import WebhookStore
from agentcore.storage.records import DueDelivery, StoredSubscription
from agentcore.storage.sql.database import Connection, Tables
from agentcore.storage.sql.queries import (
    WORKSPACE,
    find_row,
    insert_row,
    insert_rows,
    marks,
    page,
    read_row,
    update_row,
)

_PUBLIC = ("id", "status", "url", "description", "disabled_reason", "created_at", "updated_at")
_PRIVATE = [field.name for field in fields(StoredSubscription)][1:]  # after ``public``
# what ``update_subscription`` may set: the status and the server's own state
_UPDATABLE = {"status", "disabled_reason", *_PRIVATE[2:]}
# the columns of a delivery, and of an event, that hold its fields as they are
_DELIVERY = ("id", "event_id", "status", "next_attempt_at", "created_at")
_EVENT = ("id", "organization_id", "environment", "type", "timestamp")


# A disabled subscription's pending deliveries end as failed, so no delivery waits
# forever for a subscription nobody may re-enable; ``enable`` applies to the events
# recorded after it.
_FAIL_PENDING_OF_DISABLED = (
    "UPDATE webhook_deliveries SET status = 'failed', next_attempt_at = NULL,"
    " leased_until = NULL, last_error = 'subscription disabled: ' || COALESCE("
    "(SELECT disabled_reason FROM webhook_subscriptions WHERE id = ?), 'disabled'),"
    " updated_at = ? WHERE subscription_id = ? AND status = 'pending' AND EXISTS ("
    "SELECT 1 FROM webhook_subscriptions WHERE id = ? AND status = 'disabled')"
)


def _fail_pending_of_disabled(conn: Connection, subscription_id: str) -> None:
    conn.execute(
        _FAIL_PENDING_OF_DISABLED, [subscription_id, now_iso(), subscription_id, subscription_id]
    )


def _subscription(row: Any) -> StoredSubscription:
    public = WebhookSubscription(
        events=json.loads(row["events"]), **{name: row[name] for name in _PUBLIC}
    )
    return StoredSubscription(public, *(row[name] for name in _PRIVATE))


def _due(row: Any, now: float) -> DueDelivery:
    data = dict(row)  # the columns are named as DueDelivery's fields, but for the secrets
    secrets = [data.pop("secret")]
    previous, expires = data.pop("previous_secret"), data.pop("previous_secret_expires_at")
    if previous and (expires or 0) > now:
        secrets.append(previous)
    data["event_data"] = json.loads(data["event_data"])
    return DueDelivery(secrets=secrets, **data)


class WebhookTables(Tables, WebhookStore):
    """Subscriptions, events, deliveries and attempts, in tables of those names."""

    def _events_recorded(self, conn: Connection) -> None:
        """Hook: the transaction ``conn`` is in recorded deliveries (PostgreSQL wakes
        the other nodes when it commits)."""

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
        now = now_iso()
        values = {
            "id": new_id("whk"),
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
        with self.db.write() as conn:
            return _subscription(insert_row(conn, "webhook_subscriptions", values, "*").fetchone())

    def get_subscription(
        self, organization_id: str | None, environment: str | None, subscription_id: str
    ) -> StoredSubscription | None:
        if organization_id is None:
            sql = "SELECT * FROM webhook_subscriptions WHERE id = ?"
            row = read_row(self.db, sql, [subscription_id])
        else:
            workspace = [organization_id, environment]
            row = find_row(self.db, "webhook_subscriptions", subscription_id, workspace)
        return _subscription(row) if row else None

    def list_subscriptions(
        self, organization_id: str, environment: str, *, limit: int, starting_after: str | None
    ) -> tuple[list[StoredSubscription], bool]:
        workspace = (organization_id, environment)
        rows, more = page(self.db, "webhook_subscriptions", workspace, limit, starting_after)
        return [_subscription(row) for row in rows], more

    def update_subscription(self, subscription_id: str, **changes: Any) -> None:
        with self.db.write() as conn:
            stamp = {"updated_at": now_iso()}
            update_row(conn, "webhook_subscriptions", subscription_id, changes, _UPDATABLE, stamp)
            if changes.get("status") == "disabled":
                _fail_pending_of_disabled(conn, subscription_id)

    def delete_subscription(
        self, organization_id: str, environment: str, subscription_id: str
    ) -> bool:
        with self.db.write() as conn:
            cursor = conn.execute(
                f"DELETE FROM webhook_subscriptions WHERE id = ? AND {WORKSPACE}",
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

    def seal_secrets(self, plaintext_prefix: str, seal: Callable[[str], str]) -> int:
        pattern = plaintext_prefix + "%"  # LIKE's "_" matches any character: checked below
        replaced = 0
        with self.db.write() as conn:
            rows = conn.execute(
                "SELECT id, secret, previous_secret FROM webhook_subscriptions"
                " WHERE secret LIKE ? OR previous_secret LIKE ?",
                [pattern, pattern],
            ).fetchall()
            for row in rows:
                for column in ("secret", "previous_secret"):
                    value = row[column]
                    if value is None or not value.startswith(plaintext_prefix):
                        continue
                    # only if it is still that value: a rotation committed since the read
                    # (another node's, on PostgreSQL) stored sealed ones already
                    replaced += conn.execute(
                        f"UPDATE webhook_subscriptions SET {column} = ? WHERE id = ? AND {column} = ?",
                        [seal(value), row["id"], value],
                    ).rowcount
        return replaced

    # the outbox ------------------------------------------------------------------

    def record_event(
        self, event: Event, *, now: float, only_subscription: str | None = None
    ) -> int:
        # one transaction: after it commits, a crash cannot lose the event or its deliveries
        workspace = [event.organization_id, event.environment]
        with self.db.write() as conn:
            values = {column: getattr(event, column) for column in _EVENT}
            # NaN and infinity are not JSON: no receiver could be sent them
            values["data"] = json.dumps(event.data, separators=(",", ":"), allow_nan=False)
            insert_row(conn, "events", values)
            # only active subscriptions: a disabled one is never claimed, so a delivery
            # queued to it would stay pending for ever
            rows = conn.execute(
                "SELECT id, events FROM webhook_subscriptions"
                f" WHERE {WORKSPACE} AND status = 'active'"
                + ("" if only_subscription is None else " AND id = ?"),
                [*workspace, *([] if only_subscription is None else [only_subscription])],
            ).fetchall()
            if only_subscription is not None:
                targets = [row["id"] for row in rows]
            else:
                targets = [row["id"] for row in rows if event.type in json.loads(row["events"])]
            if targets:
                stamp = now_iso()
                insert_rows(
                    conn,
                    "INSERT INTO webhook_deliveries (id, event_id, subscription_id,"
                    " organization_id, environment, status, next_attempt_at, created_at,"
                    " updated_at) VALUES (?, ?, ?, ?, ?, 'pending', ?, ?, ?)",
                    [
                        [new_id("dlv"), event.id, target, *workspace, now, stamp, stamp]
                        for target in targets
                    ],
                )
                self._events_recorded(conn)
        return len(targets)

    def claim_due_deliveries(
        self,
        *,
        now: float,
        lease_seconds: float,
        limit: int,
        busy_subscriptions: Sequence[str] = (),
    ) -> list[DueDelivery]:
        # Two workers (in two processes, on two nodes) never claim the same delivery:
        # the lease is set in the claiming transaction. ``busy_subscriptions`` are
        # skipped, so one slow receiver cannot take every slot.
        busy = list(busy_subscriptions)
        skipped = marks(len(busy)) or "''"
        with self.db.write() as conn:
            leased = conn.execute(
                "WITH due AS (SELECT d.seq FROM webhook_deliveries d"
                " JOIN webhook_subscriptions s ON s.id = d.subscription_id"
                " WHERE d.status = 'pending' AND d.next_attempt_at <= ?"
                " AND (d.leased_until IS NULL OR d.leased_until < ?)"
                f" AND s.status = 'active' AND d.subscription_id NOT IN ({skipped})"
                f" ORDER BY d.next_attempt_at, d.seq LIMIT ?{self.dialect.lock('d')})"
                " UPDATE webhook_deliveries SET leased_until = ?"
                " WHERE seq IN (SELECT seq FROM due) RETURNING id",
                [now, now, *busy, limit, now + lease_seconds],
            ).fetchall()
            if not leased:
                return []
            rows = conn.execute(
                "SELECT d.id, d.event_id, d.subscription_id, d.attempts, s.url, s.secret,"
                " s.previous_secret, s.previous_secret_expires_at, s.failing_since,"
                " e.type AS event_type, e.timestamp AS event_timestamp, e.data AS event_data"
                " FROM webhook_deliveries d"
                " JOIN webhook_subscriptions s ON s.id = d.subscription_id"
                f" JOIN events e ON e.id = d.event_id WHERE d.id IN ({marks(len(leased))})"
                " ORDER BY d.next_attempt_at, d.seq",
                [row["id"] for row in leased],
            ).fetchall()
        return [_due(row, now) for row in rows]

    def delivery_pending(self, delivery_id: str) -> bool:
        row = read_row(self.db, "SELECT status FROM webhook_deliveries WHERE id = ?", [delivery_id])
        return row is not None and row["status"] == "pending"

    def next_due_at(self) -> float | None:
        row = read_row(
            self.db,
            f"SELECT MIN({self.dialect.greatest}(d.next_attempt_at,"
            " COALESCE(d.leased_until, 0))) AS due"
            " FROM webhook_deliveries d JOIN webhook_subscriptions s"
            " ON s.id = d.subscription_id WHERE d.status = 'pending' AND s.status = 'active'",
        )
        return None if row["due"] is None else float(row["due"])

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
            # A delivery ended meanwhile (its subscription deleted or disabled) stays
            # ended: a retry would never be claimed. The attempt is still logged, and
            # one that succeeded says so, since the receiver did get it.
            ended_stays = "" if outcome == "succeeded" else " AND status = 'pending'"
            conn.execute(
                "UPDATE webhook_deliveries SET attempts = attempts + 1, status = ?,"
                " next_attempt_at = ?, leased_until = NULL, last_status_code = ?,"
                f" last_error = ?, updated_at = ? WHERE id = ?{ended_stays}",
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
        with self.db.snapshot() as conn:
            workspace = (organization_id, environment)
            of_subscription = ("subscription_id = ?", [subscription_id])
            rows, more = page(
                self.db, "webhook_deliveries", workspace, limit, starting_after, *of_subscription
            )
            if not rows:
                return [], more
            ids = [row["id"] for row in rows]
            events = {row["event_id"] for row in rows}
            types = {
                found["id"]: found["type"]
                for found in conn.execute(
                    f"SELECT id, type FROM events WHERE id IN ({marks(len(events))})",
                    list(events),
                ).fetchall()
            }
            attempts: dict[str, list[DeliveryAttempt]] = {i: [] for i in ids}
            for found in conn.execute(
                "SELECT delivery_id, attempted_at, status_code, error, duration_ms"
                f" FROM webhook_attempts WHERE delivery_id IN ({marks(len(ids))}) ORDER BY seq",
                ids,
            ).fetchall():
                attempt = dict(found)
                attempts[attempt.pop("delivery_id")].append(DeliveryAttempt(**attempt))
        deliveries = [
            Delivery(
                event_type=types.get(row["event_id"], ""),
                attempts=attempts[row["id"]],
                **{column: row[column] for column in _DELIVERY},
            )
            for row in rows
        ]
        return deliveries, more
