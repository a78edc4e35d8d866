"""Idempotency keys with Stripe's semantics: a write runs once per key, retries replay it.

The rules live here, framework-free: a key is scoped to a workspace, fingerprinted
with its request, remembered for ``Settings.idempotency_ttl`` seconds; the same key
with the same request replays the first result, with another request is a 409, and
a duplicate that arrives while the first still runs waits for it. What is kept is a
replayable result (status and JSON body), never HTTP bytes: the adapter that called
``claim`` turns a result into its own response.

A claim is a lease: a request still in progress ``lease`` seconds after it claimed its
key (longer than any request may run) has lost its process (killed, out of memory) or
its store connection before it could keep a result or release the key, so a retry
claims the key and runs (as at Stripe). Expired keys are swept (``sweep``, run by the
core's runtime), so no kept result outlives ``ttl`` by more than a sweep interval.
"""

from __future__ import annotations

import json
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
    error_of,
)
from agentcore.storage.records import StoredResult

if TYPE_CHECKING:
    from agentcore.storage.base import IdempotencyStore

KEY_PARAM = "Idempotency-Key"
#: Where a kept failure's fields hold the seconds a 503 said to wait: not a field of
#: the error (``as_dict``), so ``kept_error`` takes it out again.
RETRY_AFTER = "_retry_after"


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
    :param lease: seconds after its claim that a request still in progress is taken
        to be dead (its key may be claimed again); ``None``: never before ``ttl``.
    :param clock: Unix seconds (injectable for tests).
    """

    poll = 0.02  # seconds between claims while a duplicate waits
    sweep_batch = 1000  # expired keys deleted per sweep write (a short write each)

    def __init__(
        self,
        store: IdempotencyStore,
        *,
        ttl: float,
        lease: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._ttl = ttl
        self._lease = lease
        self._clock = clock

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
        self._store.finish_idempotency_key(
            organization_id,
            environment,
            key,
            StoredResult(status, body, conversation_id),
            claimed_at=claimed_at,
        )

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
        (``Cancelled``, ``DeadlineExceeded`` raised by a ``Cancellation``): then the key
        is released, so a retry runs afresh rather than replaying an error that hides
        nothing. Work whose outcome is still unknown must not be failed at all: keep
        the key claimed until it settles, then ``succeed`` or ``fail`` with what it
        ended as (the HTTP adapter does so for a request past its deadline).
        """
        if isinstance(error, Cancelled | DeadlineExceeded):
            self.release(organization_id, environment, key, claimed_at=claimed_at)
            return
        self._store.finish_idempotency_key(
            organization_id, environment, key, error_result(error), claimed_at=claimed_at
        )

    def release(
        self, organization_id: str, environment: str, key: str, *, claimed_at: float | None = None
    ) -> None:
        """Give ``key`` up without a result (the request crashed), so a retry runs."""
        self._store.release_idempotency_key(
            organization_id, environment, key, claimed_at=claimed_at
        )

    def sweep(self) -> int:
        """Delete up to ``sweep_batch`` expired keys and their results; how many went."""
        return self._store.sweep_idempotency_keys(
            before=self._clock() - self._ttl, limit=self.sweep_batch
        )

    def sweep_step(self) -> float | None:
        """A pass of the core's sweep loop (``runtime.Step``): one bounded sweep; at
        once another if that one was full, else the loop's interval."""
        return 0.0 if self.sweep() >= self.sweep_batch else None


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
