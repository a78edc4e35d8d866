"""``workspace.conversations`` and token usage through the Python API."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import Recorder, core_with

from agentcore import AgentCore
from agentcore.chat_models import ChatRequest, ChatResult, ToolCall
from agentcore.errors import NotFound, PermissionDenied, ValidationFailed
from agentcore.schema import HANDOFF_TOOL, Usage

TEXT = "Employees get 25 vacation days per year."


def _quote(request: ChatRequest) -> ChatResult:
    passage = request.passages[0]
    return ChatResult(passage.text, [passage.id], usage=Usage(input_tokens=7, output_tokens=3))


@pytest.fixture
def made(tmp_path: Path) -> Iterator[Callable[..., AgentCore]]:
    opened: list[AgentCore] = []

    def make(answer: Callable[[ChatRequest], ChatResult] = _quote) -> AgentCore:
        core = core_with(tmp_path, Recorder("metered", answer))
        opened.append(core)
        core.workspace("acme").knowledge.ingest_text("handbook.txt", TEXT)
        return core

    yield make
    for core in opened:
        core.close()


def test_scopes(made: Callable[..., AgentCore]) -> None:
    core = made()
    ws = core.workspace("acme")
    agent = ws.agents.create(name="HR", model="metered")
    conversation = ws.chat.send(agent.id, "Vacation days?").conversationId
    reader = core.workspace("acme", scopes=["read"])
    writer = core.workspace("acme", scopes=["write"])
    assert reader.conversations.get(conversation).message_count == 2
    with pytest.raises(PermissionDenied):
        reader.conversations.delete(conversation)
    for call in (
        lambda: writer.conversations.list(),
        lambda: writer.conversations.get(conversation),
        lambda: writer.conversations.messages(conversation),
    ):
        with pytest.raises(PermissionDenied):
            call()
    assert writer.conversations.delete(conversation).deleted is True
    with pytest.raises(NotFound):
        reader.conversations.get(conversation)


def test_bad_order_and_limit(made: Callable[..., AgentCore]) -> None:
    ws = made().workspace("acme")
    agent = ws.agents.create(name="HR", model="metered")
    conversation = ws.chat.send(agent.id, "Vacation days?").conversationId
    with pytest.raises(ValidationFailed) as bad:
        ws.conversations.messages(conversation, order="newest")  # type: ignore[arg-type]
    assert bad.value.param == "order"
    with pytest.raises(ValidationFailed) as bad:
        ws.conversations.list(limit=0)
    assert bad.value.param == "limit"


def test_usage_sums_the_turns_model_calls_and_a_handoff_keeps_it(
    made: Callable[..., AgentCore],
) -> None:
    def hand_off(request: ChatRequest) -> ChatResult:
        call = ToolCall("call_1", HANDOFF_TOOL, {"reason": "asked"})
        return ChatResult("", tool_calls=[call], usage=Usage(input_tokens=4, output_tokens=1))

    ws = made(hand_off).workspace("acme")
    agent = ws.agents.create(name="HR", model="metered")
    answer = ws.chat.send(agent.id, "Vacation days?")
    assert answer.usage == Usage(input_tokens=4, output_tokens=1)
    stored = ws.conversations.messages(answer.conversationId).messages[-1]
    assert stored.usage == answer.usage and stored.role == "assistant"


def test_a_model_without_usage_leaves_it_out(made: Callable[..., AgentCore]) -> None:
    ws = made(lambda request: ChatResult("No idea.")).workspace("acme")
    agent = ws.agents.create(name="HR", model="metered")
    answer = ws.chat.send(agent.id, "Vacation days?")
    assert answer.usage is None
    assert "usage" not in answer.model_dump_json()


def test_a_conversation_deleted_during_a_turn_keeps_nothing(
    made: Callable[..., AgentCore],
) -> None:
    doomed: dict[str, Any] = {}

    def delete_first(request: ChatRequest) -> ChatResult:
        doomed["ws"].conversations.delete(doomed["id"])
        return _quote(request)

    core = made(delete_first)
    ws = doomed["ws"] = core.workspace("acme")
    agent = ws.agents.create(name="HR", model="metered")
    doomed["id"] = core.store.create_conversation(ws.organization_id, ws.environment, agent.id)
    with pytest.raises(NotFound) as gone:
        ws.chat.send(agent.id, "Vacation days?", doomed["id"])
    assert gone.value.param == "conversationId"
    assert core.store.recent_messages(doomed["id"], 10) == []
    assert ws.conversations.list().conversations == []
