"""docs/openai-and-mcp.md says what is true beyond its runnable examples: its parameter
table is the route's (``PARAMETERS``), and its MCP host configuration connects."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import httpx2
from conftest import ServerThread
from markdown_blocks import ROOT, blocks_of, section
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from agentcore import AgentCore
from agentcore_starlette import create_app
from agentcore_starlette.openai.requests import PARAMETERS

PAGE = ROOT / "docs" / "openai-and-mcp.md"


def test_the_parameter_table_is_the_routes() -> None:
    rows = re.findall(
        r"^\| `(\w+)` \| (used|ignored|refused) \|", section(PAGE, "OpenAI-compatible chat"), re.M
    )
    assert dict(rows) == PARAMETERS
    assert len(rows) == len(PARAMETERS)  # each once


def test_the_mcp_host_configuration_connects(tmp_path: Path) -> None:
    (block,) = [b for b in blocks_of(PAGE) if b.lang == "json" and "mcpServers" in b.code]
    server = json.loads(block.code)["mcpServers"]["agentcore"]
    assert server["type"] == "http"
    core = AgentCore.open(tmp_path / "mcp.db")
    core.create_organization("demo")
    key = core.keys.create("demo", "test", ["read"]).secret
    try:
        with ServerThread(create_app(core)) as running:
            url = server["url"].replace("http://localhost:8000", running.url)
            headers = {k: v.replace("ak_test_...", key) for k, v in server["headers"].items()}

            async def tools() -> list[str]:
                async with (
                    httpx2.AsyncClient(headers=headers, timeout=60) as http,  # not 5 s
                    Client(streamable_http_client(url, http_client=http)) as client,
                ):
                    return [tool.name for tool in (await client.list_tools()).tools]

            assert asyncio.run(tools()) == ["search_knowledge", "list_agents", "chat_with_agent"]
    finally:
        core.close()
