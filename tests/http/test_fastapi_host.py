"""The README's FastAPI host example, run as written under uvicorn on 127.0.0.1: its
mounted API answers, and a webhook reaches a real receiver (which the lifespan-less
one-liner never did). The README's Python blocks are executed, so they stay true."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import ServerThread
from markdown_blocks import ROOT, blocks_of
from webhook_receiver import Receiver

from agentcore import AgentCore
from agentcore_starlette import create_app

pytest.importorskip("fastapi")

README = ROOT / "README.md"


def readme_block(marker: str) -> str:
    """The README's ```python block containing ``marker``."""
    found = [b.code for b in blocks_of(README) if b.lang == "python" and marker in b.code]
    assert len(found) == 1, f"expected one README python block with {marker!r}"
    return found[0]


def run_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.chdir(tmp_path)  # the example opens ./agentcore.db
    monkeypatch.setenv("AGENTCORE_WEBHOOK_ALLOWED_NETWORKS", "127.0.0.0/8")
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(readme_block("FastAPI(lifespan="), "README.md", "exec"), namespace)
    return namespace


def _mint(core: AgentCore) -> str:
    core.create_organization("acme")
    return core.keys.create("acme", "test", ["read", "write"]).secret


@pytest.mark.slow
def test_readme_fastapi_example_delivers_webhooks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastapi import FastAPI

    example = run_example(tmp_path, monkeypatch)
    app, core = example["app"], example["core"]
    assert isinstance(app, FastAPI)
    key = _mint(core)
    auth = {"Authorization": f"Bearer {key}"}
    try:
        with Receiver() as rx, ServerThread(app) as server:
            base = server.url + "/api/v1"
            assert httpx.get(base + "/auth/verify", headers=auth).status_code == 200
            assert httpx.get(base + "/openapi.json").status_code == 200
            sub = httpx.post(
                base + "/webhooks/subscribe",
                headers=auth,
                json={"url": rx.url("/hook"), "events": ["agent.handoff"]},
            ).json()
            ping = httpx.post(f"{base}/webhooks/{sub['id']}/test", headers=auth)
            assert ping.status_code == 202, ping.text
            # an event published by the core, as a handoff would be
            ws = core.workspace("acme", "test")
            ws.publish("agent.handoff", {"reason": "asked for a human"})
            assert rx.wait_for(2, path="/hook"), rx.received
            bodies = [json.loads(r.body) for r in rx.requests("/hook")]
            assert {b["type"] for b in bodies} == {"webhook.ping", "agent.handoff"}
            assert all(
                b["id"] == r.webhook_id for b, r in zip(bodies, rx.requests("/hook"), strict=True)
            )
    finally:
        core.close()


@pytest.mark.slow
def test_a_fastapi_host_without_the_lifespan_never_delivers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why the README insists: the one-liner mount alone leaves deliveries pending."""
    from fastapi import FastAPI

    monkeypatch.setenv("AGENTCORE_WEBHOOK_ALLOWED_NETWORKS", "127.0.0.0/8")
    core = AgentCore.open(tmp_path / "x.db")
    key = _mint(core)
    app = FastAPI()
    app.mount("/api", create_app(core))
    auth = {"Authorization": f"Bearer {key}"}
    try:
        with Receiver() as rx, ServerThread(app) as server:
            base = server.url + "/api/v1"
            sub = httpx.post(
                base + "/webhooks/subscribe",
                headers=auth,
                json={"url": rx.url("/hook"), "events": ["agent.action"]},
            ).json()
            assert httpx.post(f"{base}/webhooks/{sub['id']}/test", headers=auth).status_code == 202
            time.sleep(1.0)  # ample for a started core (the test above gets it in ms)
            assert rx.count() == 0
            deliveries = httpx.get(f"{base}/webhooks/{sub['id']}/deliveries", headers=auth)
            assert [d["status"] for d in deliveries.json()["deliveries"]] == ["pending"]
    finally:
        core.close()
