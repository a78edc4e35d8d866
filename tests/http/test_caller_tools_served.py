"""Tools the caller runs, over a real ``agentcore serve`` whose agent's model is an
OpenAI-compatible server on 127.0.0.1 (``openai_provider``) that calls a tool, on both
stores: the turn pauses with the call, and the caller's output resumes it."""

from __future__ import annotations

import pytest
from helpers import cli_env, cli_json, start_serve
from openai_provider import completion, serve_provider
from processes import reap

from agentcore import Client

pytestmark = [pytest.mark.both_stores, pytest.mark.slow]  # a server process per test

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
