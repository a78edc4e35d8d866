"""The delivery worker is supervised: a store outage is logged, backed off and survived.

The store is a real SQLite store whose chosen methods fail or wait on demand
(``faulty_store.py``), opened through the public store hook.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from faulty_store import FaultyStore, FaultyStorePlugin
from webhook_receiver import Receiver, Reply

from agentcore import AgentCore
from agentcore.schema import LoopState
from agentcore.webhooks import _delivery as delivery

WORKER = "agentcore-webhook-worker"


def wait_until(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    """Poll ``condition`` until it holds (``timeout`` only guards a hang)."""
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.02)


@pytest.fixture
def faulty(tmp_path: Path) -> Iterator[tuple[AgentCore, FaultyStore]]:
    plugin = FaultyStorePlugin()
    core = AgentCore.open(
        f"faulty:{tmp_path / 'a.db'}",
        plugins=[plugin],
        webhook_allowed_networks="127.0.0.0/8",
        webhook_timeout=2.0,
    )
    try:
        yield core, plugin.stores[-1]
    finally:
        core.close()


def loop_state(core: AgentCore, name: str) -> LoopState:
    return next(loop for loop in core.health().loops if loop.name == name)


def test_the_worker_survives_a_store_outage_and_delivers_afterwards(
    faulty: tuple[AgentCore, FaultyStore], receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    core, store = faulty
    ws = core.workspace("acme", "test")
    ws.webhooks.subscribe(receiver.url("/hook"), ["agent.action"])
    core.start()
    # the database "restarts": the worker's claims and its idle wait (next_due_at) fail
    store.fail("next_due_at", "claim_due_deliveries")
    acknowledged = {ws.publish("agent.action", {"n": n}).id for n in range(5)}  # in the outbox
    wait_until(lambda: sum(store.failures.values()) >= 4)  # several passes, backing off
    worker = loop_state(core, WORKER)
    assert worker.running and worker.failures >= 2
    assert worker.last_error == "ServiceUnavailable" and worker.last_error_at is not None
    health = core.health()
    assert health.status == "ok" and health.store == "ok"  # the node serves; the loop retries
    assert receiver.count() == 0

    store.recover()
    assert receiver.wait_for_ids(5), receiver.count()
    assert receiver.distinct_ids() == acknowledged
    wait_until(lambda: loop_state(core, WORKER).failures == 0)
    assert "background loop agentcore-webhook-worker failed" in caplog.text
    assert "Exception in thread" not in caplog.text


def test_health_is_unhealthy_while_the_store_does_not_answer(
    faulty: tuple[AgentCore, FaultyStore],
) -> None:
    core, store = faulty
    not_started = core.health()
    assert not_started.status == "unhealthy" and not not_started.started
    assert "not started" in not_started.problems[0]
    core.start()
    assert core.health().status == "ok"
    store.fail("ping")
    down = core.health()
    assert down.status == "unhealthy" and down.store == "unavailable"
    assert down.problems == ["The store does not answer (ServiceUnavailable)."]
    store.recover()
    assert core.health().status == "ok"


def test_stopping_while_the_worker_claims_sends_nothing_with_a_closed_client(
    faulty: tuple[AgentCore, FaultyStore], receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """SIGTERM while a pass is under way: the pass finishes with the client it began with,
    and attempts it queued after the stop began are left to their leases (no crash)."""
    core, store = faulty
    receiver.always("/hook", Reply(delay=0.3))
    ws = core.workspace("acme", "test")
    sub = ws.webhooks.subscribe(receiver.url("/hook"), ["agent.action"])
    core.start()
    gate = store.gate("claim_due_deliveries")  # the worker's next claim waits
    events = [ws.publish("agent.action", {"n": n}).id for n in range(6)]
    assert gate.entered.wait(60)
    stopping = threading.Thread(target=core.stop, kwargs={"timeout": 10})
    stopping.start()
    time.sleep(0.2)  # stop() is under way while the claim is
    gate.open()  # the claim leases the six deliveries and hands them to the sender pool
    stopping.join(15)
    assert not stopping.is_alive()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]
    assert "NoneType" not in caplog.text
    # nothing lost: every delivery is either sent or still pending (leased), none failed
    deliveries = ws.webhooks.deliveries(sub.id, limit=100).deliveries
    assert {d.event_id for d in deliveries} == set(events)
    assert {d.status for d in deliveries} <= {"pending", "succeeded"}
    assert not any(t.name.startswith("agentcore") for t in threading.enumerate())


def test_stopping_with_attempts_under_way_and_a_backlog_leaves_no_sender_thread(
    faulty: tuple[AgentCore, FaultyStore], receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """The attempts under way finish (and are recorded); the deliveries waiting behind
    them are left to their leases instead of starting new sender threads after stop."""
    core, _ = faulty
    receiver.always("/hook", Reply(delay=1.5))  # under way while the test calls stop()
    ws = core.workspace("acme", "test")
    sub = ws.webhooks.subscribe(receiver.url("/hook"), ["agent.action"])
    for n in range(8):  # one subscription: 2 attempts at a time, the rest in the backlog
        ws.publish("agent.action", {"n": n})
    core.start()
    assert receiver.wait_for(2)
    core.stop(timeout=10)
    assert not any(t.name.startswith("agentcore") for t in threading.enumerate())
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    statuses = [d.status for d in ws.webhooks.deliveries(sub.id, limit=100).deliveries]
    assert statuses.count("succeeded") >= 2 and set(statuses) <= {"pending", "succeeded"}
    assert receiver.count() < 8  # the backlog was not sent after the stop


def test_attempts_cancelled_by_stop_free_their_slots_for_the_next_start(
    tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stop() while one subscription's attempts run and another's wait in the sender
    pool: the waiting ones are cancelled, and after a restart that subscription is
    sent to again (its cancelled deliveries once their leases lapse, and new ones)."""
    monkeypatch.setattr(delivery, "LEASE_MARGIN", 0.5)  # leases of 5.5 s, not 15 s
    answer = threading.Event()
    receiver.always("/b", Reply(until=answer))  # B's two attempts hold both sender threads
    core = AgentCore.open(
        tmp_path / "a.db",
        entry_points=False,
        webhook_allowed_networks="127.0.0.0/8",
        webhook_workers=2,
        webhook_timeout=5.0,
    )
    try:
        wb, wa = core.workspace("acme", "test"), core.workspace("other", "test")
        wb.webhooks.subscribe(receiver.url("/b"), ["agent.action"])
        wa.webhooks.subscribe(receiver.url("/a"), ["agent.action"])
        core.start()
        events = {wb.publish("agent.action", {"n": n}).id for n in range(2)}
        events |= {wa.publish("agent.action", {"n": n}).id for n in range(2)}
        assert receiver.wait_for(2, path="/b")
        # B's attempts end once stop() has stopped the worker's claims; A's, queued
        # behind them, are cancelled
        claiming = lambda: any(loop.name == WORKER and loop.running for loop in core.health().loops)  # noqa: E731
        threading.Thread(
            target=lambda: (wait_until(lambda: not claiming()), answer.set()), daemon=True
        ).start()
        core.stop(timeout=60)
        assert receiver.count("/a") == 0
        core.start()
        events.add(wa.publish("agent.action", {"n": 2}).id)
        assert receiver.wait_for_ids(3, path="/a"), receiver.distinct_ids("/a")
        assert receiver.distinct_ids() == events
    finally:
        answer.set()
        core.close()


@pytest.mark.slow
def test_a_slow_attempt_keeps_its_slot_across_two_restarts(
    tmp_path: Path, receiver: Receiver
) -> None:
    """An attempt that outlives stop()'s grace period still holds its subscription's
    slot after a start and a second, quick stop, so the per-subscription cap holds."""
    answer = threading.Event()
    receiver.always("/hook", Reply(until=answer))  # under way until the test ends
    core = AgentCore.open(
        tmp_path / "a.db",
        entry_points=False,
        webhook_allowed_networks="127.0.0.0/8",
        webhook_timeout=120.0,
    )
    try:
        ws = core.workspace("acme", "test")
        ws.webhooks.subscribe(receiver.url("/hook"), ["agent.action"])
        core.start()
        ws.publish("agent.action", {"n": 0})
        assert receiver.wait_for(1)
        core.stop(timeout=0.3)  # the attempt outlives the grace period
        core.start()
        core.stop(timeout=1.0)  # the new pool holds nothing: it closes at once
        core.start()
        for n in range(1, 4):
            ws.publish("agent.action", {"n": n})
        # the first, still under way, holds one of the subscription's slots: one more
        # is sent, and a third would arrive meanwhile if the cap let it
        assert receiver.wait_for(delivery.PER_SUBSCRIPTION_IN_FLIGHT)
        time.sleep(1.0)
        assert receiver.count("/hook") == delivery.PER_SUBSCRIPTION_IN_FLIGHT
    finally:
        answer.set()
        core.close()
