"""Limits over HTTP: per-key rate limits, body/upload/depth/field limits, deadlines.

Each limit is configured small on its own core, so the test shows the exact code it
answers with; the rate limiter's refill arithmetic runs on a fake clock.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import assert_problem

import agentcore
from agentcore import AgentCore, RateLimited, Settings
from agentcore._rate_limits import RateLimiter
from agentcore.chat_models import ChatRequest, ChatResult
from agentcore.events import Event
from agentcore_starlette import create_app
from agentcore_starlette.ratelimit import rate_limit_headers

# plumbing ----------------------------------------------------------------------------


class SleepyModel:
    """A chat-model plugin that sleeps ``delay`` seconds (or until ``release`` is set),
    then answers (or raises)."""

    def __init__(self, name: str, delay: float = 0.0, error: Exception | None = None) -> None:
        self.name = name
        self.delay = delay
        self.error = error
        self.calls = 0
        self.release = threading.Event()
        self.done = threading.Event()

    def complete(self, request: ChatRequest) -> ChatResult:
        self.calls += 1
        try:
            self.release.wait(self.delay)
            if self.error is not None:
                raise self.error
            return ChatResult(text=f"echo: {request.message}")
        finally:
            self.done.set()


class ModelPlugin:
    """Registers chat models through the public hook, as a third-party plugin would."""

    def __init__(self, *models: Any) -> None:
        self.models = models

    @agentcore.hookimpl
    def agentcore_register_chat_models(
        self, register: Callable[[Any], None], settings: Any
    ) -> None:
        for model in self.models:
            register(model)


class Client:
    """Sends requests to one ASGI app with one key, all on one event loop per batch."""

    def __init__(self, app: Any, key: str | None) -> None:
        self.app = app
        self.key = key

    def batch(self, requests: list[tuple[str, str, dict[str, Any]]]) -> list[httpx.Response]:
        async def go() -> list[httpx.Response]:
            transport = httpx.ASGITransport(app=self.app)
            headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
            async with httpx.AsyncClient(
                transport=transport, base_url="http://asgi", headers=headers, timeout=30
            ) as client:
                out = []
                for method, path, kwargs in requests:
                    response = await client.request(method, path, **kwargs)
                    await response.aread()
                    out.append(response)
                return out

        return asyncio.run(go())

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return self.batch([(method, path, kwargs)])[0]

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", path, **kwargs)


@pytest.fixture
def open_core(tmp_path: Path) -> Iterator[Callable[..., AgentCore]]:
    """Opens cores on files under tmp_path with the given settings; closes them after."""
    opened: list[AgentCore] = []

    def make(*, plugins: tuple[Any, ...] = (), **settings: Any) -> AgentCore:
        settings.setdefault("webhook_allowed_networks", "127.0.0.0/8")
        core = AgentCore.open(tmp_path / f"limits{len(opened)}.db", plugins=plugins, **settings)
        opened.append(core)
        return core

    yield make
    for core in opened:
        core.close()


def key_for(core: AgentCore, org: str = "acme", env: str = "test") -> str:
    core.create_organization(org)
    return core.keys.create(org, env, ["read", "write"]).secret


def chat_setup(core: AgentCore, model: str, **app_settings: Any) -> tuple[Client, str]:
    """A client (acme/test) and a deployed agent that uses ``model``."""
    client = Client(create_app(core, **app_settings), key_for(core))
    created = client.post("/v1/agents", json={"name": "limits", "model": model})
    assert created.status_code == 201, created.text
    agent_id = created.json()["id"]
    deployed = client.post(f"/v1/agents/{agent_id}/deploy")
    assert deployed.status_code == 200, deployed.text
    return client, agent_id


def nested(depth: int) -> dict[str, Any]:
    """An AgentCreate body whose JSON nesting is exactly ``depth`` levels (``depth`` >= 2)."""
    value: Any = {}
    for _ in range(depth - 2):
        value = {"k": value}
    return {"name": value}


# rate limits over HTTP -----------------------------------------------------------------

_POLICY = re.compile(r'^"per-key";q=(\d+);w=1$')
_STATE = re.compile(r'^"per-key";r=(\d+);t=(\d+)$')


def test_sixth_quick_request_is_rate_limited_with_headers(open_core) -> None:
    core = open_core(rate_limit_test=5, rate_limit_live=1000)
    client = Client(create_app(core), key_for(core))
    responses = client.batch([("GET", "/v1/auth/verify", {})] * 6)
    assert [r.status_code for r in responses] == [200] * 5 + [429], [r.text for r in responses]
    remaining = []
    for response in responses[:5]:
        assert response.headers["ratelimit-policy"] == '"per-key";q=5;w=1'
        state = _STATE.match(response.headers["ratelimit"])
        assert state, response.headers["ratelimit"]
        remaining.append(int(state.group(1)))
        assert "retry-after" not in response.headers
    assert remaining == [4, 3, 2, 1, 0]
    refused = responses[5]
    assert_problem(refused, 429, "rate_limited")
    assert refused.headers["ratelimit-policy"] == '"per-key";q=5;w=1'
    assert _STATE.match(refused.headers["ratelimit"]).group(1) == "0"  # type: ignore[union-attr]
    assert int(refused.headers["retry-after"]) >= 1


def test_rate_limit_applies_before_the_handler_runs(open_core) -> None:
    core = open_core(rate_limit_test=2, rate_limit_live=1000)
    client = Client(create_app(core), key_for(core))
    body = {"name": "counted"}
    responses = client.batch([("POST", "/v1/agents", {"json": body})] * 4)
    assert [r.status_code for r in responses] == [201, 201, 429, 429]
    ws = core.workspace("acme", "test")
    assert len(ws.agents.list().agents) == 2  # refused requests created nothing


def test_a_second_key_of_the_same_org_has_its_own_bucket(open_core) -> None:
    core = open_core(rate_limit_test=5, rate_limit_live=1000)
    app = create_app(core)
    first, second = Client(app, key_for(core)), Client(app, key_for(core))
    assert [r.status_code for r in first.batch([("GET", "/v1/auth/verify", {})] * 6)][-1] == 429
    fresh = second.batch([("GET", "/v1/auth/verify", {})] * 5)
    assert [r.status_code for r in fresh] == [200] * 5
    assert _STATE.match(fresh[0].headers["ratelimit"]).group(1) == "4"  # type: ignore[union-attr]


def test_live_keys_use_the_live_rate(open_core) -> None:
    core = open_core(rate_limit_test=1000, rate_limit_live=3)
    app = create_app(core)
    live = Client(app, key_for(core, env="live"))
    responses = live.batch([("GET", "/v1/auth/verify", {})] * 4)
    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    assert responses[0].headers["ratelimit-policy"] == '"per-key";q=3;w=1'
    test = Client(app, key_for(core, env="test"))
    response = test.get("/v1/auth/verify")
    assert response.status_code == 200
    assert response.headers["ratelimit-policy"] == '"per-key";q=1000;w=1'


def test_unauthenticated_requests_do_not_spend_a_keys_tokens(open_core) -> None:
    core = open_core(rate_limit_test=2, rate_limit_live=1000)
    app = create_app(core)
    anonymous = Client(app, None).batch([("GET", "/v1/auth/verify", {})] * 5)
    assert {r.status_code for r in anonymous} == {401}
    assert [
        r.status_code
        for r in Client(app, key_for(core)).batch([("GET", "/v1/auth/verify", {})] * 2)
    ] == [200, 200]


# rate limiter arithmetic on a fake clock ----------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_bucket_refills_at_the_configured_rate() -> None:
    clock = FakeClock()
    limiter = RateLimiter(Settings(rate_limit_test=5, rate_limit_live=50), clock=clock)
    decisions = [limiter.check("key_a", "test") for _ in range(6)]
    assert [d.allowed for d in decisions] == [True] * 5 + [False]
    assert [d.remaining for d in decisions] == [4, 3, 2, 1, 0, 0]
    assert decisions[5].retry_after == pytest.approx(0.2)
    assert rate_limit_headers(decisions[5])["Retry-After"] == "1"
    # 0.1 s gives half a token: still refused, and the wait shrinks accordingly
    clock.now += 0.1
    half = limiter.check("key_a", "test")
    assert not half.allowed
    assert half.retry_after == pytest.approx(0.1)
    # 0.1 s more completes the token: exactly one request passes
    clock.now += 0.1
    assert limiter.check("key_a", "test").allowed
    assert not limiter.check("key_a", "test").allowed
    # a long pause refills only up to the burst (= the rate), not beyond
    clock.now += 60
    after_pause = [limiter.check("key_a", "test").allowed for _ in range(6)]
    assert after_pause == [True] * 5 + [False]


def test_buckets_are_independent_and_live_uses_its_own_rate() -> None:
    clock = FakeClock()
    limiter = RateLimiter(Settings(rate_limit_test=2, rate_limit_live=4), clock=clock)
    assert [limiter.check("a", "test").allowed for _ in range(3)] == [True, True, False]
    assert [limiter.check("b", "test").allowed for _ in range(3)] == [True, True, False]
    live = [limiter.check("c", "live") for _ in range(5)]
    assert [d.allowed for d in live] == [True] * 4 + [False]
    assert live[0].limit == 4
    assert rate_limit_headers(live[0])["RateLimit-Policy"] == '"per-key";q=4;w=1'
    assert rate_limit_headers(live[0])["RateLimit"] == '"per-key";r=3;t=1'


def test_local_buckets_full_again_are_dropped_but_drained_ones_are_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentcore import _rate_limits as rate_limits

    monkeypatch.setattr(rate_limits, "SWEEP_BUCKETS", 100)
    clock = FakeClock()
    # the longest refill: a live key at 0.5/s is full again 2 s after its last take
    limiter = RateLimiter(Settings(rate_limit_test=2, rate_limit_live=0.5), clock=clock)
    for n in range(98):  # keys of many tenants, each used once
        assert limiter.check(f"key_{n}", "test").allowed
    clock.now += 1.0
    assert [limiter.check("drained", "live").allowed for _ in range(2)] == [True, False]
    assert len(limiter._buckets) == 99
    clock.now += 1.5  # the 98 are full again; drained is not (0.75 of its token back)
    assert limiter.check("other", "test").allowed  # the 100th bucket: a sweep
    assert set(limiter._buckets) == {"drained", "other"}
    assert not limiter.check("drained", "live").allowed  # its own state survived
    clock.now += 2.0
    assert limiter.check("drained", "live").allowed
    assert [limiter.check("key_0", "test").allowed for _ in range(3)] == [True, True, False]


def test_enforce_raises_429_carrying_the_facts() -> None:
    clock = FakeClock()
    limiter = RateLimiter(Settings(rate_limit_test=1), clock=clock)
    allowed = limiter.enforce("k", "test")
    assert (allowed.allowed, allowed.limit, allowed.remaining) == (True, 1, 0)
    headers = rate_limit_headers(allowed)
    assert headers["RateLimit-Policy"] == '"per-key";q=1;w=1'
    assert "Retry-After" not in headers
    with pytest.raises(RateLimited) as caught:
        limiter.enforce("k", "test")
    assert caught.value.status == 429
    assert caught.value.code == "rate_limited"
    assert not hasattr(caught.value, "headers")  # facts only: the adapter writes headers
    assert caught.value.retry_after == pytest.approx(1.0)
    assert caught.value.decision is not None
    refused = rate_limit_headers(caught.value.decision)
    assert refused["Retry-After"] == "1"
    assert refused["RateLimit"] == '"per-key";r=0;t=1'
    clock.now += 1.0
    limiter.enforce("k", "test")  # refilled


# body, upload and JSON-depth limits --------------------------------------------------


def test_json_body_over_the_limit_is_413(open_core) -> None:
    core = open_core()
    client = Client(create_app(core, max_body_bytes=1024), key_for(core))
    big = {"name": "big", "system_prompt": "x" * 2000}
    assert_problem(client.post("/v1/agents", json=big), 413, "body_too_large")

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted while streaming
        body = json.dumps(big).encode()
        for start in range(0, len(body), 256):
            yield body[start : start + 256]

    streamed = client.post(
        "/v1/agents", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert_problem(streamed, 413, "body_too_large")
    fits = client.post("/v1/agents", json={"name": "small", "system_prompt": "x" * 900})
    assert fits.status_code == 201, fits.text
    assert [a["name"] for a in client.get("/v1/agents").json()["agents"]] == ["small"]


def test_declared_content_length_over_the_limit_is_refused_unread(open_core) -> None:
    core = open_core()
    client = Client(create_app(core, max_body_bytes=1024), key_for(core))
    response = client.post(
        "/v1/knowledge/search",
        content=b"{}" + b" " * 5000,
        headers={"Content-Type": "application/json"},
    )
    assert_problem(response, 413, "body_too_large")


def test_upload_limits(open_core) -> None:
    core = open_core(max_upload_bytes=1000)
    client = Client(create_app(core), key_for(core))

    def upload(size: int) -> httpx.Response:
        data = (b"word " * (size // 5 + 1))[:size]
        return client.post("/v1/knowledge/documents", files={"file": ("a.txt", data, "text/plain")})

    assert upload(900).status_code == 201
    assert_problem(upload(1500), 413, "file_too_large", param="file")
    assert_problem(upload(200_000), 413, "body_too_large")  # refused while reading
    text = client.post("/v1/knowledge/documents", json={"source": "t", "text": "y " * 1000})
    assert_problem(text, 413, "file_too_large", param="text")
    listed = client.get("/v1/knowledge/documents").json()["documents"]
    assert [d["bytes"] for d in listed] == [900]


def test_json_nested_too_deep_is_400(open_core) -> None:
    core = open_core()
    client = Client(create_app(core, max_json_depth=6), key_for(core))
    ok = client.post("/v1/agents", json=nested(6))
    assert ok.status_code == 422, ok.text  # depth passed; the (odd) name is then invalid
    assert_problem(client.post("/v1/agents", json=nested(7)), 400, "json_too_deep")
    default = Client(create_app(core), client.key)
    assert_problem(default.post("/v1/agents", json=nested(33)), 400, "json_too_deep")


def test_pathologically_deep_json_is_400_not_500(open_core) -> None:
    core = open_core()
    client = Client(create_app(core), key_for(core))
    depth = 200_000  # deeper than Python's recursion limit, well under the body limit
    body = b'{"name":' + b"[" * depth + b"]" * depth + b"}"
    response = client.post("/v1/agents", content=body, headers={"Content-Type": "application/json"})
    assert_problem(response, 400, "json_too_deep")


def test_json_depth_counts_lists_too(open_core) -> None:
    core = open_core()
    client = Client(create_app(core, max_json_depth=3), key_for(core))
    response = client.post("/v1/knowledge/search", json={"query": [[["x"]]]})
    assert_problem(response, 400, "json_too_deep")


# field limits --------------------------------------------------------------------------


def test_message_length_limit(open_core) -> None:
    model = SleepyModel("echo")
    core = open_core(plugins=(ModelPlugin(model),), max_message_chars=50)
    client, agent_id = chat_setup(core, "echo")
    too_long = client.post("/v1/chat/message", json={"agentId": agent_id, "message": "m" * 51})
    assert_problem(too_long, 422, "message_too_long", param="message")
    assert model.calls == 0
    fits = client.post("/v1/chat/message", json={"agentId": agent_id, "message": "m" * 50})
    assert fits.status_code == 200, fits.text
    assert fits.json()["response"] == "echo: " + "m" * 50


def test_query_length_limit(open_core) -> None:
    core = open_core(max_query_chars=20)
    client = Client(create_app(core), key_for(core))
    too_long = client.post("/v1/knowledge/search", json={"query": "q" * 21})
    assert_problem(too_long, 422, "query_too_long", param="query")
    fits = client.post("/v1/knowledge/search", json={"query": "q" * 20})
    assert fits.status_code == 200, fits.text


def test_top_k_range(open_core) -> None:
    core = open_core()
    client = Client(create_app(core), key_for(core))
    client.post("/v1/knowledge/documents", json={"source": "s", "text": "alpha beta gamma"})
    zero = client.post("/v1/knowledge/search", json={"query": "alpha", "top_k": 0})
    assert_problem(zero, 422, "top_k_out_of_range", param="top_k")
    over = client.post("/v1/knowledge/search", json={"query": "alpha", "top_k": 101})
    assert_problem(over, 422, "top_k_out_of_range", param="top_k")
    for k in (1, 100):
        ok = client.post("/v1/knowledge/search", json={"query": "alpha", "top_k": k})
        assert ok.status_code == 200, ok.text
        assert len(ok.json()["results"]) == 1


def test_top_k_maximum_is_configurable(open_core) -> None:
    core = open_core(max_top_k=3, default_top_k=2)
    client = Client(create_app(core), key_for(core))
    over = client.post("/v1/knowledge/search", json={"query": "alpha", "top_k": 4})
    assert_problem(over, 422, "top_k_out_of_range", param="top_k")
    assert client.post("/v1/knowledge/search", json={"query": "a", "top_k": 3}).status_code == 200


@pytest.mark.parametrize("path", ["/v1/agents", "/v1/knowledge/documents", "/v1/webhooks"])
def test_list_page_size_range(open_core, path: str) -> None:
    core = open_core()
    client = Client(create_app(core), key_for(core))
    for bad in (0, 101, -1):
        assert_problem(
            client.get(path, params={"limit": bad}), 422, "limit_out_of_range", param="limit"
        )
    for good in (1, 100):
        assert client.get(path, params={"limit": good}).status_code == 200


def test_page_size_maximum_is_configurable(open_core) -> None:
    core = open_core(max_page_size=5, default_page_size=5)
    client = Client(create_app(core), key_for(core))
    bad = client.get("/v1/agents", params={"limit": 6})
    assert_problem(bad, 422, "limit_out_of_range", param="limit")
    assert client.get("/v1/agents", params={"limit": 5}).status_code == 200


# deadlines and model time-outs --------------------------------------------------------


@pytest.mark.slow
def test_request_deadline_is_504_deadline_exceeded(open_core) -> None:
    model = SleepyModel("sleepy", delay=60)  # answers when released
    core = open_core(plugins=(ModelPlugin(model),), request_deadline=2, model_timeout=120)
    events: list[Event] = []
    core.events.subscribe("agent.action", events.append)
    client, agent_id = chat_setup(core, "sleepy")
    started = time.monotonic()
    response = client.post("/v1/chat/message", json={"agentId": agent_id, "message": "hello"})
    took = time.monotonic() - started
    assert_problem(response, 504, "deadline_exceeded")
    # answered at the deadline, not when the model finished: it has not yet
    assert took > 1.9 and model.calls == 1 and not model.done.is_set(), took
    # the turn was stopped: the model's late answer is neither stored nor announced
    model.release.set()
    assert model.done.wait(60)
    time.sleep(0.2)
    assert [e.data["action"] for e in events] == ["knowledge_lookup"]
    assert core.workspace("acme", "test").conversations.list().conversations == []


@pytest.mark.slow
def test_request_deadline_can_be_set_per_app(open_core) -> None:
    model = SleepyModel("sleepy", delay=60)  # answers when released
    core = open_core(plugins=(ModelPlugin(model),), model_timeout=120)
    events: list[Event] = []
    core.events.subscribe("agent.action", events.append)
    client, agent_id = chat_setup(core, "sleepy", request_deadline=2)
    response = client.post("/v1/chat/message", json={"agentId": agent_id, "message": "hello"})
    assert_problem(response, 504, "deadline_exceeded")
    assert model.calls == 1 and not model.done.is_set()  # the app's deadline, not the core's
    model.release.set()
    assert model.done.wait(60)
    time.sleep(0.2)
    assert "reply_sent" not in [e.data["action"] for e in events]


@pytest.mark.slow
def test_hung_model_is_504_provider_timeout_with_an_error_event(open_core) -> None:
    model = SleepyModel("hung", delay=60)  # past model_timeout plus the guard's slack
    core = open_core(plugins=(ModelPlugin(model),), model_timeout=0.3, request_deadline=120)
    errors: list[Event] = []
    core.events.subscribe("agent.error", errors.append)
    client, agent_id = chat_setup(core, "hung")
    response = client.post("/v1/chat/message", json={"agentId": agent_id, "message": "hello"})
    assert_problem(response, 504, "provider_timeout")
    assert not model.done.is_set()  # the guard gave up before the model returned
    assert [e.data["error"] for e in errors] == ["provider_timeout"]
    assert errors[0].data["agent_id"] == agent_id
    model.release.set()
    assert model.done.wait(60)


@pytest.mark.slow
def test_model_that_honours_its_timeout_is_504_provider_timeout(open_core) -> None:
    model = SleepyModel(
        "polite", delay=0.3, error=agentcore.ProviderTimeout("no answer within 0.3 s")
    )
    core = open_core(plugins=(ModelPlugin(model),), model_timeout=0.3)
    errors: list[Event] = []
    core.events.subscribe("agent.error", errors.append)
    client, agent_id = chat_setup(core, "polite")
    response = client.post("/v1/chat/message", json={"agentId": agent_id, "message": "hello"})
    assert_problem(response, 504, "provider_timeout")
    assert len(errors) == 1


def test_model_failure_is_502_provider_error(open_core) -> None:
    model = SleepyModel("broken", error=RuntimeError("boom with secret detail"))
    core = open_core(plugins=(ModelPlugin(model),))
    client, agent_id = chat_setup(core, "broken")
    response = client.post("/v1/chat/message", json={"agentId": agent_id, "message": "hello"})
    body = assert_problem(response, 502, "provider_error")
    assert "secret detail" not in json.dumps(body)


def test_fast_model_is_within_every_limit(open_core) -> None:
    # limits in seconds that a 50 ms model is well within on a busy machine too (taken
    # for milliseconds, they would fail it)
    model = SleepyModel("quick", delay=0.05)
    core = open_core(plugins=(ModelPlugin(model),), model_timeout=10, request_deadline=20)
    client, agent_id = chat_setup(core, "quick")
    response = client.post("/v1/chat/message", json={"agentId": agent_id, "message": "hello"})
    assert response.status_code == 200, response.text
    assert response.json()["response"] == "echo: hello"


def test_a_rate_below_one_a_second_allows_one_request_per_interval() -> None:
    clock = FakeClock()
    limiter = RateLimiter(Settings(rate_limit_test=0.2), clock=clock)
    first, second = limiter.check("k", "test"), limiter.check("k", "test")
    assert first.allowed and not second.allowed
    assert second.retry_after == pytest.approx(5.0)
    headers = rate_limit_headers(second)
    assert headers["RateLimit-Policy"].endswith(";q=1;w=5") and headers["Retry-After"] == "5"
    clock.now += 4.9
    assert not limiter.check("k", "test").allowed
    clock.now += 0.1
    assert limiter.check("k", "test").allowed  # the burst is one: never two in a row
    clock.now += 60
    assert [limiter.check("k", "test").allowed for _ in range(2)] == [True, False]
