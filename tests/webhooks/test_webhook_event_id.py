"""The delivered webhook body carries ``id`` (= the ``webhook-id`` header), and the test
ping answers with the ids of the event and delivery it created — over a real uvicorn
server and a real receiver on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from conftest import ServerThread
from standardwebhooks.webhooks import Webhook
from webhook_receiver import Receiver

from agentcore import AgentCore, Client
from agentcore_starlette import create_app


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as rx:
        yield rx


@pytest.fixture
def served(core: AgentCore) -> Iterator[tuple[str, str]]:
    core.create_organization("acme")
    secret = core.keys.create("acme", "test", ["read", "write"]).secret
    with ServerThread(create_app(core)) as server:
        yield server.url, secret


def test_test_ping_body_carries_the_webhook_id(served: tuple[str, str], receiver: Receiver) -> None:
    url, key = served
    with Client(url, key) as client:
        sub = client.subscribe(receiver.url("/hook"), ["agent.action"])
        sent = client.test_webhook(sub.id)
        assert sent.id == sub.id and sent.status == "active"
        assert sent.event_id.startswith("evt_") and sent.delivery_id.startswith("dlv_")
        assert receiver.wait_for(1, path="/hook")
        got = receiver.requests("/hook")[0]
        body = json.loads(got.body)
        assert list(body) == ["id", "type", "timestamp", "data"]
        assert body["id"] == got.webhook_id == sent.event_id
        assert body["type"] == "webhook.ping"
        # the signature covers the body with its id
        Webhook(sub.secret).verify(got.body, got.headers)
        deliveries = client.webhook_deliveries(sub.id).deliveries
        assert [(d.id, d.event_id) for d in deliveries] == [(sent.delivery_id, sent.event_id)]


def test_published_event_body_id_matches_the_header(
    core: AgentCore, served: tuple[str, str], receiver: Receiver
) -> None:
    url, key = served
    with Client(url, key) as client:
        sub = client.subscribe(receiver.url("/events"), ["agent.error"])
    ws = core.workspace("acme", "test")
    event = core.events.publish(
        "agent.error",
        {"reason": "boom"},
        organization_id=ws.organization_id,
        environment="test",
    )
    assert receiver.wait_for(1, path="/events")
    got = receiver.requests("/events")[0]
    body = json.loads(got.body)
    assert body == {
        "id": event.id,
        "type": "agent.error",
        "timestamp": event.timestamp,
        "data": {"reason": "boom"},
    }
    assert got.webhook_id == event.id
    Webhook(sub.secret).verify(got.body, got.headers)


def test_test_ping_of_unknown_subscription_is_404(served: tuple[str, str]) -> None:
    url, key = served
    import httpx

    response = httpx.post(
        f"{url}/v1/webhooks/whk_missing/test", headers={"Authorization": f"Bearer {key}"}
    )
    assert response.status_code == 404
    assert response.json()["code"] == "resource_missing"
