"""End-to-end webhook delivery: outbox → worker → a real receiver on 127.0.0.1.

Retries are driven with a fake clock and ``core.webhooks.deliver_due()`` (one
synchronous pass) instead of sleeping; the real-time and slow-receiver tests use the
real worker thread.
"""

from __future__ import annotations

import json
import random
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from conftest import Api, Keys
from helpers import delivery_counts, wait_for
from standardwebhooks.webhooks import Webhook, WebhookVerificationError
from starlette.types import ASGIApp
from webhook_receiver import Receiver, Reply

from agentcore import AgentCore
from agentcore._memory_budget import Sweeper
from agentcore.errors import Conflict, ValidationFailed
from agentcore.events import Event
from agentcore.webhooks._delivery import (
    HEALTH_IDLE_SECONDS,
    HEALTHY_IN_FLIGHT,
    PER_SUBSCRIPTION_IN_FLIGHT,
    WebhookRuntime,
    duration_text,
)
from agentcore.webhooks._sender import make_client
from agentcore.webhooks.schedule import JITTER, RETRY_SCHEDULE

DAY = 86_400.0


class FakeClock:
    """Unix seconds that only move when told to (starts at the real time)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fake(core: AgentCore, clock: FakeClock) -> AgentCore:
    """The core with a fake-clock, seeded runtime; no worker: tests call deliver_due()."""
    core.webhooks = WebhookRuntime(core.store, core.settings, clock=clock, rng=random.Random(0))
    return core


def _deliveries(core: AgentCore, sub_id: str, org: str = "acme", env: str = "test"):
    return core.workspace(org, env).webhooks.deliveries(sub_id, limit=100).deliveries


def _status(core: AgentCore, sub_id: str) -> str:
    return core.workspace("acme", "test").webhooks.get(sub_id).status


# real time ---------------------------------------------------------------------------


def test_published_event_is_delivered_signed_in_real_time(
    core: AgentCore, receiver: Receiver
) -> None:
    ws = core.workspace("acme", "test")
    sub = ws.webhooks.subscribe(receiver.url("/hook"), ["agent.action"])
    core.start()
    event = ws.publish("agent.action", {"agent_id": "agt_1", "action": "reply.sent", "n": 1})
    assert receiver.wait_for(1), "not delivered"
    [got] = receiver.requests()

    assert got.headers["webhook-id"] == event.id
    assert got.headers["content-type"].startswith("application/json")
    assert abs(int(got.headers["webhook-timestamp"]) - time.time()) < 30
    payload = json.loads(got.body)
    assert payload == {
        "id": event.id,
        "type": "agent.action",
        "timestamp": event.timestamp,
        "data": event.data,
    }
    assert list(payload) == ["id", "type", "timestamp", "data"]

    assert Webhook(sub.secret).verify(got.body, got.headers) == payload
    with pytest.raises(WebhookVerificationError):
        Webhook(sub.secret).verify(got.body.replace(b'"n":1', b'"n":2'), got.headers)
    shifted = dict(
        got.headers, **{"webhook-timestamp": str(int(got.headers["webhook-timestamp"]) - 1)}
    )
    with pytest.raises(WebhookVerificationError):
        Webhook(sub.secret).verify(got.body, shifted)
    with pytest.raises(WebhookVerificationError):
        other = ws.webhooks.subscribe(receiver.url("/other"), ["agent.error"])
        Webhook(other.secret).verify(got.body, got.headers)

    # the attempt is recorded right after the response
    wait_for(lambda: _deliveries(core, sub.id)[0].status == "succeeded")


@pytest.mark.slow
def test_hanging_receiver_does_not_delay_another_subscription(tmp_path: Path) -> None:
    with (
        Receiver() as slow,
        Receiver() as fast,
        AgentCore.open(
            tmp_path / "c.db", webhook_allowed_networks="127.0.0.0/8", webhook_timeout=120
        ) as core,
    ):
        slow.always("/hook", Reply(hang=300))  # stuck until it is closed
        ws = core.workspace("acme", "test")
        stuck = ws.webhooks.subscribe(slow.url("/hook"), ["agent.action"])
        ws.webhooks.subscribe(fast.url("/hook"), ["agent.action"])
        # a backlog first (as after a restart), then live events
        backlog = [ws.publish("agent.action", {"n": n}).id for n in range(10)]
        core.start()
        assert slow.wait_for(1), "the slow receiver got nothing"
        assert fast.wait_for(10), f"fast receiver got {fast.count()}/10"
        assert fast.distinct_ids() == set(backlog)
        live = [ws.publish("agent.action", {"n": n}).id for n in range(10, 15)]
        assert fast.wait_for(15), f"fast receiver got {fast.count()}/15"
        assert fast.distinct_ids() == set(backlog + live)
        # all of it while the slow one's first attempts still hang (none has ended)
        assert all(not d.attempts for d in _deliveries(core, stuck.id))
        assert slow.count() <= 2  # at most two attempts in flight for the hanging one
        slow.close()  # the hanging attempts fail now; stopping need not wait for them


# retries (fake clock) ------------------------------------------------------------------


@pytest.mark.slow
def test_retries_keep_the_id_and_follow_the_schedule(
    fake: AgentCore, clock: FakeClock, receiver: Receiver
) -> None:
    receiver.always("/hook", Reply(500))
    ws = fake.workspace("acme", "test")
    sub = ws.webhooks.subscribe(receiver.url("/hook"), ["agent.action"])
    event = ws.publish("agent.action", {"n": 1})
    assert fake.webhooks.deliver_due() == 1  # attempt 1 at once
    delays = []
    for number, base in enumerate(RETRY_SCHEDULE[1:], start=2):
        [delivery] = _deliveries(fake, sub.id)
        assert delivery.status == "pending" and len(delivery.attempts) == number - 1
        delay = delivery.next_attempt_at.timestamp() - clock.now
        assert base * (1 - JITTER) - 0.01 <= delay <= base * (1 + JITTER) + 0.01, (number, delay)
        delays.append(delay)
        clock.advance(delay - 0.5)
        assert fake.webhooks.deliver_due() == 0, f"attempt {number} came early"
        clock.advance(0.5 + 0.001)  # (next_attempt_at came back as a datetime: µs)
        assert fake.webhooks.deliver_due() == 1, f"attempt {number} did not come"
    assert any(abs(d - b) > 0.01 for d, b in zip(delays, RETRY_SCHEDULE[1:], strict=True)), (
        "no jitter"
    )

    [delivery] = _deliveries(fake, sub.id)
    assert delivery.status == "failed" and delivery.next_attempt_at is None
    assert [a.status_code for a in delivery.attempts] == [500] * 8
    clock.advance(30 * DAY)
    assert fake.webhooks.deliver_due() == 0
    assert receiver.count() == 8
    assert {r.webhook_id for r in receiver.requests()} == {event.id}
    assert len({r.headers["webhook-timestamp"] for r in receiver.requests()}) == 8
    for request in receiver.requests():  # each attempt is freshly signed
        Webhook(sub.secret).sign(event.id, _when(request), request.body)
    assert _status(fake, sub.id) == "active"  # ~27 h of failure is not yet "days"


def _when(request):
    from datetime import UTC, datetime

    return datetime.fromtimestamp(int(request.headers["webhook-timestamp"]), tz=UTC)


def test_success_after_failures_stops_retrying(
    fake: AgentCore, clock: FakeClock, receiver: Receiver
) -> None:
    receiver.script("/hook", [Reply(500), Reply(502)], then=Reply(200))
    ws = fake.workspace("acme", "test")
    sub = ws.webhooks.subscribe(receiver.url("/hook"), ["agent.action"])
    ws.publish("agent.action", {"n": 1})
    fake.webhooks.deliver_due()
    clock.advance(6.1)
    fake.webhooks.deliver_due()
    clock.advance(361)
    fake.webhooks.deliver_due()
    [delivery] = _deliveries(fake, sub.id)
    assert delivery.status == "succeeded"
    assert [a.status_code for a in delivery.attempts] == [500, 502, 200]
    clock.advance(DAY)
    assert fake.webhooks.deliver_due() == 0
    assert receiver.count() == 3


def test_retry_after_pushes_the_next_attempt(
    fake: AgentCore, clock: FakeClock, receiver: Receiver
) -> None:
    receiver.script("/hook", [Reply(503, {"Retry-After": "120"})], then=Reply(200))
    ws = fake.workspace("acme", "test")
    sub = ws.webhooks.subscribe(receiver.url("/hook"), ["agent.action"])
    ws.publish("agent.action", {"n": 1})
    assert fake.webhooks.deliver_due() == 1
    [delivery] = _deliveries(fake, sub.id)
    assert delivery.next_attempt_at.timestamp() - clock.now >= 120 - 0.001
    clock.advance(119)
    assert fake.webhooks.deliver_due() == 0  # not at ~5 s as the schedule alone would say
    clock.advance(1.01)
    assert fake.webhooks.deliver_due() == 1
    assert [a.status_code for a in _deliveries(fake, sub.id)[0].attempts] == [503, 200]


def test_redirect_is_a_failure_and_not_followed(
    fake: AgentCore, clock: FakeClock, receiver: Receiver
) -> None:
    receiver.script(
        "/hook", [Reply(307, {"Location": receiver.url("/elsewhere")})], then=Reply(200)
    )
    ws = fake.workspace("acme", "test")
    sub = ws.webhooks.subscribe(receiver.url("/hook"), ["agent.action"])
    ws.publish("agent.action", {"n": 1})
    fake.webhooks.deliver_due()
    assert receiver.count("/elsewhere") == 0
    [delivery] = _deliveries(fake, sub.id)
    assert delivery.status == "pending"
    assert [a.status_code for a in delivery.attempts] == [307]
    clock.advance(6.1)
    fake.webhooks.deliver_due()
    assert _deliveries(fake, sub.id)[0].status == "succeeded"
    assert receiver.count("/elsewhere") == 0 and receiver.count("/hook") == 2


def test_410_disables_and_its_pending_deliveries_end_failed(
    fake: AgentCore, clock: FakeClock, receiver: Receiver
) -> None:
    ws = fake.workspace("acme", "test")
    sub = ws.webhooks.subscribe(receiver.url("/hook"), ["agent.action"])
    receiver.script("/hook", [Reply(500), Reply(410)], then=Reply(200))
    first = ws.publish("agent.action", {"n": 1})  # 500: retried later
    second = ws.publish("agent.action", {"n": 2})  # 410: disables
    assert fake.webhooks.deliver_due() == 2
    found = ws.webhooks.get(sub.id)
    assert found.status == "disabled" and "410" in (found.disabled_reason or "")
    # the retry of the first would wait forever for a subscription nobody may re-enable
    assert {d.event_id: d.status for d in _deliveries(fake, sub.id)} == {
        first.id: "failed",
        second.id: "failed",
    }

    ws.publish("agent.action", {"n": 3})  # not for a disabled subscription
    clock.advance(DAY)
    assert fake.webhooks.deliver_due() == 0
    assert receiver.count() == 2

    enabled = ws.webhooks.enable(sub.id)
    assert enabled.status == "active" and enabled.disabled_reason is None
    fourth = ws.publish("agent.action", {"n": 4})
    assert fake.webhooks.deliver_due() == 1  # the new event only: the failed are not resent
    assert [r.webhook_id for r in receiver.requests()[2:]] == [fourth.id]
    statuses = {d.event_id: d.status for d in _deliveries(fake, sub.id)}
    assert statuses[first.id] == "failed" and statuses[fourth.id] == "succeeded"


def test_a_retry_recorded_after_its_subscription_was_disabled_ends_failed(
    fake: AgentCore, clock: FakeClock, receiver: Receiver
) -> None:
    ws = fake.workspace("acme", "test")
    sub = ws.webhooks.subscribe(receiver.url("/hook"), ["agent.action"])
    receiver.always("/hook", Reply(500))
    event = ws.publish("agent.action", {"n": 1})
    [leased] = fake.store.claim_due_deliveries(now=clock(), lease_seconds=60, limit=10)
    # meanwhile another node's attempt got a 410 and disabled the subscription
    fake.store.update_subscription(sub.id, status="disabled", disabled_reason="gone")
    with make_client(fake.webhooks.policy, timeout=5) as client:
        fake.webhooks.attempt(leased, client=client)
    [delivery] = _deliveries(fake, sub.id)
    assert delivery.event_id == event.id and delivery.status == "failed"
    assert [a.status_code for a in delivery.attempts] == [500]
    clock.advance(DAY)
    assert fake.webhooks.deliver_due() == 0


def test_deliveries_of_a_disabled_subscription_are_listed_failed(
    app: ASGIApp, keys: Keys, fake: AgentCore, clock: FakeClock, receiver: Receiver
) -> None:
    """On both stores (a test of the ``app`` runs on SQLite and PostgreSQL), over HTTP
    (the ASGI transport: no lifespan, so no worker races ``deliver_due``)."""
    api = Api(app, None, keys.make().secret)
    made = api.post(
        "/v1/webhooks/subscribe", json={"url": receiver.url("/hook"), "events": ["agent.action"]}
    )
    assert made.status_code == 201, made.text
    sub_id = made.json()["id"]
    receiver.script("/hook", [Reply(503), Reply(410)], then=Reply(200))
    ws = fake.workspace("acme", "test")
    retried = ws.publish("agent.action", {"n": 1})
    assert fake.webhooks.deliver_due() == 1  # 503: a retry in 5 s
    gone = ws.publish("agent.action", {"n": 2})
    assert fake.webhooks.deliver_due() == 1  # 410: disabled
    listed = api.get(f"/v1/webhooks/{sub_id}/deliveries")
    assert listed.status_code == 200, listed.text
    by_event = {d["event_id"]: d for d in listed.json()["deliveries"]}
    assert by_event[retried.id]["status"] == "failed"
    assert by_event[retried.id]["next_attempt_at"] is None
    assert [a["status_code"] for a in by_event[retried.id]["attempts"]] == [503]
    assert by_event[gone.id]["status"] == "failed"
    assert delivery_counts(fake.store) == {"failed": 2}  # nothing left pending
    clock.advance(DAY)
    assert fake.webhooks.deliver_due() == 0 and receiver.count() == 2


@pytest.mark.slow
def test_failing_for_five_days_disables(
    fake: AgentCore, clock: FakeClock, receiver: Receiver
) -> None:
    receiver.always("/hook", Reply(500))
    ws = fake.workspace("acme", "test")
    sub = ws.webhooks.subscribe(receiver.url("/hook"), ["agent.action"])
    began = clock.now
    disabled_at = None
    for _ in range(70):  # an event every 2 h, for up to ~5.8 days
        ws.publish("agent.action", {"at": clock.now})
        fake.webhooks.deliver_due()
        if _status(fake, sub.id) == "disabled":
            disabled_at = clock.now
            break
        clock.advance(2 * 3600)
    assert disabled_at is not None, "still active after ~6 days of failures"
    assert 5 * DAY <= disabled_at - began <= 5 * DAY + 2 * 3600 + 1
    assert "5 days" in (ws.webhooks.get(sub.id).disabled_reason or "")
    # the retries still scheduled when it was disabled ended with it
    statuses = {d.status for d in _deliveries(fake, sub.id)}
    assert statuses == {"failed"}, statuses
    sent = receiver.count()
    ws.publish("agent.action", {"after": True})
    clock.advance(DAY)
    assert fake.webhooks.deliver_due() == 0
    assert receiver.count() == sent


@pytest.mark.slow
def test_success_resets_the_failure_streak(
    fake: AgentCore, clock: FakeClock, receiver: Receiver
) -> None:
    ws = fake.workspace("acme", "test")
    sub = ws.webhooks.subscribe(receiver.url("/hook"), ["agent.action"])
    receiver.always("/hook", Reply(500))
    for _ in range(24):  # 4 days of failures
        ws.publish("agent.action", {})
        fake.webhooks.deliver_due()
        clock.advance(4 * 3600)
    receiver.always("/hook", Reply(200))
    ws.publish("agent.action", {"ok": True})
    fake.webhooks.deliver_due()  # everything due succeeds now
    receiver.always("/hook", Reply(500))
    for _ in range(12):  # 2 more days of failures: 2, not 6, days in a row
        clock.advance(4 * 3600)
        ws.publish("agent.action", {})
        fake.webhooks.deliver_due()
    assert _status(fake, sub.id) == "active"


# secrets ---------------------------------------------------------------------------------


def test_rotation_signs_with_both_secrets_for_24_hours(
    fake: AgentCore, clock: FakeClock, receiver: Receiver
) -> None:
    ws = fake.workspace("acme", "test")
    sub = ws.webhooks.subscribe(receiver.url("/hook"), ["agent.action"])
    rotated = ws.webhooks.rotate_secret(sub.id)
    assert rotated.secret.startswith("whsec_") and rotated.secret != sub.secret
    ws.publish("agent.action", {"n": 1})
    fake.webhooks.deliver_due()
    [during] = receiver.requests()
    assert len(during.headers["webhook-signature"].split()) == 2
    for secret in (sub.secret, rotated.secret):
        assert Webhook(secret).verify(during.body, during.headers)["data"] == {"n": 1}

    clock.advance(23 * 3600)
    ws.publish("agent.action", {"n": 2})
    fake.webhooks.deliver_due()
    late = receiver.requests()[1]
    assert len(late.headers["webhook-signature"].split()) == 2

    clock.advance(3600 + 1)
    event = ws.publish("agent.action", {"n": 3})
    fake.webhooks.deliver_due()
    after = receiver.requests()[2]
    # standardwebhooks' verify() checks the timestamp against the real clock, so
    # compare with its signer at the (fake, a day ahead) timestamp instead
    signatures = after.headers["webhook-signature"].split()
    expected_new = Webhook(rotated.secret).sign(event.id, _when(after), after.body.decode())
    expected_old = Webhook(sub.secret).sign(event.id, _when(after), after.body.decode())
    assert signatures == [expected_new]
    assert expected_old not in signatures


# who gets what ---------------------------------------------------------------------------


def test_only_this_workspace_and_subscribed_kinds_are_delivered(
    fake: AgentCore, receiver: Receiver
) -> None:
    acme = fake.workspace("acme", "test")
    actions = acme.webhooks.subscribe(receiver.url("/actions"), ["agent.action"])
    both = acme.webhooks.subscribe(receiver.url("/both"), ["agent.handoff", "agent.error"])
    mine = [
        acme.publish("agent.action", {"n": 1}),
        acme.publish("agent.handoff", {"n": 2}),
        acme.publish("agent.error", {"n": 3}),
    ]
    fake.workspace("acme", "live").publish("agent.action", {"other": "environment"})
    fake.workspace("globex", "test").publish("agent.action", {"other": "organization"})
    fake.workspace("globex", "test").publish("agent.error", {"other": "organization"})
    assert fake.webhooks.deliver_due() == 3
    assert [r.webhook_id for r in receiver.requests("/actions")] == [mine[0].id]
    assert sorted(r.webhook_id for r in receiver.requests("/both")) == sorted(
        [mine[1].id, mine[2].id]
    )
    for request in receiver.requests():
        assert b"other" not in request.body
    assert len(_deliveries(fake, actions.id)) == 1 and len(_deliveries(fake, both.id)) == 2


def test_deleted_subscription_gets_nothing_more(
    fake: AgentCore, clock: FakeClock, receiver: Receiver
) -> None:
    receiver.always("/hook", Reply(500))
    ws = fake.workspace("acme", "test")
    sub = ws.webhooks.subscribe(receiver.url("/hook"), ["agent.action"])
    ws.publish("agent.action", {"n": 1})
    fake.webhooks.deliver_due()
    ws.webhooks.delete(sub.id)
    ws.publish("agent.action", {"n": 2})
    clock.advance(DAY)
    assert fake.webhooks.deliver_due() == 0
    assert receiver.count() == 1


def test_a_success_in_the_same_pass_as_a_failure_clears_the_streak(
    fake: AgentCore, clock: FakeClock, receiver: Receiver
) -> None:
    # both deliveries are leased before either is sent, so both saw "not failing"
    receiver.script("/hook", [Reply(500)], then=Reply(200))
    ws = fake.workspace("acme", "test")
    sub = ws.webhooks.subscribe(receiver.url("/hook"), ["agent.action"])
    ws.publish("agent.action", {"n": 1})
    ws.publish("agent.action", {"n": 2})
    assert fake.webhooks.deliver_due() == 2
    stored = fake.store.get_subscription(None, None, sub.id)
    assert stored is not None and stored.failing_since is None, "a success must end the streak"


# attempts under way per subscription -------------------------------------------------


def _in_flight_reached(receiver: Receiver, path: str, expected: int) -> int:
    """How many requests to ``path`` a hanging receiver holds once ``expected`` have
    arrived and half a second more has passed (more would arrive in that time if the
    worker allowed them: it claims again at once when woken)."""
    assert receiver.wait_for(expected, path=path)
    time.sleep(0.5)
    return receiver.count(path)


def test_a_new_subscription_has_two_attempts_under_way_a_healthy_one_four(
    core: AgentCore, receiver: Receiver
) -> None:
    ws = core.workspace("acme", "test")
    healthy = ws.webhooks.subscribe(receiver.url("/healthy"), ["agent.action"])
    ws.webhooks.subscribe(receiver.url("/new"), ["agent.error"])
    receiver.always("/new", Reply(hang=60))
    core.start()
    ws.publish("agent.action", {"n": 0})  # a quick 2xx: healthy from now on
    assert receiver.wait_for(1, path="/healthy")
    wait_for(lambda: _deliveries(core, healthy.id)[0].status == "succeeded")
    receiver.always("/healthy", Reply(hang=60))
    for n in range(1, 9):
        ws.publish("agent.action", {"n": n})
        ws.publish("agent.error", {"n": n})
    assert _in_flight_reached(receiver, "/new", PER_SUBSCRIPTION_IN_FLIGHT) == 2
    assert _in_flight_reached(receiver, "/healthy", 1 + HEALTHY_IN_FLIGHT) == 1 + 4
    receiver.close()  # the hanging attempts fail now; stopping need not wait for them


def test_health_is_forgotten_on_a_failure_and_after_idling(
    fake: AgentCore, clock: FakeClock, receiver: Receiver
) -> None:
    runtime = fake.webhooks
    runtime._sweep_healthy = Sweeper(2)  # sweep once two subscriptions are healthy
    ws = fake.workspace("acme", "test")
    first = ws.webhooks.subscribe(receiver.url("/first"), ["agent.action"])
    second = ws.webhooks.subscribe(receiver.url("/second"), ["agent.error"])
    ws.publish("agent.action", {"n": 1})
    assert runtime.deliver_due() == 1
    assert runtime._cap(first.id) == HEALTHY_IN_FLIGHT
    assert runtime._cap(second.id) == PER_SUBSCRIPTION_IN_FLIGHT
    clock.advance(HEALTH_IDLE_SECONDS)  # the first is now idle for exactly that long
    ws.publish("agent.error", {"n": 1})
    assert runtime.deliver_due() == 1
    # the second made two healthy: the sweep forgot the idle first, kept the second
    assert runtime._cap(first.id) == PER_SUBSCRIPTION_IN_FLIGHT
    assert runtime._cap(second.id) == HEALTHY_IN_FLIGHT
    receiver.always("/second", Reply(500))
    ws.publish("agent.error", {"n": 2})
    assert runtime.deliver_due() == 1
    assert runtime._cap(second.id) == PER_SUBSCRIPTION_IN_FLIGHT  # a failure: new again
    ws.publish("agent.action", {"n": 2})
    assert runtime.deliver_due() == 1
    assert runtime._cap(first.id) == HEALTHY_IN_FLIGHT  # a quick 2xx: healthy again
    assert receiver.count() == 4


# deleted, disabled or unsendable: nothing more is sent, nothing waits for ever ------------


@pytest.mark.both_stores
@pytest.mark.parametrize("how", ["deleted", "deleted elsewhere", "410", "disabled, enabled again"])
def test_the_claimed_backlog_of_a_deleted_or_disabled_subscription_is_not_sent(
    core: AgentCore, receiver: Receiver, how: str
) -> None:
    """8 deliveries claimed at once: 2 under way, 6 in the worker's local backlog. Once
    the subscription is deleted (here, or by another node: straight in the store) or
    disabled by a 410, only the 2 under way arrive. A subscription disabled elsewhere
    (another node's 410) and enabled again before the backlog is handed on gets none of
    the deliveries the disabling failed either: they are not resent."""
    answer = threading.Event()  # the 2 under way are answered once the test has acted
    receiver.always("/hook", Reply(410 if how == "410" else 200, until=answer))
    ws = core.workspace("acme", "test")
    sub = ws.webhooks.subscribe(receiver.url("/hook"), ["agent.action"])
    for n in range(8):
        ws.publish("agent.action", {"n": n})
    core.start()
    assert receiver.wait_for(PER_SUBSCRIPTION_IN_FLIGHT)
    if how == "deleted":
        ws.webhooks.delete(sub.id)
    elif how == "deleted elsewhere":  # bypasses this runtime: its check before sending
        assert core.store.delete_subscription(ws.organization_id, "test", sub.id)
    elif how == "disabled, enabled again":  # another node disabled it: this one only reads
        core.store.update_subscription(sub.id, status="disabled", disabled_reason="410")
        ws.webhooks.enable(sub.id)
    answer.set()
    # the 2 under way end, and the backlog is settled without being sent (one sent would
    # have arrived before its delivery was settled)
    wait_for(lambda: core.store.backlog(time.time()).deliveries_pending == 0)
    assert receiver.count() == PER_SUBSCRIPTION_IN_FLIGHT


@pytest.mark.both_stores
@pytest.mark.parametrize(("reply", "ends"), [(500, "failed"), (200, "succeeded")])
def test_an_attempt_ending_after_its_subscription_was_deleted_does_not_reopen_it(
    fake: AgentCore, clock: FakeClock, receiver: Receiver, reply: int, ends: str
) -> None:
    """The delete ends the delivery as failed while its attempt is under way; the
    attempt's 500 must not set it pending again (nothing would ever claim it), while a
    2xx says what happened: the receiver got it."""
    receiver.always("/hook", Reply(reply))
    ws = fake.workspace("acme", "test")
    sub = ws.webhooks.subscribe(receiver.url("/hook"), ["agent.action"])
    ws.publish("agent.action", {"n": 1})
    [leased] = fake.store.claim_due_deliveries(now=clock(), lease_seconds=60, limit=10)
    ws.webhooks.delete(sub.id)
    with make_client(fake.webhooks.policy, timeout=5) as client:
        fake.webhooks.attempt(leased, client=client)
    backlog = fake.store.backlog(clock())
    assert backlog.deliveries_pending == 0
    assert (backlog.deliveries_failed, receiver.count()) == (1 if ends == "failed" else 0, 1)


@pytest.mark.both_stores
def test_event_data_that_is_not_json_is_refused_at_publish(
    core: AgentCore, receiver: Receiver
) -> None:
    ws = core.workspace("acme", "test")
    sub = ws.webhooks.subscribe(receiver.url("/hook"), ["agent.action"])
    unsendable = ({"score": float("nan")}, {"score": float("inf")}, {"at": object()})
    for data in (*unsendable, {"text": "lone \ud800 surrogate"}):
        with pytest.raises(ValidationFailed) as refused:
            ws.publish("agent.action", data)
        assert (refused.value.status, refused.value.code) == (422, "invalid_event_data")
        # a lone surrogate is named where it is, as in a request body
        assert refused.value.param == ("data.text" if "text" in data else "data")
    assert _deliveries(core, sub.id) == []
    ws.publish("agent.action", {"score": 1.5})  # JSON: accepted
    ws.publish("agent.action", {1: "int key", "b": "str key"})  # stored with string keys
    assert len(_deliveries(core, sub.id)) == 2


def test_a_stored_event_that_cannot_be_encoded_fails_at_once(
    fake: AgentCore, clock: FakeClock, receiver: Receiver, db_path: Path
) -> None:
    """An event stored with NaN (before publish refused it) is not retried for ever:
    its delivery fails at the first attempt, and the receiver is not blamed for it."""
    ws = fake.workspace("acme", "test")
    sub = ws.webhooks.subscribe(receiver.url("/hook"), ["agent.action"])
    event = ws.publish("agent.action", {"score": 1.0})
    with sqlite3.connect(db_path) as conn:  # as an older version stored it
        conn.execute("UPDATE events SET data = ? WHERE id = ?", ['{"score":NaN}', event.id])
    assert fake.webhooks.deliver_due() == 1
    [delivery] = _deliveries(fake, sub.id)
    assert delivery.status == "failed" and receiver.count() == 0
    [attempt] = delivery.attempts
    assert attempt.status_code is None and "not JSON" in (attempt.error or "")
    stored = fake.store.get_subscription(None, None, sub.id)
    assert stored is not None and stored.public.status == "active"
    assert stored.failing_since is None
    clock.advance(DAY)
    assert fake.webhooks.deliver_due() == 0


@pytest.mark.both_stores
def test_a_test_ping_to_a_disabled_subscription_is_refused(
    fake: AgentCore, clock: FakeClock, receiver: Receiver
) -> None:
    receiver.always("/hook", Reply(410))
    ws = fake.workspace("acme", "test")
    sub = ws.webhooks.subscribe(receiver.url("/hook"), ["agent.action"])
    ws.webhooks.send_test(sub.id)
    assert fake.webhooks.deliver_due() == 1
    assert _status(fake, sub.id) == "disabled"
    with pytest.raises(Conflict) as refused:
        ws.webhooks.send_test(sub.id)
    assert (refused.value.status, refused.value.code) == (409, "subscription_disabled")
    # the store queues nothing for it either (a disable racing the check above)
    ping = Event("webhook.ping", {}, "acme", "test")
    assert fake.store.record_event(ping, now=clock(), only_subscription=sub.id) == 0
    assert fake.store.backlog(clock()).deliveries_pending == 0
    receiver.always("/hook", Reply(200))
    ws.webhooks.enable(sub.id)
    sent = ws.webhooks.send_test(sub.id)
    assert fake.webhooks.deliver_due() == 1
    assert [r.webhook_id for r in receiver.requests()][-1] == sent.event_id


@pytest.mark.both_stores
def test_the_disabled_reason_names_the_configured_span(
    store_url: str, clock: FakeClock, receiver: Receiver
) -> None:
    core = AgentCore.open(
        store_url, webhook_allowed_networks="127.0.0.0/8", webhook_disable_after=90 * 60
    )
    try:
        core.webhooks = WebhookRuntime(core.store, core.settings, clock=clock)
        receiver.always("/hook", Reply(500))
        ws = core.workspace("acme", "test")
        sub = ws.webhooks.subscribe(receiver.url("/hook"), ["agent.action"])
        for _ in range(4):
            ws.publish("agent.action", {})
            core.webhooks.deliver_due()
            clock.advance(3600)
        found = ws.webhooks.get(sub.id)
        assert found.status == "disabled"
        assert found.disabled_reason == "failing for 90 minutes"
    finally:
        core.close()


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (5 * DAY, "5 days"),
        (DAY, "1 day"),
        (36 * 3600, "36 hours"),
        (60, "1 minute"),
        (90, "90 seconds"),
        (1, "1 second"),
        (2.5, "2.5 seconds"),
    ],
)
def test_duration_text(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text


@pytest.mark.both_stores
def test_a_second_rotation_keeps_only_the_latest_previous_secret(
    fake: AgentCore, clock: FakeClock, receiver: Receiver
) -> None:
    """As documented: the secret a rotation replaces signs for 24 hours, until the next
    rotation, which replaces it by the secret it replaces (two signatures at most)."""
    ws = fake.workspace("acme", "test")
    sub = ws.webhooks.subscribe(receiver.url("/hook"), ["agent.action"])
    first = ws.webhooks.rotate_secret(sub.id)
    second = ws.webhooks.rotate_secret(sub.id)
    event = ws.publish("agent.action", {"n": 1})
    fake.webhooks.deliver_due()
    [sent] = receiver.requests()
    signatures = sent.headers["webhook-signature"].split()
    assert len(signatures) == 2
    for secret in (second.secret, first.secret):
        assert Webhook(secret).verify(sent.body, sent.headers)["data"] == {"n": 1}
    original = Webhook(sub.secret).sign(event.id, _when(sent), sent.body.decode())
    assert original not in signatures
