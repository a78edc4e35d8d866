"""Problem details for malformed requests: JSON, depth, size, media type, methods, routes."""
# ruff: noqa: F811  (``api`` is the faster fixture imported from helpers)

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from helpers import ServerThread, api, assert_problem  # noqa: F401 (api: faster fixture)

from agentcore_starlette import HttpSettings, create_app
from agentcore_starlette.routes import ROUTES

MiB = 1024 * 1024
JSON = {"Content-Type": "application/json"}


def _nested(depth: int) -> bytes:
    return ('{"a":' * depth + "1" + "}" * depth).encode()


# JSON syntax -------------------------------------------------------------------


INVALID_JSON = [
    b"{",
    b"",
    b'{"name": "x",}',
    b"[1, 2]",
    b'"a string"',
    b"42",
    b"null",
    b'{"name": NaN}',
    b'{"name": Infinity}',
    b'{"name": -Infinity}',
    b'{"name": "\xff\xfe"}',
]


def test_invalid_json(api) -> None:
    for raw in INVALID_JSON:
        response = api.post("/v1/agents", content=raw, headers=JSON)
        body = assert_problem(response, 400, "invalid_json")
        assert body["param"] is None, raw
    assert api.get("/v1/agents").json()["agents"] == []  # nothing created


def test_json_too_deep_and_its_boundary(api) -> None:
    assert_problem(api.post("/v1/agents", content=_nested(40), headers=JSON), 400, "json_too_deep")
    assert_problem(api.post("/v1/agents", content=_nested(33), headers=JSON), 400, "json_too_deep")
    # 32 levels (the default limit) parse; the body is then validated: 'a' is unknown
    response = api.post("/v1/agents", content=_nested(32), headers=JSON)
    assert_problem(response, 422, "validation_error", param="a")
    deep_list = ("[" * 40 + "]" * 40).encode()
    response = api.post("/v1/agents", content=b'{"tools": ' + deep_list + b"}", headers=JSON)
    assert_problem(response, 400, "json_too_deep")


def test_very_deep_json_is_not_a_500(api) -> None:
    response = api.post("/v1/agents", content=_nested(100_000), headers=JSON)
    assert response.status_code == 400, response.text
    assert response.json()["code"] in {"invalid_json", "json_too_deep"}


# methods and routes ------------------------------------------------------------


def test_405_with_allow_header(api) -> None:
    response = api.request("PUT", "/v1/agents", json={})
    body = assert_problem(response, 405, "method_not_allowed")
    assert "PUT" in body["detail"]
    allowed = {m.strip() for m in response.headers["allow"].split(",")}
    assert {"GET", "POST"} <= allowed, response.headers["allow"]
    assert "PUT" not in allowed


def test_405_on_one_agent_lists_all_its_methods(api) -> None:
    agent_id = api.post("/v1/agents", json={}).json()["id"]
    response = api.request("PUT", f"/v1/agents/{agent_id}", json={})
    assert_problem(response, 405, "method_not_allowed")
    allowed = {m.strip() for m in response.headers["allow"].split(",")}
    assert {"GET", "PATCH", "DELETE"} <= allowed, response.headers["allow"]
    response = api.get(f"/v1/agents/{agent_id}/deploy")
    assert_problem(response, 405, "method_not_allowed")
    assert "POST" in response.headers["allow"]


def test_unknown_route(api) -> None:
    for path in ["/v1/nope", "/v2/agents", "/v1/agents/agt_1/explode", "/", "/v1"]:
        body = assert_problem(api.get(path), 404, "route_not_found")
        assert body["param"] is None


def test_unknown_route_needs_no_key(api) -> None:
    assert_problem(api.get("/v1/nope", key=None), 404, "route_not_found")


# size ----------------------------------------------------------------------------


def _padded(size: int) -> bytes:
    body = b'{"name": "padded"}'
    return body + b" " * (size - len(body))


def test_body_at_the_limit_is_accepted_one_byte_more_is_413(api) -> None:
    response = api.post("/v1/agents", content=_padded(MiB), headers=JSON)
    assert response.status_code == 201, response.text
    response = api.post("/v1/agents", content=_padded(MiB + 1), headers=JSON)
    body = assert_problem(response, 413, "body_too_large")
    assert str(MiB) in body["detail"]


def test_body_limit_is_configurable(core, keys) -> None:
    secret = keys.make().secret
    app = create_app(core, max_body_bytes=100)

    async def go() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://asgi") as client:
            headers = {**JSON, "Authorization": f"Bearer {secret}"}
            return [
                await client.post("/v1/agents", content=_padded(size), headers=headers)
                for size in (100, 101)
            ]

    ok, too_big = asyncio.run(go())
    assert ok.status_code == 201
    body = assert_problem(too_big, 413, "body_too_large")
    assert "100 bytes" in body["detail"]
    assert HttpSettings.of(core.settings).max_body_bytes == MiB  # the core's are untouched


@pytest.mark.parametrize("settings", [{"max_body_bytes": 0}, {"max_body_bytes": -5}])
def test_bad_body_limit_refused(core, settings) -> None:
    with pytest.raises(ValueError):
        create_app(core, **settings)


def test_unknown_setting_refused(core) -> None:
    # a typo such as max_body_byte must not be silently ignored
    with pytest.raises((TypeError, ValueError)):
        create_app(core, max_body_byte=10)


def test_a_core_setting_is_refused_per_app(core) -> None:
    # the core enforces max_top_k: an app of its own would only declare another limit
    with pytest.raises(TypeError, match="max_top_k: a setting of the core"):
        create_app(core, max_top_k=5)


class Counter:
    """A request body of ``total`` bytes that counts what the client actually sent."""

    def __init__(self, total: int, chunk: int = 64 * 1024) -> None:
        self.total = total
        self.chunk = chunk
        self.sent = 0

    def __iter__(self) -> Iterator[bytes]:
        piece = b" " * self.chunk
        while self.sent < self.total:
            self.sent += len(piece)
            yield piece

    async def stream(self) -> AsyncIterator[bytes]:
        """The same body as an async iterator (what httpx's AsyncClient needs)."""
        for piece in self:
            yield piece


@pytest.mark.slow
@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_20_mib_refused_without_being_read_over_uvicorn(app, keys, declared: bool) -> None:
    secret = keys.make().secret
    body = Counter(20 * MiB)
    headers = {**JSON, "Authorization": f"Bearer {secret}"}
    if declared:
        headers["Content-Length"] = str(20 * MiB)
    with ServerThread(app) as server:
        with httpx.Client(base_url=server.url, timeout=20, verify=False) as client:
            try:
                response = client.post("/v1/agents", content=body, headers=headers)
            except httpx.TransportError:
                response = None  # the server hung up early: acceptable for the chunked case
                assert not declared, "a declared oversize body must get a 413 response"
        if response is not None:
            assert_problem(response, 413, "body_too_large")
        # what was sent is at most what the kernel buffers hold: far less than 20 MiB
        assert body.sent < 12 * MiB, body.sent / MiB
        with httpx.Client(base_url=server.url, timeout=20, verify=False) as client:
            listed = client.get("/v1/agents", headers={"Authorization": f"Bearer {secret}"})
            assert listed.json()["agents"] == []  # and the server still serves


@pytest.mark.slow
@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_20_mib_refused_without_being_read_over_asgi(app, keys, declared: bool) -> None:
    secret = keys.make().secret
    body = Counter(20 * MiB)
    headers = {**JSON, "Authorization": f"Bearer {secret}"}
    if declared:
        headers["Content-Length"] = str(20 * MiB)

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://asgi") as client:
            return await client.post("/v1/agents", content=body.stream(), headers=headers)

    assert_problem(asyncio.run(go()), 413, "body_too_large")
    limit = MiB + body.chunk
    assert body.sent <= (body.chunk if declared else limit), body.sent


# media type ------------------------------------------------------------------------


def test_415_for_non_json(api) -> None:
    for content_type in ["text/plain", "application/x-www-form-urlencoded", None, "text/json"]:
        headers = {"Content-Type": content_type} if content_type else {}
        response = api.post("/v1/agents", content=b'{"name": "x"}', headers=headers)
        assert_problem(response, 415, "unsupported_media_type")
    assert api.get("/v1/agents").json()["agents"] == []


def test_json_with_charset_and_plus_json_accepted(api) -> None:
    for content_type in ("application/json; charset=utf-8", "application/merge-patch+json"):
        response = api.post(
            "/v1/agents", content=b'{"name": "x"}', headers={"Content-Type": content_type}
        )
        assert response.status_code == 201, (content_type, response.text)


# field validation ----------------------------------------------------------------------


def test_422_names_the_field(api) -> None:
    for payload, param in [
        ({"tools": [{"description": "no name"}]}, "tools.0.name"),  # missing required
        ({"name": 5}, "name"),  # wrong type
        ({"role": ""}, "role"),  # too short
        ({"handoff_on_no_answer": "maybe"}, "handoff_on_no_answer"),
        ({"system_prompt": "x" * 32_001}, "system_prompt"),  # too long
        ({"colour": "red"}, "colour"),  # unknown field
    ]:
        response = api.post("/v1/agents", json=payload)
        body = assert_problem(response, 422, "validation_error", param=param)
        assert param in body["detail"]
        assert isinstance(body.get("errors"), list) and body["errors"][0]["param"] == param


def test_422_missing_required_top_level_field(api) -> None:
    if not any(r.path == "/webhooks/subscribe" for r in ROUTES):
        pytest.skip("no route with a required top-level field yet")
    response = api.post("/v1/webhooks/subscribe", json={"events": ["agent.action"]})
    assert_problem(response, 422, "validation_error", param="url")
    response = api.post("/v1/webhooks/subscribe", json={"url": "https://example.com/h"})
    assert_problem(response, 422, "validation_error", param="events")


def test_odd_requests_never_500(api) -> None:
    agent_id = api.post("/v1/agents", json={}).json()["id"]
    requests = [
        ("GET", "/v1/agents?limit=99999999999999999999999", None),
        ("GET", "/v1/agents?starting_after=%00%FF", None),
        ("GET", "/v1/agents?status=", None),
        ("GET", "/v1/agents/%00", None),
        ("GET", "/v1/agents/" + "x" * 5000, None),
        ("PATCH", f"/v1/agents/{agent_id}", b'{"tools": [null]}'),
        ("PATCH", f"/v1/agents/{agent_id}", b'{"tools": [{"name": "a", "parameters": null}]}'),
        ("PATCH", f"/v1/agents/{agent_id}", json.dumps({"name": "\ud800"}).encode()),
        ("POST", "/v1/agents", b'{"name": "' + b"\\u0000" * 10 + b'"}'),
        ("POST", "/v1/agents", b'{"model": {"nested": [1, 2, 3]}}'),
    ]
    for method, path, content in requests:
        headers = JSON if content is not None else {}
        response = api.request(method, path, content=content, headers=headers)
        assert response.status_code < 500, (method, path, response.status_code, response.text)
        if response.status_code >= 400:
            assert response.headers["content-type"].startswith("application/problem+json")
