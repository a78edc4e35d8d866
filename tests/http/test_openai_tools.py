"""Tools on the OpenAI-compatible route, through OpenAI's own SDK over a real uvicorn
server (served alone and mounted in FastAPI, on both stores): a request's ``tools`` are
offered beside the agent's own, a call comes back as ``finish_reason: "tool_calls"``,
and the tool messages the SDK sends back continue the turn."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from conftest import Keys
from helpers import Recorder, open_with

from agentcore import AgentCore
from agentcore.chat_models import ChatRequest, ChatResult, ToolCall

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "strict": False,
    },
}
FUNCTION = {k: v for k, v in WEATHER["function"].items() if k != "strict"}  # type: ignore[union-attr]
"""The same tool as an agent's."""
QUESTION = {"role": "user", "content": "What is the weather in Paris?"}


def answer(request: ChatRequest) -> ChatResult:
    """Calls the first tool that is not the handoff once, then answers with its result."""
    if request.steps:
        return ChatResult(text=f"It is {request.steps[-1].result} in Paris.")
    offered = [tool.name for tool in request.tools if tool.name != "handoff_to_human"]
    if not offered:
        return ChatResult(text="No tools.")
    return ChatResult(text="", tool_calls=[ToolCall("call_1", offered[0], {"city": "Paris"})])


@pytest.fixture
def model() -> Recorder:
    return Recorder("scripted", answer)


@pytest.fixture
def core(store_url: str, model: Recorder) -> Iterator[AgentCore]:
    """conftest's core (SQLite or PostgreSQL) with the scripted chat model."""
    with open_with(store_url, model) as instance:
        yield instance


@pytest.fixture
def key(keys: Keys) -> str:
    return keys.make(scopes=("read",)).secret


@pytest.fixture
def agent(core: AgentCore, key: str) -> str:
    return core.workspace("acme", "test").agents.create(name="W", model="scripted").id


def client(base_url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)


def test_a_request_tool_is_called_and_its_output_continues_the_turn(
    served_v1: str, key: str, agent: str, model: Recorder
) -> None:
    sdk = client(served_v1, key)
    first = sdk.chat.completions.create(model=agent, messages=[QUESTION], tools=[WEATHER])
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    offered = [tool.name for tool in model.requests[0].tools]
    assert offered == ["get_weather", "handoff_to_human"]

    output = {"role": "tool", "tool_call_id": call.id, "content": "sunny"}
    second = sdk.chat.completions.create(
        model=agent,
        messages=[QUESTION, choice.message.model_dump(exclude_none=True), output],
        tools=[WEATHER],
    )
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content == "It is sunny in Paris."
    steps = [(s.call.id, s.call.name, s.call.arguments, s.result) for s in model.requests[-1].steps]
    assert steps == [(call.id, "get_weather", {"city": "Paris"}, "sunny")]


def test_a_streamed_call_arrives_in_a_delta(served_v1: str, key: str, agent: str) -> None:
    stream = client(served_v1, key).chat.completions.create(
        model=agent, messages=[QUESTION], tools=[WEATHER], stream=True
    )
    calls: list[Any] = []
    finish = None
    for chunk in stream:
        for choice in chunk.choices:
            calls += choice.delta.tool_calls or []
            finish = choice.finish_reason or finish
    assert finish == "tool_calls"
    assert [(c.index, c.id, c.function.name) for c in calls] == [(0, "call_1", "get_weather")]
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}


def test_tool_choice_reaches_the_model(
    served_v1: str, key: str, agent: str, model: Recorder
) -> None:
    sdk = client(served_v1, key)
    none = sdk.chat.completions.create(
        model=agent, messages=[QUESTION], tools=[WEATHER], tool_choice="none"
    )
    assert none.choices[0].message.content == "No tools." and model.requests[-1].tools == []
    for given, told in [
        ("required", "required"),
        ({"type": "function", "function": {"name": "get_weather"}}, "get_weather"),
        ("auto", "auto"),
    ]:
        sdk.chat.completions.create(
            model=agent,
            messages=[QUESTION],
            tools=[WEATHER],
            tool_choice=given,  # type: ignore[arg-type]
        )
        assert model.requests[-1].tool_choice == told, given
    with pytest.raises(openai.BadRequestError) as unknown:
        sdk.chat.completions.create(
            model=agent,
            messages=[QUESTION],
            tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "get_time"}},
        )
    assert unknown.value.body["param"] == "tool_choice"  # type: ignore[index]


def test_bad_tools_are_refused_naming_the_field(
    served_v1: str, key: str, agent: str, core: AgentCore
) -> None:
    sdk = client(served_v1, key)
    handoff = {"type": "function", "function": {"name": "handoff_to_human"}}
    twice = [WEATHER, WEATHER]
    for tools, param in [(twice, "tools.1"), ([handoff], "tools.0.function.name")]:
        with pytest.raises(openai.BadRequestError) as refused:
            sdk.chat.completions.create(model=agent, messages=[QUESTION], tools=tools)  # type: ignore[arg-type]
        assert refused.value.body["param"] == param, refused.value.body  # type: ignore[index]
    ws = core.workspace("acme", "test")
    mine = ws.agents.create(name="X", model="scripted", tools=[FUNCTION])
    with pytest.raises(openai.BadRequestError) as taken:
        sdk.chat.completions.create(model=mine.id, messages=[QUESTION], tools=[WEATHER])
    assert taken.value.body["code"] == "duplicate_tool_name"  # type: ignore[index]


def test_an_agents_own_tool_no_plugin_runs_comes_back_as_well(
    served_v1: str, key: str, core: AgentCore
) -> None:
    ws = core.workspace("acme", "test")
    agent = ws.agents.create(name="Own", model="scripted", tools=[FUNCTION])
    sdk = client(served_v1, key)
    first = sdk.chat.completions.create(model=agent.id, messages=[QUESTION])
    assert first.choices[0].finish_reason == "tool_calls"
    message = first.choices[0].message
    call = (message.tool_calls or [])[0]
    output = {"role": "tool", "tool_call_id": call.id, "content": "cloudy"}
    second = sdk.chat.completions.create(
        model=agent.id, messages=[QUESTION, message.model_dump(exclude_none=True), output]
    )
    assert second.choices[0].message.content == "It is cloudy in Paris."


def test_a_stored_conversation_waits_for_its_tool_messages(
    served_v1: str, key: str, agent: str, core: AgentCore
) -> None:
    sdk = client(served_v1, key)
    # without conversation_id the turn is not kept: the caller sends it all again
    first = sdk.chat.completions.create(model=agent, messages=[QUESTION], tools=[WEATHER])
    stored = {"conversation_id": first.model_extra["conversation_id"]}  # type: ignore[index]
    # with it, the conversation keeps the turn that waits for the calls
    paused = sdk.chat.completions.create(
        model=agent, messages=[QUESTION], tools=[WEATHER], extra_body=stored
    )
    assert paused.choices[0].finish_reason == "tool_calls"
    call = (paused.choices[0].message.tool_calls or [])[0]
    with pytest.raises(openai.ConflictError) as waiting:
        sdk.chat.completions.create(model=agent, messages=[QUESTION], extra_body=stored)
    assert waiting.value.body["code"] == "conversation_requires_action"  # type: ignore[index]
    done = sdk.chat.completions.create(
        model=agent,
        messages=[
            paused.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "hot"},
        ],
        tools=[WEATHER],
        extra_body=stored,
    )
    assert done.choices[0].message.content == "It is hot in Paris."
    ws = core.workspace("acme", "test")
    listed = ws.conversations.messages(stored["conversation_id"]).messages
    assert [m.role for m in listed] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]


def test_a_tool_output_is_bounded(served_v1: str, key: str, agent: str, core: AgentCore) -> None:
    sdk = client(served_v1, key)
    first = sdk.chat.completions.create(model=agent, messages=[QUESTION], tools=[WEATHER])
    message = first.choices[0].message.model_dump(exclude_none=True)
    call = (first.choices[0].message.tool_calls or [])[0]
    limit = core.settings.max_tool_output_chars
    for size, passes in [(limit, True), (limit + 1, False)]:
        output = {"role": "tool", "tool_call_id": call.id, "content": "x" * size}
        ask = {"model": agent, "messages": [QUESTION, message, output], "tools": [WEATHER]}
        if passes:
            assert sdk.chat.completions.create(**ask).choices[0].finish_reason == "stop"  # type: ignore[call-overload]
            continue
        with pytest.raises(openai.BadRequestError) as refused:
            sdk.chat.completions.create(**ask)  # type: ignore[call-overload]
        assert refused.value.body["code"] == "tool_output_too_long"  # type: ignore[index]
        assert refused.value.body["param"] == "messages.2.content"  # type: ignore[index]
