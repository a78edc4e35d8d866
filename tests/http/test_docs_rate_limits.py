"""The "Rate limits" section of docs/http-api.md is true: its settings, defaults and
header examples are what a real server sends."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from conftest import ServerThread
from markdown_blocks import ROOT, section

from agentcore import AgentCore, Settings
from agentcore_starlette import create_app

HTTP_API = ROOT / "docs" / "http-api.md"


def test_docs_name_the_rate_limit_settings_and_defaults() -> None:
    text = section(HTTP_API, "Rate limits")
    defaults = Settings.model_validate({})
    assert f"`rate_limit_live` = {defaults.rate_limit_live:g} requests/s" in text
    assert f"`rate_limit_test` = {defaults.rate_limit_test:g}/s" in text
    for name in ("RateLimit-Policy", "RateLimit:", "Retry-After", "429", "rate_limited"):
        assert name in text, name


def test_docs_header_examples_are_what_the_server_sends(tmp_path: Path) -> None:
    text = section(HTTP_API, "Rate limits")
    policy = re.search(r"^RateLimit-Policy: (\S+)", text, re.MULTILINE)
    limit = re.search(r"^RateLimit: (\S+)", text, re.MULTILINE)
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
