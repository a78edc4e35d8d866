"""The core's idempotency rules without HTTP: claim, replay, mismatch, wait, fail, release."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from agentcore import AgentCore, Conflict, NotFound
from agentcore.idempotency import IdempotencyKeys, error_result
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
    return IdempotencyKeys(store, ttl=60.0, clock=clock)


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
