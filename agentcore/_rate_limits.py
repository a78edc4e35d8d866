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
from pathlib import Path

from agentcore._bucket_file import BucketFile
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

    Where the buckets live is ``rate_limit_backend``:

    - ``"local"``: in this process (several processes allow a limit each);
    - ``"host"``: in ``bucket_file`` (``<database>.rate-limits`` beside a SQLite file),
      which every process on that file maps: one limit per key for the workers of
      ``serve --workers N``, at the cost of a file lock per take, no store write;
    - ``"store"`` (with a ``store``): each take is one atomic write to the store, so
      every process and node sharing it enforces one limit per key;
    - ``"auto"``: ``"store"`` for a store whose ``shared_by_nodes`` is true
      (PostgreSQL), else ``"local"`` (``serve --workers N`` sets ``"host"``).

    The clock is injectable for tests; the shared backends need one clock for every
    process, so their default is Unix time.

    :raises ValueError: ``"host"`` without a ``bucket_file`` (a store that is not a
        SQLite file).
    :raises OSError: the bucket file cannot be created or mapped.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Callable[[], float] | None = None,
        store: RateLimitStore | None = None,
        bucket_file: Path | None = None,
    ):
        self._rates = {"live": settings.rate_limit_live, "test": settings.rate_limit_test}
        self._token_share = settings.client_token_rate_share
        backend = settings.rate_limit_backend
        if backend == "auto":
            # one limit per key wherever requests land: a store that several nodes share
            # keeps the buckets; a file that one process serves keeps them in memory
            backend = "store" if getattr(store, "shared_by_nodes", False) else "local"
        if backend == "host" and bucket_file is None:
            raise ValueError(
                'rate_limit_backend = "host" keeps token buckets in a file beside a SQLite'
                ' database; this store is not one (use "store" or "local")'
            )
        self._store = store if backend == "store" else None
        self._bucket_file = bucket_file
        self._file = BucketFile(bucket_file) if backend == "host" and bucket_file else None
        shared = self._store is not None or self._file is not None
        self._clock = clock or (time.time if shared else time.monotonic)
        # key -> (tokens, last refill, when it is full again): a bucket full again is the
        # same as none, so such buckets are swept out (keys of 100,000 tenants, or the
        # client tokens of as many users, leave no 100,000 buckets behind)
        self._buckets: dict[str, tuple[float, float, float]] = {}
        self._lock = threading.Lock()
        self._sweep = Sweeper(SWEEP_BUCKETS)

    @property
    def backend(self) -> str:
        """Where the buckets live: ``"store"`` (shared by nodes), ``"host"`` (a file
        shared by the processes of one machine) or ``"local"`` (this process)."""
        if self._store is not None:
            return "store"
        return "host" if self._file is not None else "local"

    def backend_for_processes(self) -> str:
        """The backend several processes serving this store together (``serve --workers
        N``) need for one limit per key: this one's when it is shared, else ``"host"``
        on a SQLite file, else ``"store"``."""
        if self.backend != "local":
            return self.backend
        return "host" if self._bucket_file is not None else "store"

    def check(self, key_id: str, environment: str, *, share: float = 1.0) -> Decision:
        """Take one token for ``key_id`` if there is one; ``share`` scales the
        environment's rate (a client token's bucket holds a share of its key's)."""
        rate = self._rates[environment] * share
        burst = max(rate, 1.0)
        now = self._clock()
        if self._store is not None:
            taken = self._store.take_token(key_id, rate=rate, burst=burst, now=now)
            allowed, tokens = taken.allowed, taken.tokens
        elif self._file is not None:
            allowed, tokens = self._file.take(key_id, rate=rate, burst=burst, now=now)
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

    def close(self) -> None:
        """Let go of the bucket file, if any (its buckets stay for other processes); a
        take afterwards raises ``ValueError``."""
        if self._file is not None:
            self._file.close()

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
