"""m013: deliveries left pending by subscriptions disabled before the stores failed them
at once end ``failed`` when the database is migrated."""

from __future__ import annotations

import sqlite3

import pytest

from agentcore import AgentCore

pytestmark = pytest.mark.both_stores


def _as_old_code_left_it(store_url: str, store_kind: str, subscription_id: str) -> None:
    """Disable the subscription without touching its deliveries, and forget m013 ran."""
    disable = (
        "UPDATE webhook_subscriptions SET status = 'disabled', disabled_reason = %s WHERE id = %s"
    )
    forget = "DELETE FROM {ledger} WHERE name = %s"
    reason = "endpoint returned 410 Gone"
    if store_kind == "postgres":
        import psycopg

        with psycopg.connect(store_url, autocommit=True) as conn:
            conn.execute(disable, [reason, subscription_id])
            # (its ledger counts versions: _migrate_again runs the step by hand)
    else:
        conn = sqlite3.connect(store_url)
        with conn:
            conn.execute(disable.replace("%s", "?"), [reason, subscription_id])
            conn.execute(
                forget.format(ledger="_sqlite_migrations").replace("%s", "?"),
                ["m013_fail_pending_of_disabled"],
            )
        conn.close()


def _migrate_again(core: AgentCore, store_url: str, store_kind: str) -> None:
    """Run m013 again: SQLite's ledger (by name) runs the step it forgot; PostgreSQL's
    counts versions, so a forgotten step before later ones is run by hand."""
    if store_kind != "postgres":
        core.store.migrate()
        return
    import psycopg

    from agentcore.storage.sql.dialect import POSTGRES
    from agentcore.storage.sql.migrations import MIGRATIONS, statements

    (step,) = [m for m in MIGRATIONS if m.name == "m013_fail_pending_of_disabled"]
    with psycopg.connect(store_url) as conn:
        for statement in statements(step.script(POSTGRES)):
            conn.execute(statement.encode())


def test_pending_deliveries_of_a_disabled_subscription_end_failed(
    store_url: str, store_kind: str
) -> None:
    core = AgentCore.open(store_url, webhook_allowed_networks="127.0.0.0/8", start_workers=False)
    try:
        ws = core.workspace("acme", "test")
        gone = ws.webhooks.subscribe("http://127.0.0.1:9/gone", ["agent.action"])
        kept = ws.webhooks.subscribe("http://127.0.0.1:9/kept", ["agent.action"])
        ws.publish("agent.action", {"action": "reply_sent"})
        _as_old_code_left_it(store_url, store_kind, gone.id)
        assert [d.status for d in ws.webhooks.deliveries(gone.id).deliveries] == ["pending"]
        _migrate_again(core, store_url, store_kind)
        failed = ws.webhooks.deliveries(gone.id).deliveries
        assert [d.status for d in failed] == ["failed"]
        assert failed[0].next_attempt_at is None  # never retried
        # an active subscription's pending delivery is left alone
        assert [d.status for d in ws.webhooks.deliveries(kept.id).deliveries] == ["pending"]
    finally:
        core.close()
