"""Durable webhook delivery: the outbox sink on the event bus and the worker that sends.

An event and its pending deliveries are committed to the store inside ``publish``
(the bus's sink), before anything is sent. The worker leases due deliveries, sends
each on a thread pool, and records the attempt and the next retry in one transaction.
A crash at any point loses nothing: an unfinished lease expires and the delivery is
sent again with the same ``webhook-id`` (at-least-once; the id is the dedupe key).
"""

from __future__ import annotations

import functools
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import httpx

from agentcore._background import Loop, Pool, Runtime
from agentcore._ids import isoformat, utcnow
from agentcore._logs import get_logger
from agentcore._memory_budget import Sweeper
from agentcore.events import Event
from agentcore.outbound import AddressPolicy, Resolver, SecretBox, default_resolver
from agentcore.storage.base import EventWaiter
from agentcore.storage.records import DueDelivery
from agentcore.webhooks._sender import AttemptResult, make_client, send
from agentcore.webhooks.schedule import next_delay
from agentcore.webhooks.signing import SECRET_PREFIX, build_headers, encode_payload

if TYPE_CHECKING:
    from agentcore.config import Settings
    from agentcore.storage.base import WebhookStore

log = get_logger("agentcore.webhooks")  # masks keys and secrets in every record

PER_SUBSCRIPTION_IN_FLIGHT = 2  # a new, failing or slow receiver holds at most this many workers
HEALTHY_IN_FLIGHT = 4  # a receiver answering 2xx quickly may have this many attempts under way
FAST_ENOUGH_MS = 1000.0
HEALTH_SWEPT_PAST = 10_000  # subscriptions known healthy before the idle ones are forgotten
HEALTH_IDLE_SECONDS = 600.0  # one not attempted for this long counts as new again
LEASE_MARGIN = 10.0
IDLE_POLL = 1.0  # also notices deliveries written by other processes
# Longest wait after consecutive failed passes (the database restarting): short, since
# events acknowledged meanwhile wait for it
BACKOFF_MAX = 5.0


def duration_text(seconds: float) -> str:
    """``seconds`` in words, in the largest unit that divides it: ``5 days``, ``90 seconds``."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds:g} second{'s' if seconds != 1 else ''}"


class WebhookRuntime:
    """The webhook machinery of one core: SSRF policy, outbox sink, delivery worker.

    ``clock`` (Unix seconds) and ``rng`` are injectable so tests drive retries without
    sleeping; ``resolver`` is injectable so tests can point host names anywhere.

    Given the core's ``runtime``, it declares its background work there, which runs
    between the core's ``start()`` and ``stop()``: the supervised loop
    ``agentcore-webhook-worker`` (claim due deliveries, hand them to the sender pool
    ``agentcore-webhook``, sleep until the next is due), on a store that can wake it
    the loop ``agentcore-webhook-listen`` (events recorded by other nodes), and itself
    as a component (its HTTP client; ``stop`` lets attempts under way finish). A
    failing pass (the database restarting) is logged and retried after a backoff of
    at most ``BACKOFF_MAX`` seconds, never ends the worker. Without a runtime there is
    no worker: ``deliver_due()`` sends in the calling thread.

    :param store: subscriptions, deliveries and the event outbox.
    :param settings: the ``webhook_*`` settings (allowed networks, time-out, workers,
        when a failing subscription is disabled).
    :param secrets: seals secrets for the store and opens them to sign (the core's,
        with its key file: ``keyfile.secret_keys``); default ``webhook_secret_key``'s.
    """

    def __init__(
        self,
        store: WebhookStore,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        resolver: Resolver = default_resolver,
        runtime: Runtime | None = None,
        secrets: SecretBox | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.rng = rng or random.Random()
        self.resolver = resolver
        self.policy = AddressPolicy(settings.allowed_networks)
        self.timeout = settings.webhook_timeout
        self.disable_after = settings.webhook_disable_after
        self.secrets = (
            secrets if secrets is not None else SecretBox.from_setting(settings.webhook_secret_key)
        )
        self._pool_size = settings.webhook_workers
        self._client: httpx.Client | None = None
        self._in_flight: dict[str, int] = {}
        # subscription -> when its last attempt, a quick 2xx, was made (clock); a
        # subscription not here is new, failing or slow. Swept so that a node keeps the
        # subscriptions it delivered to lately, not every one it ever served
        self._healthy: dict[str, float] = {}
        self._sweep_healthy = Sweeper(HEALTH_SWEPT_PAST)
        # leased deliveries of a subscription already at its in-flight cap, each with
        # the monotonic time its lease ends; sent as that subscription's slots free up
        self._backlog: dict[str, deque[tuple[DueDelivery, float]]] = {}
        self._lock = threading.Lock()
        self._pool: Pool | None = None
        self._worker: Loop | None = None
        if runtime is not None:
            runtime.own(self)  # first: the client exists before the worker's first pass
            self._pool = runtime.executor("agentcore-webhook", self._pool_size)
            self._worker = runtime.loop(
                "agentcore-webhook-worker", self._work, interval=IDLE_POLL, backoff_max=BACKOFF_MAX
            )
            if isinstance(store, EventWaiter):
                # events recorded by other nodes wake this worker at once
                runtime.loop(
                    "agentcore-webhook-listen",
                    functools.partial(self._listen, store),
                    interval=0.0,
                    backoff_max=BACKOFF_MAX,
                )

    def seal_stored_secrets(self) -> int:
        """Seal the secrets the store holds in plaintext (stored before a key was
        available), in place: receivers keep verifying with the same secrets. How many
        were sealed; none without a key."""
        if not self.secrets.sealing:
            return 0
        return self.store.seal_secrets(SECRET_PREFIX, self.secrets.seal)

    # the outbox sink --------------------------------------------------------------

    def record(self, event: Event) -> None:
        """Bus sink: store the event and its deliveries, then wake the worker."""
        if self.store.record_event(event, now=self.clock()):
            self.wake()

    def wake(self) -> None:
        """Ask the worker to look for due deliveries now."""
        if self._worker is not None:
            self._worker.wake()

    # the worker --------------------------------------------------------------------

    def start(self) -> None:
        """Open the HTTP client the worker's attempts use (the runtime calls this)."""
        with self._lock:
            if self._client is None:
                self._client = make_client(
                    self.policy, timeout=self.timeout, resolver=self.resolver
                )

    def stop(self, timeout: float) -> None:
        """Let the attempts under way finish (up to ``timeout`` s), then close the client.

        The runtime calls this after the worker loop has stopped claiming. Attempts
        not started yet are skipped (their leases lapse and they are sent again) and
        free their subscription's slots, so the next start claims for it; one still
        running after ``timeout`` keeps the client open until it ends.
        """
        finished = self._pool.close(timeout) if self._pool is not None else True
        with self._lock:
            self._backlog.clear()  # their leases lapse and another worker takes them
            client, self._client = self._client, None
        if client is not None and finished:
            client.close()

    def _stopping(self) -> bool:
        return self._worker is not None and self._worker.stopping

    def _listen(self, store: EventWaiter) -> float:
        """A pass of the listener: wait (up to ``IDLE_POLL``) for another node's event."""
        if store.wait_for_events(IDLE_POLL):
            self.wake()
        return 0.0

    def _work(self) -> float:
        """A pass of the worker: send what is due, then sleep until the next is due."""
        self.dispatch_due()
        return self._idle_wait()

    def _idle_wait(self) -> float:
        due = self.store.next_due_at()
        if due is None:
            return IDLE_POLL
        return min(max(due - self.clock(), 0.01), IDLE_POLL)

    def dispatch_due(self) -> int:
        """Lease due deliveries and hand them to the pool; returns how many were leased.

        A subscription never has more than its cap (2, or 4 while it answers 2xx quickly) attempts
        under way; leased deliveries beyond that wait in a local backlog and are sent
        as its attempts finish (never left idle until their lease lapses).
        """
        pool, client = self._pool, self._client
        if pool is None or client is None:
            return 0
        with self._lock:
            busy = [s for s, n in self._in_flight.items() if n >= self._cap(s)]
            waiting = sum(len(q) for q in self._backlog.values())
            free = self._pool_size * 2 - sum(self._in_flight.values()) - waiting
        if free <= 0:
            return 0
        lease = self.timeout + LEASE_MARGIN
        due = self.store.claim_due_deliveries(
            now=self.clock(), lease_seconds=lease, limit=free, busy_subscriptions=busy
        )
        lease_ends = time.monotonic() + lease
        for delivery in due:
            subscription = delivery.subscription_id
            with self._lock:
                if self._in_flight.get(subscription, 0) >= self._cap(subscription):
                    self._backlog.setdefault(subscription, deque()).append((delivery, lease_ends))
                    continue
                self._in_flight[subscription] = self._in_flight.get(subscription, 0) + 1
            self._submit(pool, delivery, client)
        return len(due)

    def _cap(self, subscription: str) -> int:
        """Attempts a subscription may have under way (call with the lock held)."""
        return HEALTHY_IN_FLIGHT if subscription in self._healthy else PER_SUBSCRIPTION_IN_FLIGHT

    def _submit(self, pool: Pool, delivery: DueDelivery, client: httpx.Client) -> None:
        try:
            future = pool.submit(self._attempt_and_release, delivery, client)
        except RuntimeError:  # the pool is shutting down; the lease lapses, nothing lost
            self._release(delivery.subscription_id)
            return
        # stop() cancels attempts still queued: they never run ``_attempt_and_release``,
        # so their slots are freed here (their leases lapse and they are sent again)
        future.add_done_callback(
            functools.partial(self._release_cancelled, delivery.subscription_id)
        )

    def _release_cancelled(self, subscription: str, future: Future[None]) -> None:
        if future.cancelled():
            self._release(subscription, hand_on=False)

    def _attempt_and_release(self, delivery: DueDelivery, client: httpx.Client) -> None:
        """Send one leased delivery with the client it was claimed with (kept open by
        ``stop`` until attempts end), then hand its slot on. Once the core is
        stopping, attempts not begun are skipped: their leases lapse and they are
        sent again (by this node's next start, or another node)."""
        try:
            if not self._stopping():
                self.attempt(delivery, client=client)
        except Exception:
            log.exception("webhook attempt %s failed unexpectedly", delivery.id)
        finally:
            # once stopping, the backlog is left to its leases: handing it on would
            # start new sender threads after the core's stop() had ended them
            subscription = delivery.subscription_id
            following = self._release(subscription, hand_on=not self._stopping())
            if following is not None and not self._may_send(following):
                self.forget(subscription)
                following = self._release(subscription)  # the backlog is gone: frees the slot
            if following is not None and self._pool is not None:
                self._submit(self._pool, following, client)
            self.wake()

    def _may_send(self, delivery: DueDelivery) -> bool:
        """Whether ``delivery`` is still pending, read before a backlogged one is sent:
        it was claimed a while ago, and its subscription may have been deleted or
        disabled since (on another node too), which failed it; a subscription enabled
        again does not make it pending. When the store cannot say, no: the backlog's
        leases lapse and what is still pending is claimed again."""
        try:
            return self.store.delivery_pending(delivery.id)
        except Exception:
            log.exception("webhook delivery %s could not be read", delivery.id)
            return False

    def forget(self, subscription: str) -> None:
        """Drop the local backlog of ``subscription`` (deleted or disabled): its claimed
        deliveries are not sent; attempts already under way still end."""
        with self._lock:
            self._backlog.pop(subscription, None)

    def _release(self, subscription: str, *, hand_on: bool = True) -> DueDelivery | None:
        """Free one slot of ``subscription``, or (``hand_on``) hand it the next
        backlogged delivery."""
        now = time.monotonic()
        with self._lock:
            queue = self._backlog.get(subscription) if hand_on else None
            while queue:
                delivery, lease_ends = queue.popleft()
                if not queue:
                    del self._backlog[subscription]
                if lease_ends - now > 1.0:  # else its lease is (nearly) gone: re-claimed later
                    return delivery  # keeps the slot
            left = self._in_flight.get(subscription, 1) - 1
            if left > 0:
                self._in_flight[subscription] = left
            else:
                self._in_flight.pop(subscription, None)
            return None

    def deliver_due(self) -> int:
        """Send every due delivery now, in this thread (tests drive retries with this)."""
        client = make_client(self.policy, timeout=self.timeout, resolver=self.resolver)
        try:
            due = self.store.claim_due_deliveries(
                now=self.clock(), lease_seconds=self.timeout + LEASE_MARGIN, limit=10_000
            )
            tried: set[str] = set()
            for delivery in due:
                subscription = delivery.subscription_id
                # a subscription's earlier attempt in this pass may have disabled it
                if subscription not in tried or self._may_send(delivery):
                    tried.add(subscription)
                    self.attempt(delivery, client=client)
            return len(due)
        finally:
            client.close()

    def attempt(
        self, delivery: DueDelivery, *, client: httpx.Client | None = None
    ) -> AttemptResult:
        """Send one delivery once and record the outcome and the next retry (with
        ``client``, else the worker's; one of them must be open)."""
        client = client or self._client
        if client is None:
            raise RuntimeError("the webhook worker is not started: pass a client")
        now = self.clock()
        try:
            body = encode_payload(
                delivery.event_type,
                delivery.event_timestamp,
                delivery.event_data,
                event_id=delivery.event_id,
            )
        except ValueError as exc:
            # data stored before publish refused NaN (or by another writer): no retry can
            # send it, so it fails at once; not the receiver's fault, so no failure streak
            result = AttemptResult(None, f"event data is not JSON: {exc}", None, 0.0, "")
            self._record(delivery, result, now, sendable=False)
            return result
        secrets = [self.secrets.open(secret) for secret in delivery.secrets]
        headers = build_headers(secrets, delivery.event_id, int(now), body)
        result = send(client, delivery.url, headers, body, timeout=self.timeout)
        with self._lock:
            self._note_health(delivery.subscription_id, result, now)
        self._record(delivery, result, now)
        return result

    def _note_health(self, subscription: str, result: AttemptResult, now: float) -> None:
        """Remember whether ``subscription``'s attempt at ``now`` was a quick 2xx (call
        with the lock held); past ``HEALTH_SWEPT_PAST`` remembered, forget those not
        attempted for ``HEALTH_IDLE_SECONDS``."""
        if not (result.succeeded and result.duration_ms < FAST_ENOUGH_MS):
            self._healthy.pop(subscription, None)
            return
        known = subscription in self._healthy
        self._healthy[subscription] = now
        if not known:
            idle = now - HEALTH_IDLE_SECONDS
            self._healthy = self._sweep_healthy(self._healthy, lambda at: at > idle)

    def _record(
        self, delivery: DueDelivery, result: AttemptResult, started: float, *, sendable: bool = True
    ) -> None:
        """Store the attempt, the delivery's next step and the subscription's health; a
        delivery that cannot be ``sendable`` fails at once and leaves the health alone."""
        now = self.clock()
        changes: dict[str, Any] = {}
        next_at: float | None = None
        if result.succeeded:
            outcome = "succeeded"
            if delivery.failing_since is not None:
                changes["failing_since"] = None
        elif not sendable:
            outcome = "failed"
        else:
            failing_since = delivery.failing_since or started
            if delivery.failing_since is None:
                changes["failing_since"] = failing_since
            if result.gone:
                changes.update(status="disabled", disabled_reason="endpoint returned 410 Gone")
            elif now - failing_since >= self.disable_after:
                reason = f"failing for {duration_text(self.disable_after)}"
                changes.update(status="disabled", disabled_reason=reason)
            delay = next_delay(delivery.attempts + 1, retry_after=result.retry_after, rng=self.rng)
            if delay is None or result.gone:
                outcome = "failed"
            else:
                outcome = "pending"
                next_at = now + delay
        self.store.record_attempt(
            delivery,
            attempted_at=isoformat(utcnow()),
            status_code=result.status_code,
            error=result.error,
            duration_ms=round(result.duration_ms, 3),
            outcome=outcome,
            next_attempt_at=next_at,
            subscription_changes=changes,
        )
        if changes.get("status") == "disabled":
            self.forget(delivery.subscription_id)  # its claimed deliveries are not sent
