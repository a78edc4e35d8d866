"""A request past its deadline: completed → its replay is the real result; stopped (a chat
turn, ingestion) → key released.

Never a stored resource behind a cached 504.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pytest
from conftest import served_client
from helpers import assert_problem, wait_for

import agentcore
from agentcore import AgentCore
from agentcore.chat_models import ChatRequest, ChatResult
from agentcore.plugins.hashing_embedder import HashingEmbedder
from agentcore.schema import Agent
from agentcore_starlette import create_app
from agentcore_starlette.dispatch import HANDLER_THREADS
from agentcore_starlette.routes import ROUTES
from agentcore_starlette.routing import ApiRoute, Call

pytestmark = pytest.mark.timeout(120)

DEADLINE = 1.0


class SlowOnce:
    """An embedder and chat model plugin whose first call outlasts the request deadline."""

    name = "slow-once"
    dimension = 1024

    def __init__(self) -> None:
        self.inner = HashingEmbedder()
        self.calls = 0
        self.first_done = threading.Event()

    def _maybe_sleep(self) -> None:
        self.calls += 1
        if self.calls == 1:
            time.sleep(DEADLINE * 2.5)
            self.first_done.set()

    def embed(self, texts: Sequence[str], kind: str = "passage") -> npt.NDArray[np.float32]:
        if kind == "passage":
            self._maybe_sleep()
        return self.inner.embed(texts, kind="passage")

    def complete(self, request: ChatRequest) -> ChatResult:
        self._maybe_sleep()
        return ChatResult(text="Thirty days of leave.")

    @agentcore.hookimpl
    def agentcore_register_embedders(self, register: Any, settings: Any) -> None:
        register(self)

    @agentcore.hookimpl
    def agentcore_register_chat_models(self, register: Any, settings: Any) -> None:
        register(self)


@pytest.fixture
def slow() -> SlowOnce:
    return SlowOnce()


@pytest.fixture
def client(tmp_path: Path, slow: SlowOnce) -> Iterator[httpx.Client]:
    core = AgentCore.open(
        tmp_path / "a.db", embedder=slow.name, plugins=[slow], rate_limit_test=1e6
    )
    core.create_organization("acme")
    key = core.keys.create("acme", "test", ["read", "write"]).secret
    app = create_app(core, request_deadline=DEADLINE)
    with served_client(app, key) as http:
        yield http
    core.close()


def retry(client: httpx.Client, path: str, key: str, **kwargs: Any) -> httpx.Response:
    """Send again with the same Idempotency-Key while the first is still settling (409)."""
    give_up = time.monotonic() + 30
    while True:
        response = client.post(path, headers={"Idempotency-Key": key}, **kwargs)
        if response.status_code != 409 or time.monotonic() > give_up:
            return response
        assert response.json()["code"] == "idempotency_request_in_progress"
        time.sleep(0.1)


@pytest.mark.slow
def test_work_stopped_at_the_deadline_releases_the_key(
    client: httpx.Client, slow: SlowOnce
) -> None:
    body = {"source": "policy.txt", "text": "Employees get thirty days of leave."}
    first = client.post(
        "/v1/knowledge/documents", json=body, headers={"Idempotency-Key": "upload-1"}
    )
    assert_problem(first, 504, "deadline_exceeded")
    assert slow.first_done.wait(60)

    second = retry(client, "/v1/knowledge/documents", "upload-1", json=body)
    assert second.status_code == 201, second.text
    assert "idempotent-replayed" not in second.headers  # it ran afresh
    documents = client.get("/v1/knowledge/documents").json()["documents"]
    assert [d["id"] for d in documents] == [second.json()["id"]]  # nothing behind the 504

    third = retry(client, "/v1/knowledge/documents", "upload-1", json=body)
    assert third.status_code == 201 and third.headers["idempotent-replayed"] == "true"
    assert third.json() == second.json()


def late_agent_route(slow: SlowOnce) -> ApiRoute:
    def create_late(call: Call) -> Agent:
        """Work that cannot be stopped: it outlasts the deadline, then commits."""
        slow.calls += 1
        time.sleep(DEADLINE * 2.5)
        return call.workspace.agents.create(name="Late")

    return ApiRoute(
        method="POST",
        path="/test/late-agent",
        handler=create_late,
        response=Agent,
        summary="Create an agent late",
        scope="write",
        tag="test",
        status_code=201,
    )


@pytest.mark.slow
def test_work_that_completes_after_the_deadline_is_replayed(tmp_path: Path, slow: SlowOnce) -> None:
    with AgentCore.open(tmp_path / "late.db", rate_limit_test=1e6) as core:
        core.create_organization("acme")
        key = core.keys.create("acme", "test", ["read", "write"]).secret
        app = create_app(core, routes=[*ROUTES, late_agent_route(slow)], request_deadline=DEADLINE)
        with served_client(app, key) as client:
            first = client.post("/v1/test/late-agent", headers={"Idempotency-Key": "late-1"})
            assert_problem(first, 504, "deadline_exceeded")
            replay = retry(client, "/v1/test/late-agent", "late-1")
            assert replay.status_code == 201, replay.text
            assert replay.headers["idempotent-replayed"] == "true"
            listed = client.get("/v1/agents").json()["agents"]
    assert [a["id"] for a in listed] == [replay.json()["id"]]
    assert slow.calls == 1  # it ran once: the replay is the late real result


@pytest.mark.slow
def test_a_chat_stopped_at_the_deadline_releases_the_key(
    client: httpx.Client, slow: SlowOnce
) -> None:
    agent = client.post(
        "/v1/agents", json={"name": "HR", "role": "support", "model": slow.name}
    ).json()
    message = {"agentId": agent["id"], "message": "How many days of leave?"}
    first = client.post("/v1/chat/message", json=message, headers={"Idempotency-Key": "chat-1"})
    assert_problem(first, 504, "deadline_exceeded")
    assert slow.first_done.wait(60)
    # the turn was stopped and stored nothing: the retry runs it again
    again = retry(client, "/v1/chat/message", "chat-1", json=message)
    assert again.status_code == 200, again.text
    assert "idempotent-replayed" not in again.headers
    assert again.json()["response"] == "Thirty days of leave."
    assert slow.calls == 2
    listed = client.get("/v1/conversations").json()["conversations"]
    assert [(c["id"], c["message_count"]) for c in listed] == [(again.json()["conversationId"], 2)]


@pytest.mark.slow
def test_without_a_key_the_stopped_work_stores_nothing(
    client: httpx.Client, slow: SlowOnce
) -> None:
    body = {"source": "policy.txt", "text": "Employees get thirty days of leave."}
    assert client.post("/v1/knowledge/documents", json=body).status_code == 504
    assert slow.first_done.wait(60)
    # (before, the late work committed right after the slow embedder call returned)
    later = client.post("/v1/knowledge/documents", json={"source": "b.txt", "text": "Later."})
    assert later.status_code == 201
    sources = [d["source"] for d in client.get("/v1/knowledge/documents").json()["documents"]]
    assert sources == ["b.txt"]


# a claim is a lease its process renews while the work runs -------------------------

LEASE = 0.6  # far shorter than the slow work (2.5 x DEADLINE): only renewal keeps it


def _chat_once(
    store_url: str, slow: SlowOnce, *, core_deadline: float, app_deadline: float
) -> tuple[AgentCore, Any]:
    core = AgentCore.open(
        store_url,
        embedder=slow.name,
        plugins=[slow],
        rate_limit_test=1e6,
        request_deadline=core_deadline,
        idempotency_lease=LEASE,
    )
    core.create_organization("acme")
    key = core.keys.create("acme", "test", ["read", "write"]).secret
    routes = [*ROUTES, late_agent_route(slow)]
    return core, served_client(create_app(core, routes=routes, request_deadline=app_deadline), key)


@pytest.mark.slow
@pytest.mark.both_stores
def test_work_settling_past_the_lease_is_not_run_again(store_url: str, slow: SlowOnce) -> None:
    # work that cannot be stopped outlives its deadline and its lease: its process renews
    # the claim while the work settles after the 504, so a retry waits for it and replays
    # its result (before, a retry two deadlines after the claim took the key over and
    # ran the work again)
    core, served = _chat_once(store_url, slow, core_deadline=DEADLINE, app_deadline=DEADLINE)
    try:
        with served as http:
            first = http.post("/v1/test/late-agent", headers={"Idempotency-Key": "c1"})
            assert_problem(first, 504, "deadline_exceeded")
            time.sleep(DEADLINE * 1.1)  # past the lease, and past two deadlines
            again = retry(http, "/v1/test/late-agent", "c1")
            assert again.status_code == 201, again.text
            assert again.headers["idempotent-replayed"] == "true"
            assert slow.calls == 1, "the work ran twice under one Idempotency-Key"
            assert [a["id"] for a in http.get("/v1/agents").json()["agents"]] == [
                again.json()["id"]
            ]
    finally:
        core.close()


@pytest.mark.slow
@pytest.mark.both_stores
def test_a_duplicate_waits_for_work_within_the_apps_longer_deadline(
    store_url: str, slow: SlowOnce
) -> None:
    # the app's deadline (60 s) is longer than the core's (1 s) and the lease: the first
    # request answers in time (its work takes 2.5 s, however busy the machine) and its
    # claim is renewed, so the duplicate replays it (before, the lease was two of the
    # core's deadlines and the duplicate ran it again)
    core, served = _chat_once(store_url, slow, core_deadline=DEADLINE, app_deadline=60)
    try:
        with served as http:
            agent = http.post("/v1/agents", json={"name": "HR", "model": slow.name}).json()
            message = {"agentId": agent["id"], "message": "How many days of leave?"}
            answers: dict[str, httpx.Response] = {}

            def first() -> None:
                answers["first"] = http.post(
                    "/v1/chat/message", json=message, headers={"Idempotency-Key": "c1"}
                )

            thread = threading.Thread(target=first)
            thread.start()
            wait_for(lambda: slow.calls == 1)  # the first holds the key and runs the model
            duplicate = http.post(
                "/v1/chat/message", json=message, headers={"Idempotency-Key": "c1"}
            )
            thread.join()
            assert answers["first"].status_code == 200, answers["first"].text
            assert duplicate.status_code == 200, duplicate.text
            assert duplicate.headers["idempotent-replayed"] == "true"
            assert duplicate.json() == answers["first"].json()
            assert slow.calls == 1, "the duplicate took over a live request"
    finally:
        core.close()


@pytest.mark.slow
def test_a_handler_queued_past_its_deadline_is_not_started(tmp_path: Path) -> None:
    # every handler thread is busy: the chat waits in the queue past its deadline (a
    # 504); when a thread frees, its work is not started, so nothing runs unseen and
    # its key is released for the retry (before, the model was called then anyway)
    calls = SlowOnce()
    calls.calls = 1  # no sleeping: count the calls
    core = AgentCore.open(
        tmp_path / "a.db", embedder=calls.name, plugins=[calls], rate_limit_test=1e6
    )
    core.create_organization("acme")
    key = core.keys.create("acme", "test", ["read", "write"]).secret
    app = create_app(core, request_deadline=DEADLINE)
    pool = core.runtime.executor("agentcore-http", HANDLER_THREADS)  # the app's
    free = threading.Event()
    try:
        with served_client(app, key) as http:
            agent = http.post("/v1/agents", json={"name": "HR", "model": calls.name}).json()
            message = {"agentId": agent["id"], "message": "How many days of leave?"}
            busy = [pool.submit(free.wait, 30) for _ in range(HANDLER_THREADS)]
            first = http.post("/v1/chat/message", json=message, headers={"Idempotency-Key": "q"})
            assert_problem(first, 504, "deadline_exceeded")
            free.set()
            for done in busy:
                done.result(timeout=30)
            again = retry(http, "/v1/chat/message", "q", json=message)
            assert again.status_code == 200, again.text
            assert "idempotent-replayed" not in again.headers  # run afresh, once
            assert calls.calls == 2  # the retry's model call alone
            assert len(http.get("/v1/conversations").json()["conversations"]) == 1
    finally:
        free.set()
        core.close()
