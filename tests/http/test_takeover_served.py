"""A person takes a handed-off conversation over, through a real ``agentcore serve`` on
both stores: the user's message and the operator's reply reach a webhook receiver on
127.0.0.1 as signed ``conversation.message`` events, and releasing the conversation
gives it back to the agent."""

from __future__ import annotations

import json

import pytest
from helpers import cli_env, cli_json, start_serve
from processes import reap
from standardwebhooks.webhooks import Webhook
from webhook_receiver import Receiver

from agentcore import Client

pytestmark = [pytest.mark.both_stores, pytest.mark.slow]  # a server process per test


def test_a_person_takes_over_and_hears_of_each_message(store_url: str) -> None:
    keys = cli_json("init", "--org", "demo", "--json", db=store_url)["keys"]  # type: ignore[arg-type]
    key = next(k["secret"] for k in keys if k["environment"] == "test")
    env = {**cli_env(), "AGENTCORE_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8"}
    process, url = start_serve(store_url, key, env=env)  # type: ignore[arg-type]
    try:
        with Receiver() as receiver, Client(url, key) as client:
            subscription = client.subscribe(receiver.url(), ["conversation.message"])
            agent = client.create_agent(name="Support", role="support")
            handoff = client.chat(agent.id, "I want to talk to a human")
            conversation = handoff.conversationId
            assert client.get_conversation(conversation).status == "handed_off"

            kept = client.chat(agent.id, "My order 1234 is late.", conversation)
            assert (kept.status, kept.response) == ("handed_off", "")
            reply = client.reply(conversation, "Ana here: it ships today.")
            assert reply.role == "operator"
            assert receiver.wait_for(2, timeout=60)

            back = client.release(conversation)
            assert back.status == "active"
            answered = client.chat(agent.id, "Thanks!", conversation)
            assert answered.status == "completed"
            roles = [m.role for m in client.list_messages(conversation).messages]
            assert roles == ["user", "assistant", "user", "operator", "user", "assistant"]

            verifier = Webhook(subscription.secret)
            delivered = []
            for received in receiver.requests():
                payload = verifier.verify(received.body, received.headers)  # signed, fresh
                delivered.append(payload)
            # A subscription has more than one delivery in flight, so they may arrive in
            # either order (as Svix's do): the events' own timestamps give the order.
            delivered.sort(key=lambda payload: payload["timestamp"])
            assert [json.loads(r.body)["type"] for r in receiver.requests()] == [
                "conversation.message",
                "conversation.message",
            ]
            assert [(p["data"]["role"], p["data"]["content"]) for p in delivered] == [
                ("user", "My order 1234 is late."),
                ("operator", "Ana here: it ships today."),
            ]
            assert {p["data"]["conversation_id"] for p in delivered} == {conversation}
    finally:
        reap(process)
