"""Idempotency keys with Stripe's semantics: a write runs once per key, retries replay it.

The rules live here, framework-free: a key is scoped to a workspace, fingerprinted
with its request, remembered for ``Settings.idempotency_ttl`` seconds; the same key
with the same request replays the first result, with another request is a 409, and
a duplicate that arrives while the first still runs waits for it. What is kept is a
replayable result (status and JSON body), never HTTP bytes: the adapter that called
``claim`` turns a result into its own response.

A claim is a lease its process renews: every claim this process holds is renewed
(``renew``, run by the core's runtime every third of the lease) for as long as its work
runs, including work still settling after a 504, until it is finished, failed or
released. A claim whose lease lapsed lost its process (killed, out of memory) or its
store before it could keep a result or release the key, so a retry claims the key and
runs (as at Stripe). Expired keys are swept (``sweep``, run by the same loop), so no
kept result outlives ``ttl`` by more than a sweep interval.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from agentcore.errors import (
    AgentCoreError,
    Cancelled,
    Conflict,
    DeadlineExceeded,
    ServiceUnavailable,
    ShuttingDown,
    error_of,
)
from agentcore.storage.records import StoredResult

if TYPE_CHECKING:
    from agentcore.storage.base import IdempotencyStore

KEY_PARAM = "Idempotency-Key"
#: Where a kept failure's fields hold the seconds a 503 said to wait: not a field of
#: the error (``as_dict``), so ``kept_error`` takes it out again.
RETRY_AFTER = "_retry_after"
DEFAULT_LEASE = 30.0  # seconds (``Settings.idempotency_lease``)
DEFAULT_SWEEP_INTERVAL = 60.0  # seconds between sweeps of expired keys


@dataclass(frozen=True)
class Claim:
    """What to do with a request that carries an idempotency key.

    ``run``: this request now holds the key; run it, then ``succeed``, ``fail`` or
    ``release``. ``replay``: return ``result``, the first request's outcome.
    ``wait``: a duplicate is running; claim again shortly (``IdempotencyKeys.poll``).
    ``claimed_at``: with ``run``, what names this claim to ``succeed``, ``fail`` and
    ``release`` (a holder whose lease ran out and was taken over writes nothing).
    """

    action: Literal["run", "replay", "wait"]
    result: StoredResult | None = None
    claimed_at: float | None = None


class IdempotencyKeys:
    """The idempotency keys of every workspace; reached as ``core.idempotency``.

    :param store: where claims and results are kept (shared by every process).
    :param ttl: seconds a key is remembered.
    :param lease: seconds a claim lasts unless this process renews it (``renew``);
        one not renewed for that long is taken to be dead (its key may be claimed
        again). The clocks of the processes sharing the store must agree to within
        a third of it.
    :param sweep_interval: seconds between sweeps of expired keys (``sweep_step``).
    :param clock: Unix seconds (injectable for tests).
    """

    poll = 0.02  # seconds between claims while a duplicate waits
    sweep_batch = 1000  # expired keys deleted per sweep write (a short write each)

    def __init__(
        self,
        store: IdempotencyStore,
        *,
        ttl: float,
        lease: float = DEFAULT_LEASE,
        sweep_interval: float = DEFAULT_SWEEP_INTERVAL,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._ttl = ttl
        self._lease = lease
        self._sweep_interval = sweep_interval
        self._clock = clock
        # the claims this process holds, (organization, environment, key) -> the
        # ``now`` each was made with: what ``renew`` renews
        self._held: dict[tuple[str, str, str], float] = {}
        self._held_lock = threading.Lock()
        self._next_sweep = 0.0  # time.monotonic() of the next sweep

    @property
    def renew_interval(self) -> float:
        """Seconds between passes of ``sweep_step``: a third of the lease (so a pass
        that comes late, or one whose write failed, does not lose a live claim), at
        most the sweep interval."""
        return min(self._lease / 3, self._sweep_interval)

    def held(self) -> list[tuple[str, str, str, float]]:
        """The claims this process holds (organization, environment, key, claimed at)."""
        with self._held_lock:
            return [(*scope, claimed_at) for scope, claimed_at in self._held.items()]

    def claim(
        self,
        organization_id: str,
        environment: str,
        key: str,
        fingerprint: str,
        *,
        wait_until: float,
    ) -> Claim:
        """Claim ``key`` for the request ``fingerprint`` names.

        :param wait_until: ``time.monotonic()`` after which a duplicate stops waiting
            for the first request and gets a 409.
        :raises Conflict: the key was used with another request, or the first request
            with it is still running at ``wait_until``.
        """
        now = self._clock()
        state, stored = self._store.claim_idempotency_key(
            organization_id,
            environment,
            key,
            fingerprint,
            now=now,
            ttl=self._ttl,
            lease=self._lease,
        )
        if state == "replay" and stored is not None:
            return Claim("replay", stored)
        if state == "mismatch":
            raise Conflict(
                "This Idempotency-Key was already used with a different request.",
                code="idempotency_key_reused",
                param=KEY_PARAM,
            )
        if state == "new":
            with self._held_lock:
                self._held[(organization_id, environment, key)] = now
            return Claim("run", claimed_at=now)
        if time.monotonic() > wait_until:
            raise Conflict(
                "A request with this Idempotency-Key is still being processed.",
                code="idempotency_request_in_progress",
                param=KEY_PARAM,
            )
        return Claim("wait")

    def succeed(
        self,
        organization_id: str,
        environment: str,
        key: str,
        status: int,
        body: str,
        *,
        conversation_id: str | None = None,
        claimed_at: float | None = None,
    ) -> None:
        """Keep the result of the request holding ``key``: its status and JSON body.

        :param conversation_id: the conversation whose messages ``body`` holds
            (deleting it deletes the kept result).
        :param claimed_at: the claim's ``Claim.claimed_at``: nothing is kept if that
            claim no longer holds the key (``None``: whichever claim does).
        """
        try:
            self._store.finish_idempotency_key(
                organization_id,
                environment,
                key,
                StoredResult(status, body, conversation_id),
                claimed_at=claimed_at,
            )
        finally:
            self._let_go(organization_id, environment, key, claimed_at)

    def fail(
        self,
        organization_id: str,
        environment: str,
        key: str,
        error: AgentCoreError,
        *,
        claimed_at: float | None = None,
    ) -> None:
        """Keep ``error`` as the result of the request holding ``key`` (retries get it too).

        Except an error that says the work was stopped before it committed anything
        (``Cancelled``, ``DeadlineExceeded`` raised by a ``Cancellation``) or was
        refused before it started (``ShuttingDown``, a 503 ``server_shutting_down``): then the key is
        released, so a retry runs afresh rather than replaying an error that hides
        nothing. Another 503 stays kept: a database lost during a commit may have
        committed it. Work whose outcome is still unknown must not be failed at all: keep
        the key claimed until it settles, then ``succeed`` or ``fail`` with what it
        ended as (the HTTP adapter does so for a request past its deadline).
        """
        if isinstance(error, Cancelled | DeadlineExceeded | ShuttingDown):
            self.release(organization_id, environment, key, claimed_at=claimed_at)
            return
        try:
            self._store.finish_idempotency_key(
                organization_id, environment, key, error_result(error), claimed_at=claimed_at
            )
        finally:
            self._let_go(organization_id, environment, key, claimed_at)

    def release(
        self, organization_id: str, environment: str, key: str, *, claimed_at: float | None = None
    ) -> None:
        """Give ``key`` up without a result (the request crashed), so a retry runs."""
        try:
            self._store.release_idempotency_key(
                organization_id, environment, key, claimed_at=claimed_at
            )
        finally:
            self._let_go(organization_id, environment, key, claimed_at)

    def _let_go(
        self, organization_id: str, environment: str, key: str, claimed_at: float | None
    ) -> None:
        """Stop renewing the claim (``claimed_at``; ``None``: this process's claim of
        ``key``). Also when the write failed: then its lease lapses and a retry runs."""
        scope = (organization_id, environment, key)
        with self._held_lock:
            if claimed_at is None or self._held.get(scope) == claimed_at:
                self._held.pop(scope, None)

    def renew(self) -> int:
        """Extend the leases of the claims this process holds by ``lease`` from now, in
        one write (none when it holds none); forget those it lost (taken over after a
        lapse). How many were renewed."""
        held = self.held()
        if not held:
            return 0
        lost = self._store.renew_idempotency_keys(held, until=self._clock() + self._lease)
        for organization_id, environment, key, claimed_at in lost:
            self._let_go(organization_id, environment, key, claimed_at)
        return len(held) - len(lost)

    def sweep(self) -> int:
        """Delete up to ``sweep_batch`` expired keys and their results; how many went."""
        return self._store.sweep_idempotency_keys(
            before=self._clock() - self._ttl, limit=self.sweep_batch
        )

    def sweep_step(self) -> float | None:
        """A pass of the core's ``agentcore-idempotency-sweep`` loop (``runtime.Step``,
        every ``renew_interval``): renew the claims held, then, once a sweep interval,
        one bounded sweep; at once another pass if that one was full."""
        self.renew()
        if time.monotonic() < self._next_sweep:
            return None
        if self.sweep() >= self.sweep_batch:
            return 0.0
        self._next_sweep = time.monotonic() + self._sweep_interval
        return None


def error_result(error: AgentCoreError) -> StoredResult:
    """``error`` as a replayable result: its status and its fields as JSON, with the
    seconds a 503 said to wait (``RETRY_AFTER``; ``kept_error`` reads them back)."""
    fields = error.as_dict()
    if isinstance(error, ServiceUnavailable) and error.retry_after is not None:
        fields[RETRY_AFTER] = error.retry_after
    return StoredResult(error.status, json.dumps(fields, separators=(",", ":")))


def kept_error(result: StoredResult) -> tuple[AgentCoreError, dict[str, Any]]:
    """A kept failure as its error (whose facts an adapter turns into headers, such as
    a 503's ``Retry-After``) and the fields to answer with, as they were kept."""
    fields = json.loads(result.body)
    retry_after = fields.pop(RETRY_AFTER, None)
    error = error_of(
        result.status, str(fields.get("code")), str(fields.get("detail")), fields.get("param")
    )
    if isinstance(error, ServiceUnavailable) and isinstance(retry_after, int | float):
        error.retry_after = float(retry_after)
    return error, fields
