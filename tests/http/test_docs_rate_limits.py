"""The "Rate limits" section of docs/http-api.md is true: its settings, defaults and
header examples are what a real server sends."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from conftest import ServerThread

from agentcore import AgentCore, Settings
from agentcore_starlette import create_app

HTTP_API = Path(__file__).resolve().parents[2] / "docs" / "http-api.md"


def _section(title: str) -> str:
    text = HTTP_API.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end]


def test_docs_name_the_rate_limit_settings_and_defaults() -> None:
    section = _section("Rate limits")
    defaults = Settings.model_validate({})
    assert f"`rate_limit_live` = {defaults.rate_limit_live:g} requests/s" in section
    assert f"`rate_limit_test` = {defaults.rate_limit_test:g}/s" in section
    for name in ("RateLimit-Policy", "RateLimit:", "Retry-After", "429", "rate_limited"):
        assert name in section, name


def test_docs_header_examples_are_what_the_server_sends(tmp_path: Path) -> None:
    section = _section("Rate limits")
    policy = re.search(r"^RateLimit-Policy: (\S+)", section, re.MULTILINE)
    limit = re.search(r"^RateLimit: (\S+)", section, re.MULTILINE)
    assert policy and limit
    core = AgentCore.open(tmp_path / "x.db")  # default limits: 25/s for test keys
    core.create_organization("acme")
    key = core.keys.create("acme", "test", ["read"]).secret
    try:
        with ServerThread(create_app(core)) as server, httpx.Client(base_url=server.url) as http:
            first = http.get("/v1/auth/verify", headers={"Authorization": f"Bearer {key}"})
            assert first.status_code == 200
            assert first.headers["RateLimit-Policy"] == policy.group(1)
            assert first.headers["RateLimit"] == limit.group(1)
            # the OpenAPI document is not limited and carries no headers
            assert "RateLimit" not in http.get("/v1/openapi.json").headers
    finally:
        core.close()


def test_past_the_limit_429_with_retry_after(tmp_path: Path) -> None:
    core = AgentCore.open(tmp_path / "y.db", rate_limit_test=1)  # a burst of one request
    core.create_organization("acme")
    key = core.keys.create("acme", "test", ["read"]).secret
    try:
        with ServerThread(create_app(core)) as server, httpx.Client(base_url=server.url) as http:
            auth = {"Authorization": f"Bearer {key}"}
            statuses = [http.get("/v1/auth/verify", headers=auth) for _ in range(3)]
            refused = next(r for r in statuses if r.status_code == 429)
            assert refused.json()["code"] == "rate_limited"
            assert int(refused.headers["Retry-After"]) >= 1
            assert refused.headers["RateLimit-Policy"] == '"per-key";q=1;w=1'
            assert refused.headers["RateLimit"].startswith('"per-key";r=0;')
    finally:
        core.close()
