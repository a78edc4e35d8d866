"""Errors carry facts, never headers: ``problems.problem_headers`` alone turns them
into ``Retry-After``, ``Allow``, ``WWW-Authenticate`` and ``Connection``, and the
client reads those headers back into the same facts."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import ServerThread

import agentcore.errors as errors
from agentcore import AgentCore, Client
from agentcore.client import _error
from agentcore.errors import Decision
from agentcore_starlette import create_app
from agentcore_starlette.problems import problem_headers, problem_response

ERROR_CLASSES = [
    cls
    for _, cls in inspect.getmembers(errors, inspect.isclass)
    if issubclass(cls, errors.AgentCoreError)
]


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda cls: cls.__name__)
def test_no_error_has_headers(cls: type[errors.AgentCoreError]) -> None:
    error = cls("Something.")
    assert not hasattr(error, "headers")
    with pytest.raises(TypeError):
        cls("Something.", headers={"Retry-After": "1"})  # type: ignore[call-arg]


def test_each_fact_becomes_its_header() -> None:
    assert problem_headers(errors.AuthenticationError("No key.")) == {
        "WWW-Authenticate": 'Bearer realm="agentcore"'
    }
    allowed = errors.MethodNotAllowed("No.", allowed=["GET", "HEAD", "POST"])
    assert problem_headers(allowed) == {"Allow": "GET, HEAD, POST"}
    assert problem_headers(errors.MethodNotAllowed("No.")) == {}  # nothing known: no Allow
    assert problem_headers(errors.RateLimited("Slow.", retry_after=2.2)) == {"Retry-After": "3"}
    decision = Decision(allowed=False, limit=5, remaining=0, reset=0.4, retry_after=0.2)
    limited = problem_headers(errors.RateLimited("Slow.", decision=decision))
    assert limited["Retry-After"] == "1" and limited["RateLimit"] == '"per-key";r=0;t=1'
    assert problem_headers(errors.ServiceUnavailable("Down.", retry_after=2)) == {
        "Retry-After": "2"
    }
    assert problem_headers(errors.ServiceUnavailable("Down.")) == {}
    # the body was left unread: the connection closes rather than draining it
    unread = errors.PayloadTooLarge("Big.", code="body_too_large")
    assert problem_headers(unread) == {"Connection": "close"}
    stalled = errors.RequestTimeout("Slow body.", code="body_timeout")
    assert problem_headers(stalled) == {"Connection": "close"}
    assert problem_headers(errors.PayloadTooLarge("Big file.", code="file_too_large")) == {}
    response = problem_response(errors.ServiceUnavailable("Down.", retry_after=2), "req_1")
    assert response.headers["retry-after"] == "2" and response.headers["request-id"] == "req_1"


def _answer(status: int, headers: dict[str, str], code: str = "some_code") -> httpx.Response:
    problem = {"detail": "No.", "code": code, "request_id": "req_1", "status": status}
    request = httpx.Request("GET", "http://x/v1/agents")
    return httpx.Response(status, headers=headers, json=problem, request=request)


def test_the_client_reads_the_facts_back() -> None:
    limited = _error(_answer(429, {"Retry-After": "7"}))
    assert isinstance(limited, errors.RateLimited) and limited.retry_after == 7
    down = _error(_answer(503, {"Retry-After": "2"}))
    assert isinstance(down, errors.ServiceUnavailable) and down.retry_after == 2
    stopping = _error(_answer(503, {"Retry-After": "3"}, "server_shutting_down"))
    assert isinstance(stopping, errors.ShuttingDown) and stopping.retry_after == 3
    wrong = _error(_answer(405, {"Allow": "GET, HEAD, POST"}))
    assert isinstance(wrong, errors.MethodNotAllowed) and wrong.allowed == ("GET", "HEAD", "POST")
    assert _error(_answer(429, {})).retry_after is None  # no header: not known
    for status, cls in [
        (408, errors.RequestTimeout),
        (414, errors.UriTooLong),
        (431, errors.HeadersTooLarge),
    ]:
        error = _error(_answer(status, {}))
        assert type(error) is cls and error.code == "some_code"


@pytest.fixture
def slow_key_server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    with AgentCore.open(tmp_path / "r.db", rate_limit_test=0.5, start_workers=False) as core:
        core.create_organization("acme")
        secret = core.keys.create("acme", "test", ["read"]).secret
        with ServerThread(create_app(core)) as server:
            yield server.url, secret


def test_a_429_on_the_wire_is_a_rate_limited_error_with_its_wait(
    slow_key_server: tuple[str, str],
) -> None:
    url, secret = slow_key_server
    with Client(url, secret) as client:
        client.verify()
        with pytest.raises(errors.RateLimited) as caught:
            client.verify()
    assert caught.value.retry_after is not None and 1 <= caught.value.retry_after <= 2


# the head limits of the app itself, wherever it is served ------------------------------


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The API with small head limits, mounted at /api in a host app under uvicorn."""
    from starlette.applications import Starlette
    from starlette.routing import Mount

    with AgentCore.open(tmp_path / "h.db", rate_limit_test=1e6, start_workers=False) as core:
        core.create_organization("acme")
        secret = core.keys.create("acme", "test", ["read"]).secret
        api = create_app(core, max_url_bytes=512, max_header_bytes=2048)
        with ServerThread(Starlette(routes=[Mount("/api", app=api)])) as server:
            yield server.url + "/api", secret


def test_a_mounted_app_refuses_heads_over_its_limits(limited: tuple[str, str]) -> None:
    base, secret = limited
    auth = {"Authorization": f"Bearer {secret}"}
    path = "/v1/agents?starting_after="
    # the target counts from the host's root: "/api" is part of what the client sent
    room = 512 - len("/api" + path)
    assert httpx.get(base + path + "a" * room, headers=auth).status_code == 404  # no such agent
    too_long = httpx.get(base + path + "a" * (room + 1), headers=auth)
    assert too_long.status_code == 414 and too_long.json()["code"] == "uri_too_long"
    assert too_long.headers["request-id"] == too_long.json()["request_id"]
    # unknown routes too: the limits come before routing
    assert httpx.get(base + "/v1/" + "n" * 600, headers=auth).status_code == 414
    sizes = sum(len(name) + len(value) for name, value in auth.items()) + 200
    padding = {"X-Padding": "p" * (2048 - sizes)}
    assert httpx.get(base + "/v1/auth/verify", headers={**auth, **padding}).status_code == 200
    padding = {"X-Padding": "p" * 2048}
    too_big = httpx.get(base + "/v1/auth/verify", headers={**auth, **padding})
    assert too_big.status_code == 431 and too_big.json()["code"] == "headers_too_large"
