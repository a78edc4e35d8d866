"""Rating an answer: ``POST /v1/conversations/{id}/messages/{message_id}/feedback`` on
both stores, over HTTP, the Python API and the client; and the ``message.feedback``
event reaching a real webhook receiver, signed, through a real ``agentcore serve``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import Api, Keys
from helpers import cli_env, cli_json, start_serve
from processes import reap
from standardwebhooks.webhooks import Webhook
from webhook_receiver import Receiver

from agentcore import AgentCore, Client
from agentcore.errors import Conflict, ValidationFailed


def answered(api: Api, user: dict[str, Any] | None = None) -> tuple[str, list[dict[str, Any]]]:
    agent = api.post("/v1/agents", json={"name": "Helper"}).json()["id"]
    body: dict[str, Any] = {"agentId": agent, "message": "Where do visitors park?"}
    if user is not None:
        body["user"] = user
    conversation = api.post("/v1/chat/message", json=body).json()["conversationId"]
    messages = api.get(f"/v1/conversations/{conversation}/messages").json()["messages"]
    return conversation, messages


def rate(api: Api, conversation: str, message: str, body: Any, status: int = 200) -> Any:
    response = api.post(f"/v1/conversations/{conversation}/messages/{message}/feedback", json=body)
    assert response.status_code == status, response.text
    return response.json()


def test_an_answer_is_rated_and_a_second_rating_replaces_the_first(
    api: Api, core: AgentCore
) -> None:
    events: list[Any] = []
    core.events.subscribe("message.feedback", events.append)
    conversation, messages = answered(api, {"id": "ana"})
    question, answer = messages
    assert "feedback" not in answer
    rated = rate(api, conversation, answer["id"], {"rating": "down", "reason": "Wrong floor."})
    assert rated["id"] == answer["id"] and rated["content"] == answer["content"]
    assert rated["feedback"]["rating"] == "down" and rated["feedback"]["reason"] == "Wrong floor."
    again = rate(api, conversation, answer["id"], {"rating": "up"})
    assert again["feedback"]["rating"] == "up" and again["feedback"]["reason"] is None
    listed = api.get(f"/v1/conversations/{conversation}/messages").json()["messages"]
    assert listed[1]["feedback"]["rating"] == "up" and "feedback" not in listed[0]
    # the conversation's end user travels with the event
    assert [(e.data["rating"], e.data["reason"], e.data["user"]) for e in events] == [
        ("down", "Wrong floor.", "ana"),
        ("up", None, "ana"),
    ]
    assert {e.data["message_id"] for e in events} == {answer["id"]}


def test_bad_ratings_are_refused_and_change_nothing(api: Api, keys: Keys) -> None:
    conversation, (question, answer) = answered(api)
    for body, param in [
        ({"rating": "meh"}, "rating"),
        ({}, "rating"),
        ({"rating": "up", "reason": "x" * 1001}, "reason"),
        ({"rating": "up", "extra": 1}, "extra"),
    ]:
        problem = rate(api, conversation, answer["id"], body, 422)
        assert problem["param"] == param, body
    not_answer = rate(api, conversation, question["id"], {"rating": "up"}, 409)
    assert not_answer["code"] == "not_an_answer" and not_answer["param"] == "message_id"
    missing = rate(api, conversation, "msg_missing", {"rating": "up"}, 404)
    assert missing["param"] == "message_id"
    assert rate(api, "conv_missing", answer["id"], {"rating": "up"}, 404)["status"] == 404
    stranger = api.with_key(keys.make("globex").secret)
    response = stranger.post(
        f"/v1/conversations/{conversation}/messages/{answer['id']}/feedback",
        json={"rating": "up"},
    )
    assert response.status_code == 404
    reader = api.with_key(keys.make(scopes=("read",)).secret)  # read scope is enough
    response = reader.post(
        f"/v1/conversations/{conversation}/messages/{answer['id']}/feedback",
        json={"rating": "down"},
    )
    assert response.status_code == 200
    listed = api.get(f"/v1/conversations/{conversation}/messages").json()["messages"]
    assert listed[1]["feedback"]["rating"] == "down" and "feedback" not in listed[0]


def test_the_python_api_rates_and_checks(tmp_path: Any) -> None:
    with AgentCore.open(tmp_path / "a.db") as core:
        ws = core.workspace("acme", "test")
        agent = ws.agents.create(name="x")
        conversation = ws.chat.send(agent.id, "Hello").conversationId
        question, answer = ws.conversations.messages(conversation).messages
        rated = ws.conversations.feedback(conversation, answer.id, "up", "Clear.")
        assert rated.feedback is not None and rated.feedback.reason == "Clear."
        with pytest.raises(ValidationFailed) as refused:
            ws.conversations.feedback(conversation, answer.id, "sideways")  # type: ignore[arg-type]
        assert refused.value.param == "rating"
        with pytest.raises(Conflict):
            ws.conversations.feedback(conversation, question.id, "up")


@pytest.mark.slow
@pytest.mark.both_stores
def test_a_served_rating_reaches_a_webhook_receiver(store_url: str) -> None:
    keys = cli_json("init", "--org", "demo", "--json", db=store_url)["keys"]  # type: ignore[arg-type]
    key = next(k["secret"] for k in keys if k["environment"] == "test")
    env = {**cli_env(), "AGENTCORE_OUTBOUND_ALLOWED_NETWORKS": "127.0.0.0/8"}
    process, url = start_serve(store_url, key, env=env)  # type: ignore[arg-type]
    try:
        with Receiver() as receiver, Client(url, key) as client:
            subscription = client.subscribe(receiver.url(), ["message.feedback"])
            agent = client.create_agent(name="Support")
            conversation = client.chat(agent.id, "Hello there").conversationId
            answer = client.list_messages(conversation).messages[-1]
            rated = client.feedback(conversation, answer.id, "down", "Not helpful.")
            assert rated.feedback is not None and rated.feedback.rating == "down"
            assert receiver.wait_for(1, timeout=60)
            (received,) = receiver.requests()
            payload = Webhook(subscription.secret).verify(received.body, received.headers)
            assert payload["type"] == "message.feedback"
            assert payload["data"]["message_id"] == answer.id
            assert (payload["data"]["rating"], payload["data"]["reason"]) == (
                "down",
                "Not helpful.",
            )
            assert json.loads(received.body)["data"]["conversation_id"] == conversation
    finally:
        reap(process)
