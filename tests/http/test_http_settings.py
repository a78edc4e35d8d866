"""``HttpSettings``: the limits only HTTP needs are the adapter's settings, set as they
were when the core held them (``AGENTCORE_<NAME>``, a ``.env`` line, a keyword of
``AgentCore.open``), and per app with ``create_app(core, name=value)``."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from agentcore import AgentCore, Settings
from agentcore.cli import USAGE_ERROR, main
from agentcore_starlette import HttpSettings, create_app


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No AGENTCORE_* variables, and a working directory without .env."""
    for name in list(os.environ):
        if name.upper().startswith("AGENTCORE_"):
            monkeypatch.delenv(name)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    yield


def post_agent(app: object, secret: str, size: int) -> httpx.Response:
    """``POST /v1/agents`` with a JSON body of ``size`` bytes."""
    body = b'{"name": "A", "system_prompt": "' + b"x" * (size - 34) + b'"}'
    assert len(body) == size

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://asgi") as client:
            headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
            return await client.post("/v1/agents", content=body, headers=headers)

    return asyncio.run(go())


def test_the_names_deployments_set_keep_working(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTCORE_REQUEST_DEADLINE", "7")
    monkeypatch.setenv("agentcore_inline_budget", "0")  # any letter case, as the core's
    Path(".env").write_text("AGENTCORE_HEADER_TIMEOUT=3\nAGENTCORE_MAX_TOP_K=40\n")
    with AgentCore.open(tmp_path / "s.db", max_body_bytes=200, start_workers=False) as core:
        http = HttpSettings.of(core.settings)
        assert (http.request_deadline, http.inline_budget, http.header_timeout) == (7, 0, 3)
        assert http.max_body_bytes == 200 and core.settings.max_top_k == 40
        core.create_organization("acme")
        secret = core.keys.create("acme", "test", ["read", "write"]).secret
        assert post_agent(create_app(core), secret, 200).status_code == 201
        refused = post_agent(create_app(core), secret, 201)
        assert refused.status_code == 413 and refused.json()["code"] == "body_too_large"
        # one app may set its own; the core's stay as they are
        assert post_agent(create_app(core, max_body_bytes=300), secret, 201).status_code == 201
        assert HttpSettings.of(core.settings).max_body_bytes == 200


def test_a_bad_value_stops_the_core_from_opening(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as info:
        AgentCore.open(tmp_path / "s.db", max_body_bytes=0)
    message = str(info.value)
    assert "max_body_bytes" in message and "plugin 'http'" in message
    assert not (tmp_path / "s.db").exists()


def test_the_cli_refuses_a_bad_value_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENTCORE_MAX_CONNECTIONS", "0")
    assert main(["--db", "cli.db", "keys", "list", "--org", "acme"]) == USAGE_ERROR
    err = capsys.readouterr().err
    assert "max_connections" in err and err.count("\n") == 1
    assert not Path("cli.db").exists()


def test_settings_built_in_code_read_them_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTCORE_MAX_URL_BYTES", "4096")
    assert HttpSettings.of(Settings()).max_url_bytes == 4096
    assert HttpSettings.of(Settings(), max_url_bytes=2048).max_url_bytes == 2048
    with pytest.raises(TypeError, match="max_upload_bytes: a setting of the core"):
        HttpSettings.of(Settings(), max_upload_bytes=10)
