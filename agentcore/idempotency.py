"""Idempotency keys with Stripe's semantics: a write runs once per key, retries replay it.

The rules live here, framework-free: a key is scoped to a workspace, fingerprinted
with its request, remembered for ``Settings.idempotency_ttl`` seconds; the same key
with the same request replays the first result, with another request is a 409, and
a duplicate that arrives while the first still runs waits for it. What is kept is a
replayable result (status and JSON body), never HTTP bytes: the adapter that called
``claim`` turns a result into its own response.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from agentcore.errors import AgentCoreError, Cancelled, Conflict, DeadlineExceeded
from agentcore.storage.records import StoredResult

if TYPE_CHECKING:
    from agentcore.storage.base import IdempotencyStore

KEY_PARAM = "Idempotency-Key"


@dataclass(frozen=True)
class Claim:
    """What to do with a request that carries an idempotency key.

    ``run``: this request now holds the key; run it, then ``succeed``, ``fail`` or
    ``release``. ``replay``: return ``result``, the first request's outcome.
    ``wait``: a duplicate is running; claim again shortly (``IdempotencyKeys.poll``).
    """

    action: Literal["run", "replay", "wait"]
    result: StoredResult | None = None


class IdempotencyKeys:
    """The idempotency keys of every workspace; reached as ``core.idempotency``.

    :param store: where claims and results are kept (shared by every process).
    :param ttl: seconds a key is remembered.
    :param clock: Unix seconds (injectable for tests).
    """

    poll = 0.02  # seconds between claims while a duplicate waits

    def __init__(
        self,
        store: IdempotencyStore,
        *,
        ttl: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._ttl = ttl
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
        state, stored = self._store.claim_idempotency_key(
            organization_id, environment, key, fingerprint, now=self._clock(), ttl=self._ttl
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
            return Claim("run")
        if time.monotonic() > wait_until:
            raise Conflict(
                "A request with this Idempotency-Key is still being processed.",
                code="idempotency_request_in_progress",
                param=KEY_PARAM,
            )
        return Claim("wait")

    def succeed(
        self, organization_id: str, environment: str, key: str, status: int, body: str
    ) -> None:
        """Keep the result of the request holding ``key``: its status and JSON body."""
        self._store.finish_idempotency_key(
            organization_id, environment, key, StoredResult(status, body)
        )

    def fail(self, organization_id: str, environment: str, key: str, error: AgentCoreError) -> None:
        """Keep ``error`` as the result of the request holding ``key`` (retries get it too).

        Except an error that says the work was stopped before it committed anything
        (``Cancelled``, ``DeadlineExceeded`` raised by a ``Cancellation``): then the key
        is released, so a retry runs afresh rather than replaying an error that hides
        nothing. Work whose outcome is still unknown must not be failed at all: keep
        the key claimed until it settles, then ``succeed`` or ``fail`` with what it
        ended as (the HTTP adapter does so for a request past its deadline).
        """
        if isinstance(error, Cancelled | DeadlineExceeded):
            self.release(organization_id, environment, key)
            return
        self._store.finish_idempotency_key(organization_id, environment, key, error_result(error))

    def release(self, organization_id: str, environment: str, key: str) -> None:
        """Give ``key`` up without a result (the request crashed), so a retry runs."""
        self._store.release_idempotency_key(organization_id, environment, key)


def error_result(error: AgentCoreError) -> StoredResult:
    """``error`` as a replayable result: its status and its fields as JSON."""
    return StoredResult(error.status, json.dumps(error.as_dict(), separators=(",", ":")))
