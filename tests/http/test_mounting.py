"""Mounting the /v1 API inside a host Starlette app, over uvicorn and ASGI, with lifespan."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import ServerThread, assert_problem, relax_rate_limits
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from agentcore import AgentCore, hookimpl
from agentcore_starlette import create_app, lifespan_for


class Recorder:
    """A plugin that records the core's start and stop hooks."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    @hookimpl
    def agentcore_startup(self, core: AgentCore) -> None:
        self.calls.append("startup")

    @hookimpl
    def agentcore_shutdown(self, core: AgentCore) -> None:
        self.calls.append("shutdown")


async def health(request: Request) -> JSONResponse:
    return JSONResponse({"host": "ok"})


def host_app(core: AgentCore, *, lifespan: bool = True) -> Starlette:
    relax_rate_limits(core)
    return Starlette(
        routes=[Route("/health", health), Mount("/api", app=create_app(core))],
        lifespan=lifespan_for(core) if lifespan else None,
    )


class Client:
    """Same calls over a real server or the ASGI transport."""

    def __init__(self, app: Any, base_url: str | None, key: str) -> None:
        self.app, self.base_url, self.key = app, base_url, key

    def request(self, method: str, path: str, *, key: str | None = "", **kw: Any) -> httpx.Response:
        secret = self.key if key == "" else key
        headers = dict(kw.pop("headers", {}))
        if secret:
            headers["Authorization"] = f"Bearer {secret}"
        if self.base_url is not None:
            with httpx.Client(base_url=self.base_url, timeout=20, verify=False) as client:
                return client.request(method, path, headers=headers, **kw)

        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://host") as client:
                return await client.request(method, path, headers=headers, **kw)

        return asyncio.run(go())


def _exercise(client: Client) -> None:
    health_response = client.request("GET", "/health", key=None)
    assert health_response.status_code == 200
    assert health_response.json() == {"host": "ok"}

    verify = client.request("GET", "/api/v1/auth/verify")
    assert verify.status_code == 200, verify.text
    assert verify.json()["status"] == "authenticated"
    assert verify.json()["organization"] == "acme"
    assert verify.json()["scope"] == ["read", "write"]

    created = client.request("POST", "/api/v1/agents", json={"name": "mounted", "role": "support"})
    assert created.status_code == 201, created.text
    agent_id = created.json()["id"]
    listed = client.request("GET", "/api/v1/agents").json()
    assert [a["id"] for a in listed["agents"]] == [agent_id]
    got = client.request("GET", f"/api/v1/agents/{agent_id}")
    assert got.json()["role"] == "support"
    patched = client.request("PATCH", f"/api/v1/agents/{agent_id}", json={"system_prompt": "hi"})
    assert patched.json()["system_prompt"] == "hi"
    assert (
        client.request("POST", f"/api/v1/agents/{agent_id}/deploy").json()["status"] == "deployed"
    )
    assert client.request("DELETE", f"/api/v1/agents/{agent_id}").json()["status"] == "archived"
    assert client.request("GET", "/api/v1/agents").json()["agents"] == []

    # problems keep their shape under the prefix
    assert_problem(client.request("GET", "/api/v1/auth/verify", key=None), 401, "missing_api_key")
    assert_problem(client.request("GET", "/api/v1/nope"), 404, "route_not_found")
    assert_problem(client.request("GET", "/api/v1/agents/agt_nope"), 404, "resource_missing")
    bad = client.request(
        "POST", "/api/v1/agents", content=b"{", headers={"Content-Type": "application/json"}
    )
    assert_problem(bad, 400, "invalid_json")
    assert_problem(client.request("PUT", "/api/v1/agents"), 405, "method_not_allowed")
    openapi = client.request("GET", "/api/v1/openapi.json", key=None)
    assert openapi.status_code == 200
    assert "/v1/agents" in openapi.json()["paths"]
    # the un-prefixed path is not served by the host
    assert client.request("GET", "/v1/auth/verify").status_code == 404


@pytest.mark.slow
def test_mounted_over_uvicorn(core, keys) -> None:
    key = keys.make().secret
    app = host_app(core)
    assert core._started is False
    with ServerThread(app) as server:
        assert core._started is True  # the host's lifespan started the core
        _exercise(Client(app, server.url, key))
    assert core._started is False  # and stopped it


def test_mounted_over_asgi_transport(core, keys) -> None:
    key = keys.make().secret
    _exercise(Client(host_app(core, lifespan=False), None, key))


def test_invalid_json_under_prefix(core, keys) -> None:
    key = keys.make().secret
    app = host_app(core, lifespan=False)

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://host") as client:
            return await client.post(
                "/api/v1/agents",
                content=b"{",
                headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
            )

    assert_problem(asyncio.run(go()), 400, "invalid_json")


def test_lifespan_runs_startup_and_shutdown_hooks(tmp_path: Path) -> None:
    recorder = Recorder()
    core = AgentCore.open(tmp_path / "m.db", plugins=[recorder], start_workers=False)
    try:
        core.create_organization("acme")
        key = core.keys.create("acme", "test").secret
        app = host_app(core)
        with ServerThread(app) as server:
            assert recorder.calls == ["startup"]
            assert core._started is True
            response = httpx.get(
                server.url + "/api/v1/auth/verify",
                headers={"Authorization": f"Bearer {key}"},
                verify=False,
            )
            assert response.status_code == 200
        assert recorder.calls == ["startup", "shutdown"]
        assert core._started is False
    finally:
        core.close()
    assert recorder.calls == ["startup", "shutdown"]  # close() after stop() stops nothing twice


def test_mount_without_lifespan_does_not_start_core(core, keys) -> None:
    """Mounted sub-apps get no lifespan events: the host must pass lifespan_for(core)."""
    key = keys.make().secret
    app = host_app(core, lifespan=False)
    with ServerThread(app) as server:
        assert core._started is False
        response = httpx.get(
            server.url + "/api/v1/auth/verify",
            headers={"Authorization": f"Bearer {key}"},
            verify=False,
        )
        assert response.status_code == 200


@pytest.mark.parametrize("prefix", ["/api", "/deep/er/prefix"])
def test_any_prefix(core, keys, prefix: str) -> None:
    key = keys.make().secret
    app = Starlette(routes=[Mount(prefix, app=create_app(core))])
    client = Client(app, None, key)
    assert client.request("GET", prefix + "/v1/auth/verify").status_code == 200
    assert_problem(client.request("GET", prefix + "/v1/x"), 404, "route_not_found")
