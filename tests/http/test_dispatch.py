"""The API's own routes dispatched in one lookup (``agentcore_starlette.dispatch``):
the same answers as Starlette's router gave, over a real uvicorn server on 127.0.0.1."""

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
from agentcore_starlette.dispatch import RouteTable, path_pattern, route_path


async def _one(request: Any) -> Any:
    raise AssertionError("never called")


async def _two(request: Any) -> Any:
    raise AssertionError("never called")


TABLE = RouteTable(
    {
        "/v1/agents": {"GET": _one, "POST": _two},
        "/v1/agents/{agent_id}": {"GET": _one, "DELETE": _two},
        "/v1/agents/{agent_id}/deploy": {"POST": _two},
    }
)


def scope(method: str, path: str, root_path: str = "") -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "root_path": root_path}


# the table by itself ------------------------------------------------------------------


def test_a_path_without_parameters_is_one_lookup() -> None:
    assert TABLE.match(scope("GET", "/v1/agents")) == (_one, {})
    assert TABLE.match(scope("POST", "/v1/agents")) == (_two, {})


def test_parameters_are_single_segments() -> None:
    assert TABLE.match(scope("DELETE", "/v1/agents/agt_1")) == (_two, {"agent_id": "agt_1"})
    assert TABLE.match(scope("POST", "/v1/agents/agt_1/deploy")) == (_two, {"agent_id": "agt_1"})
    assert TABLE.match(scope("GET", "/v1/agents/a/b")) is None  # a slash is no id
    assert TABLE.match(scope("GET", "/v1/agents/")) is None  # nor is nothing


def test_head_answers_with_get_and_other_methods_fall_through() -> None:
    assert TABLE.match(scope("HEAD", "/v1/agents")) == (_one, {})
    assert TABLE.match(scope("HEAD", "/v1/agents/x")) == (_one, {"agent_id": "x"})
    # not ours to answer: Starlette's router gives the 405 with its Allow header
    assert TABLE.match(scope("PUT", "/v1/agents")) is None
    assert TABLE.match(scope("GET", "/v1/agents/x/deploy")) is None
    assert TABLE.match(scope("GET", "/v1/nowhere")) is None
    assert TABLE.match(scope("GET", "/v1/agents.json")) is None


def test_a_mounted_app_matches_below_its_mount_point() -> None:
    assert TABLE.match(scope("GET", "/api/v1/agents", "/api")) == (_one, {})
    assert TABLE.match(scope("GET", "/api/v1/agents/x", "/api")) == (_one, {"agent_id": "x"})
    assert route_path(scope("GET", "/api", "/api")) == "/api"  # the mount point itself
    assert route_path(scope("GET", "/apiv1/agents", "/api")) == "/apiv1/agents"  # no boundary
    assert route_path(scope("GET", "/other/v1", "/api")) == "/other/v1"


def test_path_patterns_escape_the_literal_parts() -> None:
    pattern = path_pattern("/v1/a.b/{name}/c+d")
    assert pattern.fullmatch("/v1/a.b/x/c+d") is not None
    assert pattern.fullmatch("/v1/aXb/x/c+d") is None  # "." is not a wildcard
    assert pattern.fullmatch("/v1/a.b/x/ccd") is None  # "+" is not a repeat


# over HTTP: the answers Starlette's router gave ------------------------------------------


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
