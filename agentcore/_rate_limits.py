"""Per-key rate limits: a token bucket per key, and the facts a caller reports.

The core decides and returns facts (a ``Decision``: limit, remaining, reset and
retry-after seconds); the HTTP adapter turns them into ``RateLimit``/``Retry-After``
headers.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from agentcore._memory_budget import Sweeper
from agentcore.config import Settings
from agentcore.errors import Decision, RateLimited
from agentcore.storage.base import RateLimitStore
from agentcore.workspace import Workspace

#: How many local buckets are kept before those full again are dropped.
SWEEP_BUCKETS = 10_000


class RateLimiter:
    """Token buckets keyed by API key id: ``rate`` tokens a second, burst of ``rate``
    (at least one, so a rate below one a second allows one request every ``1/rate`` s).

    With ``rate_limit_backend = "local"`` the buckets live in this process (a host
    running several processes gets a limit per process). With ``"store"`` (and a
    ``store``) each take is one atomic write to the store, so every process and node
    sharing it enforces one limit per key. ``"auto"`` is ``"store"`` for a store whose
    ``shared_by_nodes`` is true (PostgreSQL), else ``"local"``. The clock is injectable for tests; the
    store backend needs one clock for all nodes, so its default is Unix time.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Callable[[], float] | None = None,
        store: RateLimitStore | None = None,
    ):
        self._rates = {"live": settings.rate_limit_live, "test": settings.rate_limit_test}
        self._token_share = settings.client_token_rate_share
        backend = settings.rate_limit_backend
        if backend == "auto":
            # one limit per key wherever requests land: a store that several nodes share
            # keeps the buckets; a file that one process serves keeps them in memory
            backend = "store" if getattr(store, "shared_by_nodes", False) else "local"
        self._store = store if backend == "store" else None
        default = time.time if self._store is not None else time.monotonic
        self._clock = clock or default
        # key -> (tokens, last refill, when it is full again): a bucket full again is the
        # same as none, so such buckets are swept out (keys of 100,000 tenants, or the
        # client tokens of as many users, leave no 100,000 buckets behind)
        self._buckets: dict[str, tuple[float, float, float]] = {}
        self._lock = threading.Lock()
        self._sweep = Sweeper(SWEEP_BUCKETS)

    @property
    def backend(self) -> str:
        """Where the buckets live: ``"store"`` (shared by nodes) or ``"local"`` (this process)."""
        return "store" if self._store is not None else "local"

    def check(self, key_id: str, environment: str, *, share: float = 1.0) -> Decision:
        """Take one token for ``key_id`` if there is one; ``share`` scales the
        environment's rate (a client token's bucket holds a share of its key's)."""
        rate = self._rates[environment] * share
        burst = max(rate, 1.0)
        now = self._clock()
        if self._store is not None:
            taken = self._store.take_token(key_id, rate=rate, burst=burst, now=now)
            allowed, tokens = taken.allowed, taken.tokens
        else:
            with self._lock:
                tokens, last, _ = self._buckets.get(key_id, (burst, now, now))
                tokens = min(burst, tokens + (now - last) * rate)
                allowed = tokens >= 1.0
                if allowed:
                    tokens -= 1.0
                self._buckets[key_id] = (tokens, now, now + (burst - tokens) / rate)
                self._buckets = self._sweep(self._buckets, lambda bucket: bucket[2] > now)
        return Decision(
            allowed=allowed,
            limit=rate,
            remaining=int(tokens),
            reset=(burst - tokens) / rate,
            retry_after=0.0 if allowed else (1.0 - tokens) / rate,
        )

    def enforce(self, key_id: str, environment: str, *, share: float = 1.0) -> Decision:
        """The decision for an allowed request, or ``RateLimited`` (429) carrying it."""
        decision = self.check(key_id, environment, share=share)
        if not decision.allowed:
            wait = max(1, math.ceil(decision.retry_after))
            whose = "client token" if share != 1.0 else "key"
            raise RateLimited(
                f"Too many requests for this {whose}; retry after {wait} s.", decision=decision
            )
        return decision

    def enforce_for(self, workspace: Workspace) -> Decision:
        """``enforce`` for the caller of ``workspace``: its client token's own bucket (a
        ``client_token_rate_share`` of its key's rate), else its key's."""
        share = self._token_share if workspace.client is not None else 1.0
        return self.enforce(workspace.rate_limit_id, workspace.environment, share=share)
