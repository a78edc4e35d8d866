"""Idempotency-Key on POST routes: replay, mismatch, key format, scoping, expiry, races."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import ServerThread
from helpers import api as _api_fixture  # noqa: F401 (the `api` fixture: uvicorn and ASGI)
from helpers import assert_problem

from agentcore import AgentCore
from agentcore._idempotency import error_result
from agentcore.errors import ServiceUnavailable
from agentcore.schema import AgentCreate
from agentcore_starlette import create_app
from agentcore_starlette.idempotency import fingerprint, replay_response

REPLAYED = "idempotent-replayed"


def _agents(api) -> list[dict[str, Any]]:
    response = api.get("/v1/agents", params={"limit": 100})
    assert response.status_code == 200, response.text
    return response.json()["agents"]


def _post(api, path: str, key: str, body: dict[str, Any] | None = None) -> httpx.Response:
    kwargs: dict[str, Any] = {"headers": {"Idempotency-Key": key}}
    if body is not None:
        kwargs["json"] = body
    return api.post(path, **kwargs)


def test_same_key_and_body_replays_the_first_response(api) -> None:
    body = {"name": "Once", "role": "support"}
    first = _post(api, "/v1/agents", "create-once", body)
    assert first.status_code == 201, first.text
    assert REPLAYED not in first.headers
    second = _post(api, "/v1/agents", "create-once", body)
    assert second.status_code == 201, second.text
    assert second.headers[REPLAYED] == "true"
    assert second.json() == first.json()
    assert second.headers["content-type"].startswith("application/json")
    assert [a["id"] for a in _agents(api)] == [first.json()["id"]]


def test_equivalent_json_counts_as_the_same_body(api) -> None:
    first = _post(api, "/v1/agents", "k-equiv", {"name": "A", "role": "support"})
    # same fields, other order and spacing; defaults spelled out
    raw = b'{ "role" : "support",  "name": "A", "tools": [] }'
    second = api.post(
        "/v1/agents",
        content=raw,
        headers={"Idempotency-Key": "k-equiv", "Content-Type": "application/json"},
    )
    assert first.status_code == 201
    assert second.status_code == 201, second.text
    assert second.headers.get(REPLAYED) == "true"
    assert second.json()["id"] == first.json()["id"]


def test_same_key_with_another_body_is_409(api) -> None:
    first = _post(api, "/v1/agents", "reused", {"name": "A"})
    assert first.status_code == 201
    other = _post(api, "/v1/agents", "reused", {"name": "B"})
    assert_problem(other, 409, "idempotency_key_reused", param="Idempotency-Key")
    assert [a["name"] for a in _agents(api)] == ["A"]


def test_same_key_on_another_route_is_409(api) -> None:
    agent = _post(api, "/v1/agents", "cross-route", {"name": "A"})
    assert agent.status_code == 201
    search = _post(api, "/v1/knowledge/search", "cross-route", {"query": "x"})
    assert_problem(search, 409, "idempotency_key_reused")
    deploy = _post(api, f"/v1/agents/{agent.json()['id']}/deploy", "cross-route")
    assert_problem(deploy, 409, "idempotency_key_reused")
    assert api.get(f"/v1/agents/{agent.json()['id']}").json()["status"] == "draft"


def test_key_length_limit(api) -> None:
    too_long = _post(api, "/v1/agents", "k" * 256, {"name": "long"})
    assert_problem(too_long, 400, "invalid_idempotency_key", param="Idempotency-Key")
    assert _agents(api) == []
    longest = _post(api, "/v1/agents", "k" * 255, {"name": "long"})
    assert longest.status_code == 201, longest.text
    again = _post(api, "/v1/agents", "k" * 255, {"name": "long"})
    assert again.headers[REPLAYED] == "true"
    assert len(_agents(api)) == 1


@pytest.mark.parametrize("key", ["", "tab\there", "new\u2028line"])
def test_unusable_keys_are_400(api, key: str) -> None:
    if not key.isascii():  # httpx refuses non-ASCII header values; send bytes
        headers = [(b"Idempotency-Key", key.encode())]
        response = api.post("/v1/agents", json={"name": "x"}, headers=dict(headers))
    else:
        response = _post(api, "/v1/agents", key, {"name": "x"})
    assert_problem(response, 400, "invalid_idempotency_key")
    assert _agents(api) == []


def test_keys_are_scoped_per_organization_and_environment(api, keys) -> None:
    body = {"name": "Scoped"}
    mine = _post(api, "/v1/agents", "shared-key", body)
    assert mine.status_code == 201
    other_org = api.with_key(keys.make("globex").secret)
    theirs = _post(other_org, "/v1/agents", "shared-key", body)
    assert theirs.status_code == 201, theirs.text
    assert REPLAYED not in theirs.headers
    assert theirs.json()["id"] != mine.json()["id"]
    live = api.with_key(keys.make("acme", "live").secret)
    live_one = _post(live, "/v1/agents", "shared-key", {"name": "another body is fine here"})
    assert live_one.status_code == 201, live_one.text
    assert REPLAYED not in live_one.headers
    assert [a["id"] for a in _agents(other_org)] == [theirs.json()["id"]]
    assert [a["id"] for a in _agents(live)] == [live_one.json()["id"]]
    assert [a["id"] for a in _agents(api)] == [mine.json()["id"]]


def test_two_keys_of_one_workspace_share_the_idempotency_space(api, keys) -> None:
    body = {"name": "Shared"}
    first = _post(api, "/v1/agents", "ws-key", body)
    second_key = api.with_key(keys.make("acme", "test").secret)
    replay = _post(second_key, "/v1/agents", "ws-key", body)
    assert replay.headers.get(REPLAYED) == "true"
    assert replay.json()["id"] == first.json()["id"]


def test_an_error_response_is_replayed_too(api) -> None:
    agent_id = api.post("/v1/agents", json={"name": "E"}).json()["id"]
    assert _post(api, f"/v1/agents/{agent_id}/deploy", "deploy-1").status_code == 200
    failed = _post(api, f"/v1/agents/{agent_id}/deploy", "deploy-2")
    assert_problem(failed, 409, "invalid_state_transition")
    # make the transition valid again: a retry with the same key still gets the 409
    assert api.post(f"/v1/agents/{agent_id}/undeploy").status_code == 200
    retried = _post(api, f"/v1/agents/{agent_id}/deploy", "deploy-2")
    assert retried.headers[REPLAYED] == "true"
    assert retried.status_code == 409
    assert retried.headers["content-type"].startswith("application/problem+json")
    assert retried.json()["code"] == "invalid_state_transition"
    assert api.get(f"/v1/agents/{agent_id}").json()["status"] == "draft"


def test_a_body_that_fails_validation_does_not_use_up_the_key(api) -> None:
    bad = _post(api, "/v1/agents", "validate-first", {"name": 5})
    assert bad.status_code == 422
    good = _post(api, "/v1/agents", "validate-first", {"name": "fine"})
    assert good.status_code == 201, good.text
    assert REPLAYED not in good.headers


def test_requests_without_a_key_are_not_deduplicated(api) -> None:
    for _ in range(2):
        assert api.post("/v1/agents", json={"name": "twin"}).status_code == 201
    assert len(_agents(api)) == 2


# expiry and races need their own core ------------------------------------------------


@pytest.fixture
def short_ttl_core(tmp_path: Path) -> Iterator[AgentCore]:
    core = AgentCore.open(
        tmp_path / "idem.db", idempotency_ttl=0.5, rate_limit_test=1e6, rate_limit_live=1e6
    )
    yield core
    core.close()


def _client(core: AgentCore, org: str = "acme") -> httpx.AsyncClient:
    core.create_organization(org)
    secret = core.keys.create(org, "test", ["read", "write"]).secret
    transport = httpx.ASGITransport(app=create_app(core))
    return httpx.AsyncClient(
        transport=transport, base_url="http://asgi", headers={"Authorization": f"Bearer {secret}"}
    )


@pytest.mark.slow
def test_the_record_expires_after_the_ttl(short_ttl_core: AgentCore) -> None:
    async def go() -> None:
        async with _client(short_ttl_core) as client:
            headers = {"Idempotency-Key": "ttl-key"}
            first = await client.post("/v1/agents", json={"name": "T"}, headers=headers)
            replay = await client.post("/v1/agents", json={"name": "T"}, headers=headers)
            assert replay.headers.get(REPLAYED) == "true"
            assert replay.json()["id"] == first.json()["id"]
            await asyncio.sleep(0.7)
            fresh = await client.post("/v1/agents", json={"name": "T"}, headers=headers)
            assert fresh.status_code == 201
            assert REPLAYED not in fresh.headers
            assert fresh.json()["id"] != first.json()["id"]
            # the new record is live again, and holds the new response
            again = await client.post("/v1/agents", json={"name": "T"}, headers=headers)
            assert again.json()["id"] == fresh.json()["id"]
            await asyncio.sleep(0.7)
            other = await client.post("/v1/agents", json={"name": "U"}, headers=headers)
            assert other.status_code == 201, other.text  # expired: another body is fine
            listed = (await client.get("/v1/agents")).json()["agents"]
            assert len(listed) == 3

    asyncio.run(go())


@pytest.mark.slow
def test_concurrent_duplicates_run_once(core: AgentCore, keys) -> None:
    secret = keys.make().secret
    threads_n = 10
    barrier = threading.Barrier(threads_n, timeout=120)  # only guards a hang
    results: list[httpx.Response | BaseException] = []
    lock = threading.Lock()
    body = {"name": "Raced", "system_prompt": "only once"}

    with ServerThread(create_app(core)) as server:

        def send() -> None:
            try:
                with httpx.Client(base_url=server.url, timeout=30, verify=False) as client:
                    barrier.wait()
                    response = client.post(
                        "/v1/agents",
                        json=body,
                        headers={"Authorization": f"Bearer {secret}", "Idempotency-Key": "race"},
                    )
                outcome: httpx.Response | BaseException = response
            except BaseException as exc:  # reported below
                outcome = exc
            with lock:
                results.append(outcome)

        threads = [threading.Thread(target=send) for _ in range(threads_n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not any(thread.is_alive() for thread in threads)  # every request answered
        listed = httpx.get(
            f"{server.url}/v1/agents",
            headers={"Authorization": f"Bearer {secret}"},
            params={"limit": 100},
        ).json()["agents"]

    assert len(results) == threads_n
    responses = [r for r in results if isinstance(r, httpx.Response)]
    assert len(responses) == threads_n, [r for r in results if not isinstance(r, httpx.Response)]
    assert {r.status_code for r in responses} == {201}, [r.text for r in responses]
    ids = {r.json()["id"] for r in responses}
    assert len(ids) == 1
    assert [a["id"] for a in listed] == list(ids)
    replayed = [r for r in responses if r.headers.get(REPLAYED) == "true"]
    assert len(replayed) == threads_n - 1


# a key whose holder died, a deleted conversation's answer, a replayed problem ----------

_CRASHER = r"""
import os, sys
from agentcore import AgentCore
core = AgentCore.open(
    sys.argv[1], start_workers=False, entry_points=False, idempotency_lease=float(sys.argv[4])
)
org = core.store.get_organization_by_name("acme")
claim = core.idempotency.claim(org.id, "test", sys.argv[2], sys.argv[3], wait_until=1e18)
print(claim.action, flush=True)
os._exit(9)  # killed mid-request (OOM, SIGKILL): no result kept, the key not released
"""


@pytest.mark.slow
@pytest.mark.both_stores
def test_a_key_held_by_a_worker_that_died_is_run_again_after_its_lease(store_url: str) -> None:
    lease = 1.0  # the dead worker's: nobody renews its claim, which lapses a lease after it
    core = AgentCore.open(
        store_url, idempotency_lease=lease, request_deadline=0.5, rate_limit_test=1e6
    )
    try:
        core.create_organization("acme")
        secret = core.keys.create("acme", "test").secret
        body = {"name": "Support bot"}
        print_ = fingerprint(
            "POST", "/v1/agents", AgentCreate.model_validate(body).model_dump_json().encode()
        )
        crashed = subprocess.run(
            [sys.executable, "-c", _CRASHER, store_url, "crashed-1", print_, str(lease)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert crashed.stdout.strip() == "run", crashed.stderr
        claimed = time.monotonic()
        with (
            ServerThread(create_app(core)) as server,
            httpx.Client(
                base_url=server.url, headers={"Authorization": f"Bearer {secret}"}, timeout=30
            ) as http,
        ):
            early = _post(http, "/v1/agents", "crashed-1", body)  # within the lease: it waits
            if time.monotonic() - claimed < lease - 0.1:
                assert_problem(early, 409, "idempotency_request_in_progress")
            time.sleep(max(0.0, claimed + lease - time.monotonic()))
            retried = _post(http, "/v1/agents", "crashed-1", body)
            replayed = _post(http, "/v1/agents", "crashed-1", body)
            listed = http.get("/v1/agents").json()["agents"]
        ran = retried if retried.status_code == 201 and REPLAYED not in retried.headers else early
        assert ran.status_code == 201, (early.text, retried.text)
        assert replayed.headers.get(REPLAYED) == "true"
        assert replayed.json()["id"] == ran.json()["id"]
        assert [a["id"] for a in listed] == [ran.json()["id"]]  # it ran once
    finally:
        core.close()


def _idempotency_rows(core: AgentCore, key: str) -> int:
    with core.store.db.read() as conn:
        row = conn.execute("SELECT count(*) AS n FROM idempotency_keys WHERE key = ?", [key])
        return int(row.fetchone()["n"])


def test_deleting_a_conversation_deletes_the_answers_kept_for_its_keys(api, core) -> None:
    agent = api.post("/v1/agents", json={"name": "HR"}).json()["id"]
    body = {"agentId": agent, "message": "When does the office open?"}
    first = _post(api, "/v1/chat/message", "ask-1", body)
    assert first.status_code == 200, first.text
    conversation = first.json()["conversationId"]
    assert _post(api, "/v1/chat/message", "ask-1", body).headers.get(REPLAYED) == "true"
    assert api.delete(f"/v1/conversations/{conversation}").status_code == 200
    assert _idempotency_rows(core, "ask-1") == 0  # its answer is gone from the store too
    again = _post(api, "/v1/chat/message", "ask-1", body)
    assert again.status_code == 200, again.text
    assert REPLAYED not in again.headers  # run afresh: a new conversation
    assert again.json()["conversationId"] != conversation
    # a key whose result holds no conversation is kept
    assert _post(api, "/v1/agents", "make-2", {"name": "Other"}).status_code == 201
    assert _idempotency_rows(core, "make-2") == 1


def test_a_replayed_problem_names_the_retrys_request_id(api) -> None:
    first = _post(api, "/v1/agents/agt_missing/deploy", "deploy-missing")
    again = _post(api, "/v1/agents/agt_missing/deploy", "deploy-missing")
    assert_problem(again, 404, "resource_missing")
    assert again.headers[REPLAYED] == "true"
    assert again.json()["request_id"] == again.headers["request-id"]
    assert again.json()["request_id"] != first.json()["request_id"]


def test_a_replayed_503_keeps_its_retry_after() -> None:
    kept = error_result(ServiceUnavailable("The database is down.", retry_after=2.0))
    replayed = replay_response(kept, "req_retry")
    assert replayed.status_code == 503
    assert replayed.headers["retry-after"] == "2"
    assert replayed.headers[REPLAYED] == "true"
    document = json.loads(bytes(replayed.body))
    assert document["request_id"] == "req_retry"
    assert "_retry_after" not in document
