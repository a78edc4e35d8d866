"""The served OpenAPI document declares the limits the core enforces, from the same
settings (a core with ``max_top_k=50`` says 50, and refuses 51), and a mounted app's
``servers`` entry is its mount path."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import ServerThread
from starlette.applications import Starlette
from starlette.routing import Mount

from agentcore import AgentCore
from agentcore.schema import HANDOFF_TOOL
from agentcore_starlette import create_app


def _props(document: dict[str, Any], model: str) -> dict[str, Any]:
    return document["components"]["schemas"][model]["properties"]  # type: ignore[no-any-return]


def _typed(prop: dict[str, Any], kind: str) -> dict[str, Any]:
    if prop.get("type") == kind:
        return prop
    return next(b for b in prop["anyOf"] if b.get("type") == kind)


@pytest.fixture
def served(tmp_path: Path) -> Any:
    core = AgentCore.open(
        tmp_path / "x.db",
        max_top_k=50,
        max_query_chars=300,
        max_message_chars=1_000,
        max_page_size=40,
        default_page_size=10,
        max_text_chars=5_000,
    )
    core.create_organization("acme")
    key = core.keys.create("acme", "test", ["read", "write"]).secret
    with ServerThread(create_app(core)) as server:
        document = httpx.get(server.url + "/v1/openapi.json").json()
        yield server.url, {"Authorization": f"Bearer {key}"}, document
    core.close()


def test_document_declares_the_settings_limits(served: Any) -> None:
    url, auth, doc = served
    search = _props(doc, "SearchRequest")
    assert _typed(search["top_k"], "integer").items() >= {"minimum": 1, "maximum": 50}.items()
    assert search["query"]["maxLength"] == 300 and search["query"]["minLength"] == 1
    assert re.search(search["query"]["pattern"], "a") and not re.search(
        search["query"]["pattern"], "  \t"
    )
    assert _typed(search["min_score"], "number").items() >= {"minimum": -1, "maximum": 1}.items()
    assert _props(doc, "ChatMessageRequest")["message"]["maxLength"] == 1_000
    assert _props(doc, "TextDocumentCreate")["text"]["maxLength"] == 5_000
    limit = next(p for p in doc["paths"]["/v1/agents"]["get"]["parameters"] if p["name"] == "limit")
    assert limit["schema"].items() >= {"minimum": 1, "maximum": 40}.items()
    # each declared limit is the enforced one: the boundary passes, one past it fails
    for top_k, status in ((50, 200), (51, 422), (0, 422)):
        body = {"query": "q", "top_k": top_k}
        assert (
            httpx.post(url + "/v1/knowledge/search", json=body, headers=auth).status_code == status
        )
    for size, status in ((40, 200), (41, 422)):
        got = httpx.get(url + "/v1/agents", params={"limit": size}, headers=auth)
        assert got.status_code == status
    for n, status in ((300, 200), (301, 422)):
        body = {"query": "q" * n}
        assert (
            httpx.post(url + "/v1/knowledge/search", json=body, headers=auth).status_code == status
        )
    text = {"source": "a.txt", "text": "word " * 1_001}  # 5,005 characters
    assert httpx.post(url + "/v1/knowledge/documents", json=text, headers=auth).status_code == 422


def test_document_declares_names_kinds_models_and_non_empty(served: Any) -> None:
    _, _, doc = served
    tool = _props(doc, "ToolDefinition")
    pattern = tool["name"]["pattern"]
    assert re.fullmatch(pattern, "lookup_order-2") and not re.search(pattern, "bad name")
    assert not re.search(pattern, "x" * 65)
    assert tool["name"]["not"] == {"const": HANDOFF_TOOL}
    # under `if: true, then:` (what generators cannot read is declared there)
    assert tool["parameters"]["then"]["properties"]["type"] == {"const": "object"}
    events = _props(doc, "WebhookSubscribeRequest")["events"]
    assert events["minItems"] == 1
    assert set(events["items"]["enum"]) >= {"agent.action", "agent.handoff", "agent.error"}
    assert "extractive" in _typed(_props(doc, "AgentCreate")["model"], "string")["enum"]
    # null means "not given" only where the server accepts it
    update = _props(doc, "AgentUpdate")
    assert "anyOf" not in update["name"] and update["name"]["type"] == "string"
    assert any(b.get("type") == "null" for b in update["model"]["anyOf"])
    upload = doc["paths"]["/v1/knowledge/documents"]["post"]["requestBody"]["content"]
    assert upload["multipart/form-data"]["schema"]["properties"]["file"]["minLength"] == 1
    nul = _props(doc, "AgentCreate")["system_prompt"]["pattern"]
    assert re.search(nul, "fine") and not re.search(nul, "no\x00pe")


def test_mounted_document_names_its_mount_path(tmp_path: Path) -> None:
    core = AgentCore.open(tmp_path / "x.db")
    host = Starlette(routes=[Mount("/api", app=create_app(core))])
    try:
        with ServerThread(host, lifespan="off") as server:
            doc = httpx.get(server.url + "/api/v1/openapi.json").json()
            assert doc["servers"] == [{"url": "/api"}]
            assert "/v1/agents" in doc["paths"]  # paths stay relative to the server URL
        with ServerThread(create_app(core), lifespan="off") as server:
            assert httpx.get(server.url + "/v1/openapi.json").json()["servers"] == [{"url": "/"}]
    finally:
        core.close()
