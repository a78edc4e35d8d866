"""Shared rate limits: token buckets in the store, one limit per key across processes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers import json_of_processes

from agentcore import AgentCore, RateLimited
from agentcore._rate_limits import RateLimiter
from agentcore.config import Settings
from agentcore.storage.base import Store
from agentcore_starlette.ratelimit import rate_limit_headers

pytestmark = pytest.mark.both_stores


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    core = AgentCore.open(store_url, start_workers=False)
    yield core.store
    core.close()


def test_take_token_starts_full_spends_and_refills(store: Store) -> None:
    takes = [store.take_token("key_1", rate=4, burst=4, now=100.0) for _ in range(5)]
    assert [t.allowed for t in takes] == [True, True, True, True, False]
    assert [t.tokens for t in takes] == [3.0, 2.0, 1.0, 0.0, 0.0]
    # a quarter of a second refills one token at 4/s: exactly one more take
    assert store.take_token("key_1", rate=4, burst=4, now=100.25).allowed
    assert not store.take_token("key_1", rate=4, burst=4, now=100.25).allowed
    # a long pause refills only up to the burst
    after = store.take_token("key_1", rate=4, burst=4, now=1000.0)
    assert after.allowed and after.tokens == 3.0


def test_buckets_are_per_key(store: Store) -> None:
    assert store.take_token("key_1", rate=1, burst=1, now=0.0).allowed
    assert not store.take_token("key_1", rate=1, burst=1, now=0.0).allowed
    assert store.take_token("key_2", rate=1, burst=1, now=0.0).allowed


def test_a_clock_that_goes_back_never_refills(store: Store) -> None:
    assert store.take_token("key_1", rate=1, burst=1, now=50.0).allowed
    # another node whose clock is 10 s behind: no negative refill, no free token
    behind = store.take_token("key_1", rate=1, burst=1, now=40.0)
    assert not behind.allowed and behind.tokens == 0.0
    assert store.take_token("key_1", rate=1, burst=1, now=51.0).allowed


def test_a_burst_below_one_never_allows(store: Store) -> None:
    assert not store.take_token("key_1", rate=0.5, burst=0.5, now=0.0).allowed
    assert not store.take_token("key_1", rate=0.5, burst=0.5, now=10.0).allowed


def test_two_cores_on_one_store_share_a_limit(store_url: str) -> None:
    db = store_url
    clock = [1000.0]
    with (
        AgentCore.open(db, start_workers=False, rate_limit_backend="store") as a,
        AgentCore.open(db, start_workers=False, rate_limit_backend="store") as b,
    ):
        limiters = [
            RateLimiter(core.settings, store=core.store, clock=lambda: clock[0]) for core in (a, b)
        ]
        rate = int(a.settings.rate_limit_test)
        allowed = [limiters[n % 2].check("key_1", "test").allowed for n in range(rate + 1)]
        assert allowed == [True] * rate + [False]
        with pytest.raises(RateLimited) as caught:
            limiters[0].enforce("key_1", "test")
        # the bucket both cores share is empty: one token comes back in 1/rate seconds
        assert caught.value.retry_after == pytest.approx(1 / rate)
        assert caught.value.decision is not None  # facts; the adapter writes the headers
        assert rate_limit_headers(caught.value.decision)["Retry-After"] == "1"


def test_the_local_backend_keeps_a_limit_per_process() -> None:
    settings = Settings(rate_limit_test=2)
    one, two = RateLimiter(settings, clock=lambda: 0.0), RateLimiter(settings, clock=lambda: 0.0)
    assert [one.check("k", "test").allowed for _ in range(3)] == [True, True, False]
    assert [two.check("k", "test").allowed for _ in range(3)] == [True, True, False]


def test_the_default_backend_follows_the_store(store_url: str, store_kind: str) -> None:
    """``auto``: a SQLite file keeps buckets in memory, PostgreSQL (shared by nodes) in the store."""
    with AgentCore.open(store_url, start_workers=False) as core:
        assert core.settings.rate_limit_backend == "auto"
        assert core.store.shared_by_nodes is (store_kind == "postgres")
        assert core.rate_limiter.backend == ("store" if store_kind == "postgres" else "local")
        # the core's limiter chose its backend; a twin with the same settings and store
        # and a frozen clock makes the same choice, and no refill can happen under load
        limiter = RateLimiter(core.settings, store=core.store, clock=lambda: 1_000.0)
        for _ in range(int(core.settings.rate_limit_test)):
            limiter.check("key_1", "test")
        assert not limiter.check("key_1", "test").allowed
        # a bucket the limiter never wrote starts full; the one it spent is empty at the
        # same instant, so its next take is refused
        take = core.store.take_token("key_1", rate=25, burst=25, now=1_000.0)
        if store_kind == "sqlite":
            assert take.allowed and take.tokens == 24.0  # untouched: the buckets were local
        else:
            assert not take.allowed  # the limiter spent this very bucket


def test_an_explicit_backend_wins_over_auto(store_url: str) -> None:
    with AgentCore.open(store_url, start_workers=False, rate_limit_backend="local") as core:
        for _ in range(int(core.settings.rate_limit_test)):
            core.rate_limiter.check("key_1", "test")
        assert not core.rate_limiter.check("key_1", "test").allowed
        assert core.store.take_token("key_1", rate=2, burst=2, now=0.0).tokens == 1.0


def test_a_bad_backend_name_is_refused() -> None:
    with pytest.raises(ValueError, match="rate_limit_backend"):
        Settings(rate_limit_backend="redis")  # type: ignore[arg-type]


TAKE_SCRIPT = """
import json, sys
from agentcore import AgentCore

with AgentCore.open(sys.argv[1], start_workers=False) as core:
    print(json.dumps([core.store.take_token("key_1", rate=20, burst=20, now=500.0).allowed
                      for _ in range(15)]))
"""


@pytest.mark.slow
def test_two_processes_taking_at_once_never_exceed_the_burst(store_url: str) -> None:
    db = store_url
    AgentCore.open(db, start_workers=False).close()
    results = json_of_processes(TAKE_SCRIPT, str(db), count=2)
    # 30 takes at one instant against a burst of 20: exactly 20 succeed, whoever wins
    assert sum(sum(r) for r in results) == 20


def test_a_shared_rate_below_one_a_second_still_allows_one(store_url: str) -> None:
    clock = [1_000.0]
    with AgentCore.open(
        store_url, start_workers=False, rate_limit_backend="store", rate_limit_test=0.2
    ) as core:
        limiter = RateLimiter(core.settings, store=core.store, clock=lambda: clock[0])
        assert [limiter.check("key_1", "test").allowed for _ in range(2)] == [True, False]
        clock[0] += 5.0
        assert [limiter.check("key_1", "test").allowed for _ in range(2)] == [True, False]
