"""The core's idempotency rules without HTTP: claim, replay, mismatch, wait, fail, release."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from agentcore import AgentCore, Conflict, NotFound
from agentcore._background import PoolClosed
from agentcore._idempotency import IdempotencyKeys, error_result, kept_error
from agentcore.errors import ServiceUnavailable
from agentcore.storage.records import StoredResult
from agentcore.storage.sqlite import SQLiteStore

ORG, ENV = "org_1", "test"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(tmp_path: Path):
    opened = SQLiteStore.open(tmp_path / "idem.db")
    yield opened
    opened.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def keys(store: SQLiteStore, clock: FakeClock) -> IdempotencyKeys:
    return IdempotencyKeys(store, ttl=60.0, lease=10.0, clock=clock)


def _later() -> float:
    return time.monotonic() + 60


def test_first_claim_runs_and_a_retry_replays_the_kept_result(keys: IdempotencyKeys) -> None:
    assert keys.claim(ORG, ENV, "k", "fp", wait_until=_later()).action == "run"
    keys.succeed(ORG, ENV, "k", 201, '{"id":"agt_1"}')
    again = keys.claim(ORG, ENV, "k", "fp", wait_until=_later())
    assert again.action == "replay"
    assert again.result == StoredResult(201, '{"id":"agt_1"}')
    assert again.result is not None and not again.result.failed


def test_another_request_with_the_key_is_a_409(keys: IdempotencyKeys) -> None:
    keys.claim(ORG, ENV, "k", "fp-1", wait_until=_later())
    keys.succeed(ORG, ENV, "k", 200, "{}")
    with pytest.raises(Conflict) as caught:
        keys.claim(ORG, ENV, "k", "fp-2", wait_until=_later())
    assert caught.value.code == "idempotency_key_reused"
    assert caught.value.param == "Idempotency-Key"


def test_a_duplicate_waits_then_gives_up_with_a_409(keys: IdempotencyKeys) -> None:
    assert keys.claim(ORG, ENV, "k", "fp", wait_until=_later()).action == "run"
    assert keys.claim(ORG, ENV, "k", "fp", wait_until=_later()).action == "wait"
    with pytest.raises(Conflict) as caught:
        keys.claim(ORG, ENV, "k", "fp", wait_until=time.monotonic() - 1)
    assert caught.value.code == "idempotency_request_in_progress"


def test_a_failure_is_kept_as_the_errors_fields(keys: IdempotencyKeys) -> None:
    keys.claim(ORG, ENV, "k", "fp", wait_until=_later())
    keys.fail(ORG, ENV, "k", NotFound("No agent with id 'x'.", param="id"))
    claim = keys.claim(ORG, ENV, "k", "fp", wait_until=_later())
    assert claim.result is not None and claim.result.failed
    assert claim.result.status == 404
    assert json.loads(claim.result.body) == {
        "title": "Not Found",
        "status": 404,
        "detail": "No agent with id 'x'.",
        "code": "resource_missing",
        "param": "id",
    }


def test_a_refusal_at_shutdown_releases_the_key_and_other_503s_are_kept(
    keys: IdempotencyKeys,
) -> None:
    """A 503 ``server_shutting_down`` (refused before the work started) is not kept: the
    retry runs afresh. Another 503 (a database lost during a commit, which may have
    committed) is kept, so a retry cannot do the work twice."""
    keys.claim(ORG, ENV, "k", "fp", wait_until=_later())
    keys.fail(ORG, ENV, "k", PoolClosed("Shutting down.", code="server_shutting_down"))
    assert keys.claim(ORG, ENV, "k", "fp", wait_until=_later()).action == "run"
    keys.fail(ORG, ENV, "k", ServiceUnavailable("The connection broke during a commit."))
    claim = keys.claim(ORG, ENV, "k", "fp", wait_until=_later())
    assert claim.result is not None and claim.result.status == 503


def test_release_lets_a_retry_run(keys: IdempotencyKeys) -> None:
    keys.claim(ORG, ENV, "k", "fp", wait_until=_later())
    keys.release(ORG, ENV, "k")
    assert keys.claim(ORG, ENV, "k", "fp-other", wait_until=_later()).action == "run"


def test_keys_expire_after_the_ttl(keys: IdempotencyKeys, clock: FakeClock) -> None:
    keys.claim(ORG, ENV, "k", "fp", wait_until=_later())
    keys.succeed(ORG, ENV, "k", 200, "{}")
    clock.now += 59.9
    assert keys.claim(ORG, ENV, "k", "fp", wait_until=_later()).action == "replay"
    clock.now += 0.1  # exactly the ttl: forgotten
    assert keys.claim(ORG, ENV, "k", "fp-other", wait_until=_later()).action == "run"


def test_keys_are_scoped_per_workspace(keys: IdempotencyKeys) -> None:
    keys.claim(ORG, ENV, "k", "fp", wait_until=_later())
    assert keys.claim(ORG, "live", "k", "fp", wait_until=_later()).action == "run"
    assert keys.claim("org_2", ENV, "k", "fp", wait_until=_later()).action == "run"


def test_a_row_kept_as_bytes_by_an_older_version_replays(
    store: SQLiteStore, keys: IdempotencyKeys
) -> None:
    keys.claim(ORG, ENV, "k", "fp", wait_until=_later())
    with store.db.write() as conn:  # what the previous version wrote: body bytes + headers
        conn.execute(
            "UPDATE idempotency_keys SET status = 'done', response_status = 201,"
            " response_body = ?, response_headers = ?",
            [b'{"id":"agt_1"}', '{"content-type": "application/json"}'],
        )
    claim = keys.claim(ORG, ENV, "k", "fp", wait_until=_later())
    assert claim.result == StoredResult(201, '{"id":"agt_1"}')


def test_error_result_keeps_extra_fields() -> None:
    error = Conflict("busy", code="x", extra={"hint": "later"})
    result = error_result(error)
    assert result.status == 409
    assert json.loads(result.body)["hint"] == "later"


def test_the_core_keeps_results_in_its_store(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    with AgentCore.open(path, entry_points=False) as core:
        assert core.idempotency.claim(ORG, ENV, "k", "fp", wait_until=_later()).action == "run"
        core.idempotency.succeed(ORG, ENV, "k", 200, "{}")
    with AgentCore.open(path, entry_points=False) as reopened:  # another process, say
        claim = reopened.idempotency.claim(ORG, ENV, "k", "fp", wait_until=_later())
        assert claim.result == StoredResult(200, "{}")


# a claim is a lease: a holder that died does not lock its key for the ttl ------------


def test_a_claim_still_in_progress_after_its_lease_is_taken_over(
    keys: IdempotencyKeys, clock: FakeClock
) -> None:
    held = keys.claim(ORG, ENV, "k", "fp", wait_until=_later())
    assert held.action == "run" and held.claimed_at == clock.now
    # its holder dies (killed, or its store connection lost): no result, no release
    clock.now += 9.9
    assert keys.claim(ORG, ENV, "k", "fp", wait_until=_later()).action == "wait"
    clock.now += 0.1  # exactly the lease: dead
    again = keys.claim(ORG, ENV, "k", "fp", wait_until=_later())
    assert again.action == "run" and again.claimed_at == clock.now


def test_a_holder_taken_over_writes_nothing_over_its_successor(
    keys: IdempotencyKeys, clock: FakeClock
) -> None:
    first = keys.claim(ORG, ENV, "k", "fp", wait_until=_later())
    clock.now += 10.0
    second = keys.claim(ORG, ENV, "k", "fp", wait_until=_later())
    assert second.action == "run"
    # the first holder was only slow: its release and its result come too late
    keys.release(ORG, ENV, "k", claimed_at=first.claimed_at)
    assert keys.claim(ORG, ENV, "k", "fp", wait_until=_later()).action == "wait"
    keys.succeed(ORG, ENV, "k", 201, '{"id":"agt_late"}', claimed_at=first.claimed_at)
    assert keys.claim(ORG, ENV, "k", "fp", wait_until=_later()).action == "wait"
    keys.succeed(ORG, ENV, "k", 201, '{"id":"agt_2"}', claimed_at=second.claimed_at)
    replay = keys.claim(ORG, ENV, "k", "fp", wait_until=_later())
    assert replay.result == StoredResult(201, '{"id":"agt_2"}')


def test_a_renewed_claim_outlives_its_lease_and_a_lost_one_is_let_go(
    store: SQLiteStore, keys: IdempotencyKeys, clock: FakeClock
) -> None:
    other = IdempotencyKeys(store, ttl=60.0, lease=10.0, clock=clock)  # another process
    held = keys.claim(ORG, ENV, "k", "fp", wait_until=_later())
    assert keys.held() == [(ORG, ENV, "k", held.claimed_at)]
    for _ in range(5):  # slow but alive: renewed every third of the lease
        clock.now += 3.4
        assert keys.sweep_step() is None
        assert other.claim(ORG, ENV, "k", "fp", wait_until=_later()).action == "wait"
    clock.now += 10.0  # its process stopped renewing (it died): the other takes over
    assert other.claim(ORG, ENV, "k", "fp", wait_until=_later()).action == "run"
    assert keys.renew() == 0 and keys.held() == []  # lost: no longer renewed
    assert other.renew() == 1
    keys.succeed(ORG, ENV, "k", 200, "{}", claimed_at=held.claimed_at)  # writes nothing
    assert other.claim(ORG, ENV, "k", "fp", wait_until=_later()).action == "wait"


def test_a_claim_is_let_go_when_finished_failed_or_released(keys: IdempotencyKeys) -> None:
    for n, end in enumerate(("succeed", "fail", "release")):
        claim = keys.claim(ORG, ENV, f"k{n}", "fp", wait_until=_later())
        if end == "succeed":
            keys.succeed(ORG, ENV, f"k{n}", 200, "{}", claimed_at=claim.claimed_at)
        elif end == "fail":
            keys.fail(ORG, ENV, f"k{n}", NotFound("gone"), claimed_at=claim.claimed_at)
        else:
            keys.release(ORG, ENV, f"k{n}", claimed_at=claim.claimed_at)
        assert keys.held() == [], end


def test_a_kept_result_is_not_dropped_at_the_lease(keys: IdempotencyKeys, clock: FakeClock) -> None:
    held = keys.claim(ORG, ENV, "k", "fp", wait_until=_later())
    keys.succeed(ORG, ENV, "k", 200, "{}", claimed_at=held.claimed_at)
    clock.now += 30.0  # past the lease, within the ttl
    assert keys.claim(ORG, ENV, "k", "fp", wait_until=_later()).action == "replay"


# expired keys are swept --------------------------------------------------------------


def _rows(store: SQLiteStore) -> int:
    with store.db.read() as conn:
        return int(conn.execute("SELECT count(*) FROM idempotency_keys").fetchone()[0])


def test_the_sweep_deletes_expired_keys_in_bounded_batches(
    store: SQLiteStore, keys: IdempotencyKeys, clock: FakeClock
) -> None:
    keys.sweep_batch = 3
    for n in range(5):
        keys.claim(ORG, ENV, f"old-{n}", "fp", wait_until=_later())
        keys.succeed(ORG, ENV, f"old-{n}", 200, "{}")
    clock.now += 30.0
    keys.claim(ORG, ENV, "young", "fp", wait_until=_later())
    keys.succeed(ORG, ENV, "young", 201, "{}")
    clock.now += 30.0  # the old ones are exactly ttl old: expired; "young" is not
    assert keys.sweep_step() == 0.0  # a full batch: sweep again at once
    assert _rows(store) == 3
    assert keys.sweep_step() is None  # the rest: wait the loop's interval
    assert _rows(store) == 1
    assert keys.claim(ORG, ENV, "young", "fp", wait_until=_later()).action == "replay"


@pytest.mark.both_stores
def test_the_runtime_sweeps_expired_keys(store_url: str) -> None:
    with AgentCore.open(store_url, entry_points=False, idempotency_ttl=0.3) as core:
        keys = core.idempotency
        for n in range(3):
            assert keys.claim(ORG, ENV, f"k{n}", "fp", wait_until=_later()).action == "run"
            keys.succeed(ORG, ENV, f"k{n}", 200, "{}")
        assert "agentcore-idempotency-sweep" in {loop.name for loop in core.runtime.health()}
        core.start()
        end = time.monotonic() + 60  # only guards a hang
        while time.monotonic() < end:
            with core.store.db.read() as conn:
                row = conn.execute("SELECT count(*) AS n FROM idempotency_keys").fetchone()
            if row["n"] == 0:
                break
            time.sleep(0.05)
        assert row["n"] == 0, "expired keys were not swept"


def test_a_kept_503_keeps_its_retry_after() -> None:
    kept = error_result(ServiceUnavailable("The database is down.", retry_after=2.0))
    error, fields = kept_error(kept)
    assert isinstance(error, ServiceUnavailable) and error.retry_after == 2.0
    assert fields == ServiceUnavailable("The database is down.").as_dict()
    error, _ = kept_error(error_result(NotFound("gone", param="id")))
    assert isinstance(error, NotFound) and (error.code, error.param) == ("resource_missing", "id")
