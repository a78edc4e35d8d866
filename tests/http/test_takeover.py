"""A person takes a conversation over: the agent hands off (or an operator replies), the
user's messages are kept for the person and announced, the operator replies in the
conversation, and releasing it gives it back to the agent, on both stores."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import Api, Keys
from helpers import Recorder

from agentcore import AgentCore, Event
from agentcore.chat import HANDOFF_REPLY
from agentcore.chat_models import ChatResult


def record(core: AgentCore, kind: str) -> list[Event]:
    events: list[Event] = []
    core.events.subscribe(kind, events.append)
    return events


def create_agent(api: Api) -> str:
    response = api.post("/v1/agents", json={"name": "Support", "role": "support"})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def chat(api: Api, agent_id: str, message: str, conversation_id: str | None = None) -> Any:
    body: dict[str, Any] = {"agentId": agent_id, "message": message}
    if conversation_id is not None:
        body["conversationId"] = conversation_id
    response = api.post("/v1/chat/message", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def handed_off(api: Api, agent_id: str) -> str:
    """A conversation whose agent handed it off (the user asked for a person)."""
    body = chat(api, agent_id, "I want to talk to a human")
    assert body["status"] == "completed" and body["response"] == HANDOFF_REPLY
    return str(body["conversationId"])


def roles(api: Api, conversation_id: str) -> list[tuple[str, str]]:
    messages = api.get(f"/v1/conversations/{conversation_id}/messages").json()["messages"]
    return [(m["role"], m["content"]) for m in messages]


def test_a_handed_off_conversation_keeps_messages_for_a_person(api: Api, core: AgentCore) -> None:
    announced = record(core, "conversation.message")
    agent_id = create_agent(api)
    conversation = handed_off(api, agent_id)
    assert api.get(f"/v1/conversations/{conversation}").json()["status"] == "handed_off"

    body = chat(api, agent_id, "Hello? My order 1234 is late.", conversation)
    assert body == {
        "agentId": agent_id,
        "status": "handed_off",
        "response": "",
        "citations": [],
        "conversationId": conversation,
    }
    assert roles(api, conversation)[-1] == ("user", "Hello? My order 1234 is late.")
    assert [(e.type, e.data) for e in announced] == [
        (
            "conversation.message",
            {
                "agent_id": agent_id,
                "conversation_id": conversation,
                "role": "user",
                "content": "Hello? My order 1234 is late.",
            },
        )
    ]


def test_an_operator_replies_and_releases_it(api: Api, core: AgentCore) -> None:
    announced = record(core, "conversation.message")
    agent_id = create_agent(api)
    conversation = handed_off(api, agent_id)
    reply = api.post(
        f"/v1/conversations/{conversation}/messages", json={"content": "Hi, Ana here. Looking."}
    )
    assert reply.status_code == 201, reply.text
    message = reply.json()
    assert message["role"] == "operator" and message["content"] == "Hi, Ana here. Looking."
    assert message["id"].startswith("msg_") and message["citations"] == []
    assert [e.data["role"] for e in announced] == ["operator"]

    released = api.post(f"/v1/conversations/{conversation}/release")
    assert released.status_code == 200, released.text
    assert released.json()["status"] == "active" and released.json()["message_count"] == 3
    again = api.post(f"/v1/conversations/{conversation}/release")  # changes nothing
    assert again.status_code == 200 and again.json()["status"] == "active"

    body = chat(api, agent_id, "Thanks, all sorted.", conversation)
    assert body["status"] == "completed" and body["response"] != ""
    assert [role for role, _ in roles(api, conversation)] == [
        "user",
        "assistant",
        "operator",
        "user",
        "assistant",
    ]
    assert len(announced) == 1  # an active conversation's messages are not announced


def test_an_operator_reply_takes_an_active_conversation_over(api: Api) -> None:
    agent_id = create_agent(api)
    conversation = chat(api, agent_id, "Where is my parcel?")["conversationId"]
    assert api.get(f"/v1/conversations/{conversation}").json()["status"] == "active"
    reply = api.post(f"/v1/conversations/{conversation}/messages", json={"content": "On it."})
    assert reply.status_code == 201, reply.text
    assert api.get(f"/v1/conversations/{conversation}").json()["status"] == "handed_off"
    assert chat(api, agent_id, "Great", conversation)["status"] == "handed_off"


def test_bad_replies_are_refused_and_store_nothing(api: Api, core: AgentCore) -> None:
    agent_id = create_agent(api)
    conversation = handed_off(api, agent_id)
    limit = core.settings.max_message_chars
    path = f"/v1/conversations/{conversation}/messages"
    for body, status, param in [
        ({"content": ""}, 422, "content"),
        ({"content": "   "}, 422, "content"),
        ({"content": "x" * (limit + 1)}, 422, "content"),
        ({"content": "\ud800"}, 422, "content"),
        ({}, 422, "content"),
        ({"content": "hi", "role": "assistant"}, 422, "role"),
    ]:
        raw = json.dumps(body)  # ASCII: a lone surrogate travels as its escape
        refused = api.post(path, content=raw, headers={"Content-Type": "application/json"})
        assert refused.status_code == status, (body, refused.text)
        assert refused.json()["param"] == param, refused.text
    assert len(roles(api, conversation)) == 2  # the handoff turn only
    at_limit = api.post(path, json={"content": "x" * limit})
    assert at_limit.status_code == 201, at_limit.text


def test_unknown_and_other_tenants_conversations_are_404(api: Api, keys: Keys) -> None:
    agent_id = create_agent(api)
    conversation = handed_off(api, agent_id)
    for path in ("/v1/conversations/conv_nosuch", f"/v1/conversations/{conversation}"):
        other = keys.make("globex").secret if "nosuch" not in path else api.key
        for suffix, body in (("/messages", {"content": "hi"}), ("/release", None)):
            response = api.post(path + suffix, json=body, key=other)
            assert response.status_code == 404, response.text
    assert api.get(f"/v1/conversations/{conversation}").json()["status"] == "handed_off"


def test_replying_and_releasing_need_the_write_scope(api: Api, keys: Keys) -> None:
    agent_id = create_agent(api)
    conversation = handed_off(api, agent_id)
    reader = keys.make(scopes=("read",)).secret
    reply = api.post(
        f"/v1/conversations/{conversation}/messages", json={"content": "hi"}, key=reader
    )
    assert reply.status_code == 403, reply.text
    release = api.post(f"/v1/conversations/{conversation}/release", key=reader)
    assert release.status_code == 403, release.text
    assert api.get(f"/v1/conversations/{conversation}").json()["status"] == "handed_off"


@pytest.mark.both_stores
def test_the_model_sees_the_operator_after_release(store_url: str) -> None:
    model = Recorder("scripted", lambda request: ChatResult(text="Happy to help."))
    with AgentCore.open(store_url, plugins=[model], default_chat_model="scripted") as core:
        ws = core.workspace("acme")
        agent = ws.agents.create(name="Support")
        first = ws.chat.send(agent.id, "Please put me through to a real person")
        conversation = first.conversationId
        assert ws.conversations.get(conversation).status == "handed_off"
        quiet = ws.chat.send(agent.id, "Anyone?", conversation)
        assert (quiet.status, quiet.response) == ("handed_off", "")
        streamed = ws.chat.stream(agent.id, "Hello??", conversation)
        assert list(streamed) == [] and streamed.response.status == "handed_off"
        assert model.requests == []  # no model call while a person has it
        ws.conversations.reply(conversation, "Sorry for the wait, refund issued.")
        ws.conversations.release(conversation)
        answer = ws.chat.send(agent.id, "Thank you!", conversation)
        assert answer.status == "completed" and answer.response == "Happy to help."
        (request,) = model.requests
        assert [(t.role, t.content) for t in request.history][-3:] == [
            ("user", "Anyone?"),
            ("user", "Hello??"),
            ("assistant", "Sorry for the wait, refund issued."),
        ]


def test_a_takeover_while_the_model_answers_stays(tmp_path: Any) -> None:
    # the operator replies while the agent's model is still answering: the answer is
    # stored, and the conversation stays with the person
    taken: list[str] = []

    def answer(request: Any) -> ChatResult:
        if taken:
            ws.conversations.reply(taken[0], "I'll take it from here.")
        return ChatResult(text="Let me check that.")

    model = Recorder("scripted", answer)
    with AgentCore.open(tmp_path / "a.db", plugins=[model], default_chat_model="scripted") as core:
        ws = core.workspace("acme")
        agent = ws.agents.create(name="Support")
        conversation = ws.chat.send(agent.id, "Where is my parcel?").conversationId
        taken.append(conversation)
        answered = ws.chat.send(agent.id, "It was due Monday.", conversation)
        assert answered.status == "completed"
        assert ws.conversations.get(conversation).status == "handed_off"
        roles = [m.role for m in ws.conversations.messages(conversation).messages]
        assert roles == ["user", "assistant", "operator", "user", "assistant"]
