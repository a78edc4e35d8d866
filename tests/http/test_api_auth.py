"""GET /v1/auth/verify and every way a key is refused, over uvicorn and ASGI."""
# ruff: noqa: F811  (``api`` is the faster fixture imported from helpers)

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import httpx
from helpers import api, assert_problem  # noqa: F401 (api: faster fixture)

from agentcore._ids import BASE62
from agentcore.keys import generate_secret


def _flip(secret: str, index: int) -> str:
    other = BASE62[(BASE62.index(secret[index]) + 1) % 62]
    return secret[:index] + other + secret[index + 1 :]


def _assert_401(response, code: str, *secrets: str) -> None:
    body = assert_problem(response, 401, code)
    challenge = response.headers.get("www-authenticate", "")
    assert challenge.lower().startswith("bearer"), response.headers
    for secret in secrets:
        if secret:
            assert secret not in response.text
            assert secret[8:40] not in response.text
            assert secret not in str(response.headers)
    assert body["param"] is None or isinstance(body["param"], str)


def test_verify_read_write_key(api) -> None:
    response = api.get("/v1/auth/verify")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["status"] == "authenticated"
    assert body["organization"] == "acme"
    assert body["scope"] == ["read", "write"]
    assert body["environment"] == "test"
    assert response.headers["request-id"].startswith("req_")


def test_verify_read_only_key_live(api, keys) -> None:
    key = keys.make("globex", "live", ("read",))
    body = api.get("/v1/auth/verify", key=key.secret).json()
    assert body["status"] == "authenticated"
    assert body["organization"] == "globex"
    assert isinstance(body["scope"], list)
    assert body["scope"] == ["read"]
    assert body["environment"] == "live"
    assert key.secret not in str(body)


def test_verify_write_only_key(api, keys) -> None:
    key = keys.make(scopes=("write",))
    assert api.get("/v1/auth/verify", key=key.secret).json()["scope"] == ["write"]


def test_missing_header(api) -> None:
    _assert_401(api.get("/v1/auth/verify", key=None), "missing_api_key")


def test_malformed_authorization(api) -> None:
    for header, code in [
        ("Basic dXNlcjpwYXNz", "malformed_authorization"),
        ("Bearer", "malformed_authorization"),
        ("Token ak_test_abc", "malformed_authorization"),
        ("Bearer garbage", "malformed_api_key"),
        ("Bearer ak_test_short", "malformed_api_key"),
        ("bearer " + "ak_test_" + "A" * 38, "malformed_api_key"),
    ]:
        response = api.get("/v1/auth/verify", key=None, headers={"Authorization": header})
        _assert_401(response, code)


def test_key_without_bearer_scheme(api) -> None:
    response = api.get("/v1/auth/verify", key=None, headers={"Authorization": api.key})
    _assert_401(response, "malformed_authorization", api.key)


def _with_headers(api, headers: list[tuple[str, str]]) -> httpx.Response:
    """GET /v1/auth/verify sending ``headers`` as they are (repeated names kept)."""
    if api.base_url is not None:
        return httpx.get(api.base_url + "/v1/auth/verify", headers=headers, timeout=30)

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=api.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://asgi") as client:
            return await client.get("/v1/auth/verify", headers=headers)

    return asyncio.run(go())


def test_two_authorization_headers_are_refused(api, keys) -> None:
    other = keys.make("globex").secret
    for first, second in [(api.key, api.key), (api.key, other), (api.key, "garbage")]:
        headers = [("Authorization", f"Bearer {first}"), ("Authorization", f"Bearer {second}")]
        response = _with_headers(api, headers)
        assert_problem(response, 400, "duplicate_authorization", param="Authorization")
        assert first not in response.text and second not in response.text
    # one header carrying two keys is a malformed one: 401, as before
    joined = [("Authorization", f"Bearer {api.key}, Bearer {other}")]
    _assert_401(_with_headers(api, joined), "malformed_authorization", api.key, other)
    assert _with_headers(api, [("Authorization", f"Bearer {api.key}")]).status_code == 200


def test_bad_checksum(api) -> None:
    for index in (10, -2):
        bad = _flip(api.key, index)
        _assert_401(api.get("/v1/auth/verify", key=bad), "malformed_api_key", bad, api.key)


def test_unknown_well_formed_key(api) -> None:
    unknown = generate_secret("test")
    _assert_401(api.get("/v1/auth/verify", key=unknown), "invalid_api_key", unknown)


def test_revoked_key(api, core, keys) -> None:
    key = keys.make()
    assert api.get("/v1/auth/verify", key=key.secret).status_code == 200
    core.keys.revoke(key.id)
    _assert_401(api.get("/v1/auth/verify", key=key.secret), "api_key_revoked", key.secret)


def test_expired_key(api, keys) -> None:
    key = keys.make(expires_in=timedelta(seconds=0.2))
    time.sleep(0.3)
    _assert_401(api.get("/v1/auth/verify", key=key.secret), "api_key_expired", key.secret)


def test_auth_checked_on_other_routes_too(api) -> None:
    _assert_401(api.get("/v1/agents", key=None), "missing_api_key")
    bad = generate_secret("live")
    response = api.post("/v1/agents", key=bad, json={"name": "x"})
    _assert_401(response, "invalid_api_key", bad)


def test_request_ids_are_unique(api) -> None:
    ids = {api.get("/v1/auth/verify", key=None).json()["request_id"] for _ in range(3)}
    assert len(ids) == 3
