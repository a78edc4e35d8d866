"""Tools the caller runs: a model's call of an agent's tool that no plugin runs pauses the
turn (``status: requires_action``), and the caller's ``tool_outputs`` resume it, on both
stores, over HTTP, the Python clients, streams and two nodes."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Api, Keys, ServerThread
from helpers import Recorder, open_with

import agentcore
from agentcore import AgentCore, AsyncClient, Client, Event
from agentcore.chat_models import ChatRequest, ChatResult, ToolCall
from agentcore.errors import ProviderError
from agentcore_starlette import create_app

MAX_OUTPUT = 2_000  # max_tool_output_chars of these tests' cores
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
CLOCK = {"name": "clock", "description": "The time now."}
REFUND = {"name": "refund", "description": "Refund an order.", "require_approval": "always"}


class Script:
    """The model's script: asks for the weather (and the time, when the message asks for
    it), then answers from the results; ``loop`` asks for the weather while it may."""

    def __init__(self) -> None:
        self.fail_next = False  # the next call fails, as a provider's outage would
        self.hold: threading.Event | None = None  # a resume's model call waits for it
        self.entered = threading.Event()

    def __call__(self, request: ChatRequest) -> ChatResult:
        results = {step.call.name: step.result for step in request.steps}
        if request.steps and self.hold is not None:
            self.entered.set()
            self.hold.wait(30)
        if self.fail_next:
            self.fail_next = False
            raise ProviderError("The model provider is down.")
        if "refund" in request.message:
            if request.steps:
                return ChatResult(text=f"Refund: {request.steps[-1].result}")
            calls = [ToolCall("call_r", "refund", {"order": "A-17"})]
            if "weather" in request.message:
                calls.append(ToolCall("call_w", "get_weather", {"city": "Paris"}))
            return ChatResult(text="", tool_calls=calls)
        if "loop" in request.message:
            if request.tools:
                call = ToolCall(f"c{len(request.steps)}", "get_weather", {"city": "Oslo"})
                return ChatResult(text="", tool_calls=[call])
            return ChatResult(text=f"Done after {len(request.steps)} steps.")
        if "get_weather" not in results:
            calls = [ToolCall("call_w", "get_weather", {"city": "Paris"})]
            if "time" in request.message:
                calls.insert(0, ToolCall("call_c", "clock", {}))
            return ChatResult(text="Let me check. ", tool_calls=calls)
        at = f" at {results['clock']}" if "clock" in results else ""
        return ChatResult(text=f"It is {results['get_weather']} in Paris{at}.")


class Clock:
    """A plugin runs ``clock`` and ``refund`` (which needs approval); every other tool
    is the caller's. ``refunds`` are the refunds it made."""

    def __init__(self) -> None:
        self.refunds: list[str] = []

    @agentcore.hookimpl
    def agentcore_run_tool(self, workspace: Any, agent_id: str, name: str, arguments: Any) -> Any:
        if name == "refund":
            self.refunds.append(arguments["order"])
            return f"order {arguments['order']} refunded"
        return "12:00" if name == "clock" else None


def open_core(
    store_url: str, script: Script, clock: Clock | None = None, **settings: Any
) -> AgentCore:
    plugins = (Recorder("scripted", script), clock or Clock())
    return open_with(store_url, *plugins, max_tool_output_chars=MAX_OUTPUT, **settings)


@pytest.fixture
def script() -> Script:
    return Script()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def core(store_url: str, script: Script, clock: Clock) -> Iterator[AgentCore]:
    """The suite's core (every HTTP test runs on both stores) with the scripted model."""
    instance = open_core(store_url, script, clock)
    yield instance
    instance.close()


def create_agent(api: Api, *tools: dict[str, Any]) -> str:
    body = {"name": "Weather", "model": "scripted", "tools": list(tools or (WEATHER, CLOCK))}
    response = api.post("/v1/agents", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def chat(api: Api, body: dict[str, Any], status: int = 200) -> Any:
    response = api.post("/v1/chat/message", json=body)
    assert response.status_code == status, response.text
    return response.json()


def history(api: Api, conversation: str) -> list[dict[str, Any]]:
    response = api.get(f"/v1/conversations/{conversation}/messages")
    assert response.status_code == 200, response.text
    return [
        {k: v for k, v in m.items() if k not in ("id", "created_at", "citations")}
        for m in response.json()["messages"]
    ]


def paused(api: Api, agent_id: str, message: str = "Weather in Paris?") -> str:
    body = chat(api, {"agentId": agent_id, "message": message})
    assert body["status"] == "requires_action", body
    return str(body["conversationId"])


def outputs(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"tool_call_id": call, "output": output} for call, output in pairs]


def test_a_callers_tool_pauses_the_turn_until_its_output_comes(api: Api, core: AgentCore) -> None:
    actions: list[Event] = []
    core.events.subscribe("agent.action", actions.append)
    agent_id = create_agent(api)
    body = chat(api, {"agentId": agent_id, "message": "Weather in Paris?"})
    conversation = body["conversationId"]
    assert body == {
        "agentId": agent_id,
        "status": "requires_action",
        "response": "Let me check. ",
        "citations": [],
        "conversationId": conversation,
        "tool_calls": [
            {
                "id": "call_w",
                "type": "function",
                "name": "get_weather",
                "arguments": {"city": "Paris"},
            }
        ],
    }
    asked = {"role": "user", "content": "Weather in Paris?"}
    waiting = {"role": "assistant", "content": "Let me check. ", "tool_calls": body["tool_calls"]}
    assert history(api, conversation) == [asked, waiting]

    resumed = chat(
        api,
        {
            "agentId": agent_id,
            "conversationId": conversation,
            "tool_outputs": outputs(("call_w", "sunny")),
        },
    )
    assert resumed["status"] == "completed" and resumed["response"] == "It is sunny in Paris."
    assert "tool_calls" not in resumed and resumed["conversationId"] == conversation
    output = {"role": "tool", "content": "sunny", "tool_call_id": "call_w"}
    answer = {"role": "assistant", "content": "It is sunny in Paris."}
    assert history(api, conversation) == [asked, waiting, output, answer]
    kinds = [e.data["action"] for e in actions]
    assert kinds == ["knowledge_lookup", "tool_call", "requires_action", "reply_sent"]
    assert actions[2].data["tool_calls"] == body["tool_calls"]

    # the conversation goes on; the model's history holds what was said, not the tools'
    model = core.chat_models["scripted"]
    assert isinstance(model, Recorder)
    chat(api, {"agentId": agent_id, "conversationId": conversation, "message": "And tomorrow?"})
    earlier = [(t.role, t.content) for t in model.requests[-1].history]
    assert earlier[-3:] == [
        ("user", "Weather in Paris?"),
        ("assistant", "Let me check. "),
        ("assistant", "It is sunny in Paris."),
    ]


def test_plugin_tools_run_and_only_the_callers_wait(api: Api, core: AgentCore) -> None:
    agent_id = create_agent(api)
    body = chat(api, {"agentId": agent_id, "message": "What time is it, and the weather?"})
    assert [call["name"] for call in body["tool_calls"]] == ["get_weather"]
    resumed = chat(
        api,
        {
            "agentId": agent_id,
            "conversationId": body["conversationId"],
            "tool_outputs": outputs(("call_w", "rainy")),
        },
    )
    assert resumed["response"] == "It is rainy in Paris at 12:00."
    model = core.chat_models["scripted"]
    assert isinstance(model, Recorder)
    steps = [(s.call.name, s.result) for s in model.requests[-1].steps]
    assert steps == [("clock", "12:00"), ("get_weather", "rainy")]


def test_bad_resumes_are_refused_and_change_nothing(api: Api, keys: Keys) -> None:
    agent_id = create_agent(api)
    conversation = paused(api, agent_id)
    other_agent = create_agent(api)
    stranger = api.with_key(keys.make("globex").secret)
    resume = {"agentId": agent_id, "conversationId": conversation}
    good = outputs(("call_w", "sunny"))
    for body, status, code, param in [
        ({**resume, "message": "Hello?"}, 409, "conversation_requires_action", "conversationId"),
        ({**resume, "tool_outputs": outputs(("call_x", "?"))}, 422, "tool_outputs_mismatch", None),
        (
            {**resume, "tool_outputs": good + outputs(("call_w", "again"))},
            422,
            "tool_outputs_mismatch",
            "tool_outputs",
        ),
        ({**resume, "message": "hi", "tool_outputs": good}, 422, "message_with_tool_outputs", None),
        ({"agentId": agent_id, "tool_outputs": good}, 422, "conversation_required", None),
        ({**resume, "tool_outputs": []}, 422, None, "tool_outputs"),
        (
            {**resume, "tool_outputs": outputs(("call_w", "x" * (MAX_OUTPUT + 1)))},
            422,
            "tool_output_too_long",
            "tool_outputs.0.output",
        ),
        (
            {**resume, "tool_outputs": [{"tool_call_id": "call_w"}]},
            422,
            None,
            "tool_outputs.0.output",
        ),
        (
            {**resume, "tool_outputs": outputs(("call_w", "\ud800"))},
            422,
            None,
            "tool_outputs.0.output",
        ),
        ({**resume, "message": None}, 422, None, "message"),
        ({**resume, "tool_outputs": None}, 422, None, "tool_outputs"),
        (resume, 422, "validation_error", "message"),
        ({**resume, "conversationId": "conv_missing", "tool_outputs": good}, 404, None, None),
        ({**resume, "agentId": other_agent, "tool_outputs": good}, 409, None, "conversationId"),
    ]:
        raw = json.dumps(body)  # ASCII: a lone surrogate travels as its escape
        refused = api.post(
            "/v1/chat/message", content=raw, headers={"Content-Type": "application/json"}
        )
        assert refused.status_code == status, (body, refused.text)
        problem = refused.json()
        if code is not None:
            assert problem["code"] == code, problem
        if param is not None:
            assert problem["param"] == param, problem
    another_tenant = stranger.post("/v1/chat/message", json={**resume, "tool_outputs": good})
    assert another_tenant.status_code == 404, another_tenant.text
    assert len(history(api, conversation)) == 2  # nothing stored by any of them

    at_limit = outputs(("call_w", "x" * MAX_OUTPUT))
    assert chat(api, {**resume, "tool_outputs": at_limit})["status"] == "completed"
    again = chat(api, {**resume, "tool_outputs": good}, status=409)
    assert again["code"] == "no_tool_calls_pending"
    assert len(history(api, conversation)) == 4


def test_a_failed_resume_lets_the_turn_wait_again(api: Api, script: Script) -> None:
    agent_id = create_agent(api)
    conversation = paused(api, agent_id)
    resume = {"agentId": agent_id, "conversationId": conversation}
    script.fail_next = True
    failed = chat(api, {**resume, "tool_outputs": outputs(("call_w", "sunny"))}, status=502)
    assert failed["code"] == "provider_error"
    assert len(history(api, conversation)) == 2
    body = chat(api, {**resume, "tool_outputs": outputs(("call_w", "foggy"))})
    assert body["response"] == "It is foggy in Paris."


def test_one_resume_at_a_time(api: Api, script: Script) -> None:
    agent_id = create_agent(api)
    conversation = paused(api, agent_id)
    resume = {"agentId": agent_id, "conversationId": conversation}
    script.hold = threading.Event()
    first: list[Any] = []
    worker = threading.Thread(
        target=lambda: first.append(
            chat(api, {**resume, "tool_outputs": outputs(("call_w", "hot"))})
        )
    )
    worker.start()
    try:
        assert script.entered.wait(30)  # the first resume holds the turn, at its model call
        busy = chat(api, {**resume, "tool_outputs": outputs(("call_w", "cold"))}, status=409)
        assert busy["code"] == "tool_outputs_in_progress"
        waiting = chat(api, {**resume, "message": "Hello?"}, status=409)
        assert waiting["code"] == "conversation_requires_action"
    finally:
        script.hold.set()
        worker.join(60)
    assert first[0]["response"] == "It is hot in Paris."
    assert [m["role"] for m in history(api, conversation)] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]


def weather_agent(core: AgentCore) -> tuple[Any, str]:
    """The acme test workspace, and an agent of it whose get_weather the caller runs."""
    ws = core.workspace("acme", "test")
    return ws, ws.agents.create(name="W", model="scripted", tools=[WEATHER]).id


@pytest.mark.both_stores
def test_a_turn_stops_waiting_after_tool_call_timeout(store_url: str, script: Script) -> None:
    with open_core(store_url, script, tool_call_timeout=0.2) as core:
        ws, agent = weather_agent(core)
        waiting = ws.chat.send(agent, "Weather in Paris?")
        time.sleep(0.3)  # longer than the timeout: it has expired, however slow the machine
        with pytest.raises(agentcore.Conflict) as late:
            resume = outputs(("call_w", "x"))
            ws.chat.send(agent, conversation_id=waiting.conversationId, tool_outputs=resume)
        assert late.value.code == "no_tool_calls_pending"
        goes_on = ws.chat.send(agent, "Weather in Paris?", waiting.conversationId)
        assert goes_on.status == "requires_action"  # the conversation takes messages again


@pytest.mark.both_stores
def test_max_tool_steps_count_across_pauses(store_url: str, script: Script) -> None:
    with open_core(store_url, script, max_tool_steps=2) as core:
        ws, agent = weather_agent(core)
        reply = ws.chat.send(agent, "loop")
        ids = []
        while reply.status == "requires_action":
            assert reply.tool_calls is not None
            ids.append(reply.tool_calls[0].id)
            reply = ws.chat.send(
                agent,
                conversation_id=reply.conversationId,
                tool_outputs=[{"tool_call_id": reply.tool_calls[0].id, "output": "windy"}],
            )
        assert ids == ["c0", "c1"]  # two steps, then a last call offers no tools
        assert reply.response == "Done after 2 steps."


@pytest.mark.both_stores
def test_a_turn_paused_on_one_node_is_resumed_on_another(store_url: str, script: Script) -> None:
    first, second = open_core(store_url, script), open_core(store_url, script)
    try:
        first.create_organization("acme")
        key = first.keys.create("acme", "test", ["read", "write"])
        with ServerThread(create_app(first)) as a, ServerThread(create_app(second)) as b:
            with Client(a.url, key.secret) as on_a:
                agent = on_a.create_agent(name="W", model="scripted", tools=[WEATHER])
                waiting = on_a.chat.send(agent.id, "Weather in Paris?")
            assert waiting.status == "requires_action" and waiting.tool_calls is not None

            async def resume() -> Any:
                async with AsyncClient(b.url, key.secret) as on_b:
                    return await on_b.chat.send(
                        agent.id,
                        conversation_id=waiting.conversationId,
                        tool_outputs=[{"tool_call_id": "call_w", "output": "mild"}],
                    )

            done = asyncio.run(resume())
        assert done.status == "completed" and done.response == "It is mild in Paris."
    finally:
        first.close()
        second.close()


def test_a_streamed_turn_ends_with_the_calls_it_waits_for(core: AgentCore) -> None:
    core.create_organization("acme")
    key = core.keys.create("acme", "test", ["read", "write"])
    with ServerThread(create_app(core)) as server, Client(server.url, key.secret) as client:
        agent = client.create_agent(name="W", model="scripted", tools=[WEATHER, CLOCK])
        with client.chat.stream(agent.id, "Weather in Paris?") as stream:
            said = "".join(stream)
        assert said == "Let me check. "
        waiting = stream.response
        assert waiting.status == "requires_action" and waiting.tool_calls is not None
        assert [c.id for c in waiting.tool_calls] == ["call_w"]
        resume = [{"tool_call_id": "call_w", "output": "sunny"}]
        with client.chat.stream(
            agent.id, conversation_id=waiting.conversationId, tool_outputs=resume
        ) as stream:
            said = "".join(stream)
        assert said == "It is sunny in Paris." and stream.response.status == "completed"
        # the event that ends a waiting stream, as it is on the wire
        again = client.chat.send(agent.id, "Weather in Paris?")
        raw = _raw_stream(server.url, key.secret, agent.id)
        assert [kind for kind, _ in raw] == ["response.delta", "response.requires_action"]
        assert json.loads(raw[-1][1])["tool_calls"][0]["name"] == "get_weather"
        assert again.status == "requires_action"


def _raw_stream(url: str, secret: str, agent_id: str) -> list[tuple[str, str]]:
    import httpx
    from httpx_sse import connect_sse

    body = {"agentId": agent_id, "message": "Weather in Paris?", "stream": True}
    with (
        httpx.Client(base_url=url, headers={"Authorization": f"Bearer {secret}"}) as http,
        connect_sse(http, "POST", "/v1/chat/message", json=body) as source,
    ):
        return [(event.event, event.data) for event in source.iter_sse()]


def test_a_call_that_needs_approval_runs_once_approved(
    api: Api, core: AgentCore, clock: Clock
) -> None:
    actions: list[Event] = []
    core.events.subscribe("agent.action", actions.append)
    agent_id = create_agent(api, WEATHER, REFUND)
    body = chat(api, {"agentId": agent_id, "message": "Please refund order A-17"})
    assert body["status"] == "requires_action"
    assert body["tool_calls"] == [
        {"id": "call_r", "type": "approval", "name": "refund", "arguments": {"order": "A-17"}}
    ]
    assert clock.refunds == []  # not before a person says so
    resume = {"agentId": agent_id, "conversationId": body["conversationId"]}
    approved = [{"tool_call_id": "call_r", "approve": True}]
    done = chat(api, {**resume, "approvals": approved})
    assert done["response"] == "Refund: order A-17 refunded" and clock.refunds == ["A-17"]
    decided = [e.data for e in actions if e.data["action"] == "approval"]
    assert [(d["tool"], d["approve"], d["reason"]) for d in decided] == [("refund", True, None)]
    messages = history(api, body["conversationId"])
    assert messages[-2] == {
        "role": "tool",
        "content": "order A-17 refunded",
        "tool_call_id": "call_r",
    }


def test_a_refused_call_never_runs_and_the_model_is_told(api: Api, clock: Clock) -> None:
    agent_id = create_agent(api, WEATHER, REFUND)
    body = chat(api, {"agentId": agent_id, "message": "Please refund order A-17"})
    resume = {"agentId": agent_id, "conversationId": body["conversationId"]}
    refused = [{"tool_call_id": "call_r", "approve": False, "reason": "over the limit"}]
    done = chat(api, {**resume, "approvals": refused})
    assert clock.refunds == []
    told = json.loads(done["response"].removeprefix("Refund: "))
    assert told == {"error": "a person refused this call", "reason": "over the limit"}


def test_outputs_and_approvals_go_together_and_each_is_checked(api: Api, clock: Clock) -> None:
    agent_id = create_agent(api, WEATHER, REFUND)
    body = chat(api, {"agentId": agent_id, "message": "Please refund A-17 and get the weather"})
    assert [(c["id"], c["type"]) for c in body["tool_calls"]] == [
        ("call_r", "approval"),
        ("call_w", "function"),
    ]
    resume = {"agentId": agent_id, "conversationId": body["conversationId"]}
    approve = [{"tool_call_id": "call_r", "approve": True}]
    output = outputs(("call_w", "sunny"))
    for bad, param in [
        ({"tool_outputs": output}, "approvals"),  # the approval missing
        ({"approvals": approve}, "tool_outputs"),  # the output missing
        ({"tool_outputs": outputs(("call_r", "x")), "approvals": approve}, "tool_outputs"),
        (
            {"tool_outputs": output, "approvals": [{"tool_call_id": "call_w", "approve": True}]},
            "approvals",
        ),
        (
            {"tool_outputs": output, "approvals": [{"tool_call_id": "call_r", "approve": "yes"}]},
            "approvals.0.approve",
        ),
        (
            {
                "tool_outputs": output,
                "approvals": [{"tool_call_id": "call_r", "approve": True, "reason": "x" * 1001}],
            },
            "approvals.0.reason",
        ),
        ({"message": "hi", "approvals": approve}, "approvals"),
        ({"tool_outputs": output, "approvals": None}, "approvals"),
    ]:
        refused = api.post("/v1/chat/message", json={**resume, **bad})
        assert refused.status_code == 422, (bad, refused.text)
        assert refused.json()["param"] == param, (bad, refused.text)
    assert clock.refunds == [] and len(history(api, body["conversationId"])) == 2
    done = chat(api, {**resume, "tool_outputs": output, "approvals": approve})
    assert done["status"] == "completed" and clock.refunds == ["A-17"]


def test_a_client_that_cannot_approve_gets_no_call_made(core: AgentCore, clock: Clock) -> None:
    from agentcore import CallerOptions

    ws = core.workspace("acme", "test")
    agent = ws.agents.create(name="R", model="scripted", tools=[REFUND])
    done = ws.chat.send(agent.id, "Please refund order A-17", caller=CallerOptions(approves=False))
    assert done.status == "completed" and clock.refunds == []
    assert "approval" in done.response


def test_an_mcp_client_resumes_a_paused_turn_through_chat_with_agent(
    core: AgentCore, clock: Clock
) -> None:
    """The MCP door's ``chat_with_agent`` takes ``tool_outputs`` and ``approvals`` too, so
    an MCP client can finish a turn that waits, as an HTTP caller does."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    core.create_organization("acme")
    key = core.keys.create("acme", "test", ["read", "write"]).secret
    agent = core.workspace("acme", "test").agents.create(
        name="W", model="scripted", tools=[WEATHER, REFUND]
    )

    async def converse(url: str) -> list[dict[str, Any]]:
        headers = {"Authorization": f"Bearer {key}"}
        async with (
            create_mcp_http_client(headers=headers) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            said = []
            for arguments in [
                {"agent_id": agent.id, "message": "Weather in Paris?"},
                {"agent_id": agent.id, "tool_outputs": outputs(("call_w", "foggy"))},
                {"agent_id": agent.id, "message": "A refund please"},
                {"agent_id": agent.id, "approvals": [{"tool_call_id": "call_r", "approve": True}]},
                {"agent_id": agent.id},  # neither a message nor outputs: refused
            ]:
                if "message" not in arguments:
                    arguments["conversation_id"] = said[-1]["conversationId"]
                result = await client.call_tool("chat_with_agent", arguments)
                assert result.is_error == (set(arguments) == {"agent_id", "conversation_id"})
                said.append(result.structured_content)
            return said

    with ServerThread(create_app(core)) as server:
        said = asyncio.run(converse(server.url + "/v1/mcp"))
    assert [s.get("status") for s in said] == [
        "requires_action",
        "completed",
        "requires_action",
        "completed",
        422,  # the problem document of the refusal
    ]
    assert said[-1]["param"] == "message"
    assert said[1]["response"] == "It is foggy in Paris."
    assert said[2]["tool_calls"][0]["type"] == "approval"
    assert said[3]["response"] == "Refund: order A-17 refunded" and clock.refunds == ["A-17"]
