"""Chat with a history the client keeps (the OpenAI route's), and the agents a key may
chat with (its /v1/models)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import Recorder, core_with

import agentcore
from agentcore.chat_models import ChatResult, ChatTurn


def _echo() -> Recorder:
    return Recorder("echo", lambda request: ChatResult(text=f"echo {len(request.history)}"))


def test_a_given_history_is_the_models_context_and_only_the_turn_is_stored(
    tmp_path: Path,
) -> None:
    model = _echo()
    core = core_with(tmp_path, model)
    ws = core.workspace("acme", "test")
    agent = ws.agents.create(name="E", model="echo")
    history = [ChatTurn("user", "one"), ChatTurn("assistant", "a reply I never gave")]
    answer = ws.chat.send(agent.id, "two", history=history)
    assert answer.response == "echo 2"
    assert model.requests[-1].history == history
    assert model.requests[-1].message == "two"
    # the conversation holds what happened here: the one turn, not the client's history
    follow_up = ws.chat.send(agent.id, "three", answer.conversationId)
    assert [(t.role, t.content) for t in model.requests[-1].history] == [
        ("user", "two"),
        ("assistant", "echo 2"),
    ]
    assert follow_up.conversationId == answer.conversationId
    with ws.chat.stream(agent.id, "four", history=history[:1]) as stream:
        assert "".join(stream) == "echo 1"
    assert model.requests[-1].history == history[:1]
    core.close()


def test_an_empty_history_starts_afresh_and_a_long_one_keeps_its_last_turns(
    tmp_path: Path,
) -> None:
    model = _echo()
    core = core_with(tmp_path, model, history_turns=3)
    ws = core.workspace("acme", "test")
    agent = ws.agents.create(name="E", model="echo")
    assert ws.chat.send(agent.id, "hi", history=[]).response == "echo 0"
    turns = [ChatTurn("user" if n % 2 == 0 else "assistant", f"turn {n}") for n in range(8)]
    ws.chat.send(agent.id, "hi", history=turns)
    assert model.requests[-1].history == turns[-3:]
    core.close()


def test_a_history_and_a_conversation_together_are_refused(tmp_path: Path) -> None:
    model = _echo()
    core = core_with(tmp_path, model)
    ws = core.workspace("acme", "test")
    agent = ws.agents.create(name="E", model="echo")
    first = ws.chat.send(agent.id, "one")
    with pytest.raises(agentcore.ValidationFailed) as refused:
        ws.chat.send(agent.id, "two", first.conversationId, history=[ChatTurn("user", "x")])
    assert refused.value.code == "history_with_conversation"
    assert refused.value.param == "conversationId"
    assert len(model.requests) == 1  # refused before the model was asked
    core.close()


def test_the_agents_a_key_may_chat_with_per_environment(tmp_path: Path) -> None:
    core = core_with(tmp_path, max_page_size=2, default_page_size=2)  # several pages
    test, live = core.workspace("acme", "test"), core.workspace("acme", "live")
    drafts = [test.agents.create(name=f"draft {n}") for n in range(3)]
    deployed = [test.agents.deploy(test.agents.create(name=f"on {n}").id) for n in range(2)]
    test.agents.archive(test.agents.create(name="gone").id)
    live_draft = live.agents.create(name="live draft")
    live_on = live.agents.deploy(live.agents.create(name="live on").id)
    core.workspace("other", "test").agents.create(name="elsewhere")
    newest_first = [*reversed(deployed), *reversed(drafts)]
    assert [a.id for a in test.chat.agents()] == [a.id for a in newest_first]
    assert [a.id for a in live.chat.agents()] == [live_on.id]
    assert live_draft.id not in {a.id for a in live.chat.agents()}
    core.close()


def test_listing_chat_agents_needs_the_read_scope(tmp_path: Path) -> None:
    core = core_with(tmp_path)
    core.create_organization("acme")
    writer = core.authenticate(core.keys.create("acme", "test", ["write"]).secret)
    with pytest.raises(agentcore.PermissionDenied):
        writer.chat.agents()
    core.close()
