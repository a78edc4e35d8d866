"""Tools the caller runs and tools on an MCP server, over a real ``agentcore serve`` whose
agent's model is an OpenAI-compatible server on 127.0.0.1 (``openai_provider``) that
calls a tool, on both stores: the turn pauses with the call, and the caller's output (or
approval) resumes it."""

from __future__ import annotations

import pytest
from helpers import cli_env, cli_json, start_serve
from mcp_tool_server import TOKEN, serve_tools
from openai_provider import completion, serve_provider
from processes import reap

from agentcore import Client

pytestmark = [pytest.mark.both_stores, pytest.mark.slow]  # a server process per test

BEARER = {"Authorization": f"Bearer {TOKEN}"}
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def test_a_served_agent_waits_for_the_callers_tool(store_url: str) -> None:
    keys = cli_json("init", "--org", "demo", "--json", db=store_url)["keys"]  # type: ignore[arg-type]
    key = next(k["secret"] for k in keys if k["environment"] == "test")
    with serve_provider() as provider:
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
        provider.reply(completion("Checking. ", [call]))
        provider.reply(completion("It is sunny in Paris."))
        env = {
            **cli_env(),
            "AGENTCORE_OPENAI_BASE_URL": provider.url,
            "AGENTCORE_OPENAI_MODEL": "test-model",
        }
        process, url = start_serve(store_url, key, env=env)  # type: ignore[arg-type]
        try:
            with Client(url, key) as client:
                agent = client.create_agent(name="W", model="openai:test-model", tools=[WEATHER])
                waiting = client.chat.send(agent.id, "Weather in Paris?")
                assert waiting.status == "requires_action" and waiting.response == "Checking."
                assert [c.model_dump() for c in waiting.tool_calls or []] == [
                    {
                        "id": "call_1",
                        "type": "function",
                        "name": "get_weather",
                        "arguments": {"city": "Paris"},
                    }
                ]
                done = client.chat.send(
                    agent.id,
                    conversation_id=waiting.conversationId,
                    tool_outputs=[{"tool_call_id": "call_1", "output": '{"sky": "sunny"}'}],
                )
                assert done.status == "completed" and done.response == "It is sunny in Paris."
                listed = client.list_messages(waiting.conversationId).messages
                assert [m.role for m in listed] == ["user", "assistant", "tool", "assistant"]
        finally:
            reap(process)
    # the model server got its call back with the caller's output, as OpenAI's API has it
    sent = provider.requests[-1].json["messages"]
    assert sent[-2]["tool_calls"][0]["id"] == "call_1"
    assert sent[-1] == {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "sunny"}'}


def test_a_served_agent_calls_an_mcp_servers_tool_once_approved(store_url: str) -> None:
    keys = cli_json("init", "--org", "demo", "--json", db=store_url)["keys"]  # type: ignore[arg-type]
    key = next(k["secret"] for k in keys if k["environment"] == "test")
    with serve_provider() as provider, serve_tools() as tools:
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "cancel_order", "arguments": '{"order_id": "42"}'},
        }
        provider.reply(completion(None, [call]))
        provider.reply(completion("Your order is cancelled."))
        env = {
            **cli_env(),
            "AGENTCORE_OPENAI_BASE_URL": provider.url,
            "AGENTCORE_OPENAI_MODEL": "test-model",
            # the one allowlist of every outbound call lets the server reach loopback
            "AGENTCORE_OUTBOUND_ALLOWED_NETWORKS": "127.0.0.0/8",
        }
        process, url = start_serve(store_url, key, env=env)  # type: ignore[arg-type]
        try:
            with Client(url, key) as client:
                mcp = {"label": "orders", "url": tools.url, "headers": BEARER}
                agent = client.create_agent(name="O", model="openai:test-model", mcp_servers=[mcp])
                assert agent.mcp_servers[0].header_names == ["Authorization"]
                waiting = client.chat.send(agent.id, "Cancel order 42")
                assert waiting.status == "requires_action" and waiting.tool_calls is not None
                (asked,) = waiting.tool_calls
                assert (asked.type, asked.name, asked.server_label) == (
                    "approval",
                    "cancel_order",
                    "orders",
                )
                assert tools.calls == []
                done = client.chat.send(
                    agent.id,
                    conversation_id=waiting.conversationId,
                    approvals=[{"tool_call_id": asked.id, "approve": True}],
                )
                assert done.status == "completed" and done.response == "Your order is cancelled."
        finally:
            reap(process)
    assert tools.calls == [("cancel_order", {"order_id": "42"})]
    # the model was offered the MCP server's tools and got the call's result back
    offered = {tool["function"]["name"] for tool in provider.requests[0].json["tools"]}
    assert {"order_status", "cancel_order"} <= offered
    sent = provider.requests[-1].json["messages"]
    assert sent[-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "Order 42 is cancelled.",
    }
