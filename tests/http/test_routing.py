"""Routing through Starlette's public parts (a ``Route`` per path, ``ApiMiddleware``,
an exception handler for the router's 404 and 405): every kind of route answers with
its headers, and what no route matches is a problem, over a real uvicorn server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import ServerThread
from helpers import assert_problem
from starlette.applications import Starlette
from starlette.routing import Mount

from agentcore import AgentCore
from agentcore_starlette import create_app


@pytest.fixture
def served(tmp_path: Path) -> Iterator[dict[str, Any]]:
    core = AgentCore.open(tmp_path / "d.db", rate_limit_test=1e6, start_workers=False)
    core.create_organization("acme")
    secret = core.keys.create("acme", "test", ["read", "write"]).secret
    host = Starlette(routes=[Mount("/api", app=create_app(core))])
    with (
        ServerThread(create_app(core)) as server,
        ServerThread(host) as mounted,
        httpx.Client(headers={"Authorization": f"Bearer {secret}"}, timeout=30) as client,
    ):
        yield {"client": client, "url": server.url, "mounted": mounted.url + "/api"}
    core.close()


def test_every_kind_of_route_answers_with_its_headers(served: dict[str, Any]) -> None:
    client, url = served["client"], served["url"]
    created = client.post(f"{url}/v1/agents", json={"name": "A", "role": "r"})
    assert created.status_code == 201, created.text
    agent = created.json()["id"]
    for response in (
        client.get(f"{url}/v1/agents"),
        client.get(f"{url}/v1/agents/{agent}"),
        client.post(f"{url}/v1/agents/{agent}/deploy"),
        client.get(f"{url}/v1/auth/verify"),  # runs inline, not on a thread
    ):
        assert response.status_code == 200, response.text
        assert response.headers["request-id"].startswith("req_")
        assert response.headers["ratelimit"].startswith('"per-key";r=')
        assert response.headers["ratelimit-policy"] == '"per-key";q=1000000;w=1'
        assert response.headers["content-type"] == "application/json"
    assert client.get(f"{url}/v1/agents/{agent}").json()["status"] == "deployed"
    head = client.head(f"{url}/v1/agents/{agent}")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["request-id"].startswith("req_")


def test_what_the_table_does_not_match_is_the_routers_answer(served: dict[str, Any]) -> None:
    client, url = served["client"], served["url"]
    wrong = client.put(f"{url}/v1/agents")
    assert_problem(wrong, 405, "method_not_allowed")
    assert set(wrong.headers["allow"].split(", ")) == {"GET", "HEAD", "POST"}
    assert_problem(client.get(f"{url}/v1/knowledge/search"), 405, "method_not_allowed")
    assert_problem(client.get(f"{url}/v1/nowhere"), 404, "route_not_found")
    assert_problem(client.get(f"{url}/v1/agents/a%2Fb"), 404, "route_not_found")
    slash = client.get(f"{url}/v1/agents/")
    assert slash.status_code == 307 and slash.headers["location"].endswith("/v1/agents")
    # a static path shadows no parameterised one: GET on /webhooks/subscribe is a lookup
    assert_problem(client.get(f"{url}/v1/webhooks/subscribe"), 404, "resource_missing")
    assert client.get(f"{url}/v1/openapi.json").json()["openapi"].startswith("3.")


def test_errors_of_a_directly_called_route_are_problems(served: dict[str, Any]) -> None:
    client, url = served["client"], served["url"]
    assert_problem(client.get(f"{url}/v1/agents/agt_missing"), 404, "resource_missing")
    assert_problem(client.get(f"{url}/v1/agents/a%00b"), 404, "resource_missing")
    bad = client.post(f"{url}/v1/knowledge/search", content=b"{", headers=_json())
    assert_problem(bad, 400, "invalid_json")
    anonymous = httpx.get(f"{url}/v1/agents", timeout=30)
    assert_problem(anonymous, 401, "missing_api_key")
    assert anonymous.headers["www-authenticate"] == 'Bearer realm="agentcore"'


def test_a_mounted_api_dispatches_below_its_prefix(served: dict[str, Any]) -> None:
    client, base = served["client"], served["mounted"]
    assert client.get(f"{base}/v1/auth/verify").json()["organization"] == "acme"
    created = client.post(f"{base}/v1/agents", json={"name": "B", "role": "r"})
    assert created.status_code == 201, created.text
    assert client.get(f"{base}/v1/agents/{created.json()['id']}").json()["name"] == "B"
    assert_problem(client.get(f"{base}/v1/nowhere"), 404, "route_not_found")


def _json() -> dict[str, str]:
    return {"Content-Type": "application/json"}
