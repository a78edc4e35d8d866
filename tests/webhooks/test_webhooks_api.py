"""/v1/webhooks over uvicorn and ASGI: subscribe, list, get, delete, scopes, URL checks,
test pings and the deliveries log (against a real receiver on 127.0.0.1)."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import pytest
from conftest import Api
from helpers import assert_problem
from standardwebhooks.webhooks import Webhook
from webhook_receiver import Receiver, Reply

from agentcore import AgentCore, ValidationFailed
from agentcore.schema import MAX_WEBHOOK_DESCRIPTION
from agentcore_starlette import create_app


def _subscribe(
    api: Api, url: str, events: list[str] | None = None, description: str | None = None, **kw
) -> dict:
    body = {"url": url, "events": events or ["agent.action"], "description": description}
    response = api.post("/v1/webhooks/subscribe", json=body, **kw)
    assert response.status_code == 201, response.text
    return response.json()


def test_subscribe_returns_the_secret_once(api: Api, receiver: Receiver) -> None:
    url = receiver.url("/hook")
    response = api.post(
        "/v1/webhooks/subscribe", json={"url": url, "events": ["agent.action", "agent.error"]}
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["id"].startswith("whk_")
    assert body["status"] == "active"
    assert body["url"] == url
    assert sorted(body["events"]) == ["agent.action", "agent.error"]
    assert body["secret"].startswith("whsec_") and len(body["secret"]) > 20
    datetime.fromisoformat(body["created_at"].replace("Z", "+00:00"))

    got = api.get(f"/v1/webhooks/{body['id']}")
    assert got.status_code == 200, got.text
    assert "secret" not in got.json()
    assert body["secret"] not in got.text
    assert got.json()["id"] == body["id"] and got.json()["status"] == "active"

    listed = api.get("/v1/webhooks")
    assert listed.status_code == 200, listed.text
    assert body["secret"] not in listed.text
    assert [w["id"] for w in listed.json()["webhooks"]] == [body["id"]]
    assert all("secret" not in w for w in listed.json()["webhooks"])


def test_the_collections_post_subscribes_too(api: Api, keys, receiver: Receiver) -> None:
    """``POST /v1/webhooks`` (where a first-hour user tries it: it was a bare 405) makes
    the same subscription as ``POST /v1/webhooks/subscribe``, with the same checks."""
    body = {"url": receiver.url("/hook"), "events": ["agent.handoff"]}
    made = api.post("/v1/webhooks", json=body)
    assert made.status_code == 201, made.text
    assert made.json()["secret"].startswith("whsec_")
    assert made.json()["url"] == body["url"] and made.json()["events"] == ["agent.handoff"]
    assert [w["id"] for w in api.get("/v1/webhooks").json()["webhooks"]] == [made.json()["id"]]
    assert_problem(api.post("/v1/webhooks", json={"url": "ftp://x"}), 422, "validation_error")
    reader = api.with_key(keys.make(scopes=("read",)).secret)
    assert_problem(reader.post("/v1/webhooks", json=body), 403, "insufficient_scope")


def test_list_is_paginated_newest_first(api: Api, receiver: Receiver) -> None:
    ids = [_subscribe(api, receiver.url(f"/h{n}"))["id"] for n in range(3)]
    first = api.get("/v1/webhooks", params={"limit": 2})
    assert first.status_code == 200, first.text
    page = first.json()
    assert set(page) >= {"webhooks", "has_more"}
    assert [w["id"] for w in page["webhooks"]] == [ids[2], ids[1]]
    assert page["has_more"] is True
    second = api.get("/v1/webhooks", params={"limit": 2, "starting_after": ids[1]}).json()
    assert [w["id"] for w in second["webhooks"]] == [ids[0]]
    assert second["has_more"] is False


def test_delete_then_404(api: Api, receiver: Receiver) -> None:
    sub = _subscribe(api, receiver.url())
    deleted = api.delete(f"/v1/webhooks/{sub['id']}")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["id"] == sub["id"]
    assert_problem(api.get(f"/v1/webhooks/{sub['id']}"), 404, "resource_missing")
    assert_problem(api.delete(f"/v1/webhooks/{sub['id']}"), 404, "resource_missing")
    assert api.get("/v1/webhooks").json()["webhooks"] == []


def test_other_org_and_other_environment_see_404(api: Api, keys, receiver: Receiver) -> None:
    sub = _subscribe(api, receiver.url())
    other_org = api.with_key(keys.make("globex").secret)
    live = api.with_key(keys.make("acme", "live").secret)
    for stranger in (other_org, live):
        assert_problem(stranger.get(f"/v1/webhooks/{sub['id']}"), 404, "resource_missing")
        assert_problem(stranger.delete(f"/v1/webhooks/{sub['id']}"), 404, "resource_missing")
        assert_problem(
            stranger.get(f"/v1/webhooks/{sub['id']}/deliveries"), 404, "resource_missing"
        )
        assert_problem(stranger.post(f"/v1/webhooks/{sub['id']}/test"), 404, "resource_missing")
        assert stranger.get("/v1/webhooks").json()["webhooks"] == []
    assert api.get(f"/v1/webhooks/{sub['id']}").status_code == 200


@pytest.mark.parametrize(
    ("events", "code"),
    [
        (["agent.nope"], "unknown_event_kind"),
        (["agent.action", "webhook.ping"], "unknown_event_kind"),
        ([], "validation_error"),
    ],
)
def test_bad_event_lists_refused(api: Api, receiver: Receiver, events, code) -> None:
    response = api.post("/v1/webhooks/subscribe", json={"url": receiver.url(), "events": events})
    body = assert_problem(response, 422, code)
    assert body["param"] is not None and body["param"].startswith("events")
    assert api.get("/v1/webhooks").json()["webhooks"] == []


@pytest.mark.parametrize(
    "url",
    [
        "ftp://127.0.0.1/hook",
        "http:///hook",
        "http://user:pass@127.0.0.1/hook",
        "127.0.0.1/hook",
        "not a url",
        "https://xn--/hook",  # an IDNA label that does not decode
    ],
)
def test_bad_urls_refused(api: Api, url: str) -> None:
    response = api.post("/v1/webhooks/subscribe", json={"url": url, "events": ["agent.action"]})
    assert 400 <= response.status_code < 500, response.text
    assert response.json()["param"] == "url", response.text
    assert api.get("/v1/webhooks").json()["webhooks"] == []


def test_a_host_that_is_not_idna_is_an_invalid_url(api: Api) -> None:
    response = api.post(
        "/v1/webhooks/subscribe", json={"url": "https://xn--/hook", "events": ["agent.action"]}
    )
    assert_problem(response, 422, "invalid_url", param="url")


def test_description_is_capped_alike_over_http_and_in_python(
    api: Api, core: AgentCore, receiver: Receiver
) -> None:
    url, most = receiver.url(), MAX_WEBHOOK_DESCRIPTION
    body = {"url": url, "events": ["agent.action"], "description": "x" * (most + 1)}
    assert_problem(api.post("/v1/webhooks/subscribe", json=body), 422, "validation_error")
    ws = core.workspace("acme", "test")
    with pytest.raises(ValidationFailed) as refused:
        ws.webhooks.subscribe(url, ["agent.action"], "x" * (most + 1))
    assert (refused.value.code, refused.value.param) == ("validation_error", "description")
    assert api.get("/v1/webhooks").json()["webhooks"] == []
    assert ws.webhooks.subscribe(url, ["agent.action"], "x" * most).description == "x" * most
    assert _subscribe(api, url, description="y" * most)["description"] == "y" * most


def test_a_test_ping_to_a_disabled_subscription_is_409(
    api: Api, core: AgentCore, receiver: Receiver
) -> None:
    sub = _subscribe(api, receiver.url("/hook"))
    core.store.update_subscription(sub["id"], status="disabled", disabled_reason="gone")
    refused = api.post(f"/v1/webhooks/{sub['id']}/test")
    assert_problem(refused, 409, "subscription_disabled", param="id")
    assert api.get(f"/v1/webhooks/{sub['id']}/deliveries").json()["deliveries"] == []
    assert api.post(f"/v1/webhooks/{sub['id']}/enable").status_code == 200
    assert api.post(f"/v1/webhooks/{sub['id']}/test").status_code == 202


def test_live_mode_requires_https(api: Api, keys, receiver: Receiver) -> None:
    live = api.with_key(keys.make("acme", "live").secret)
    response = live.post(
        "/v1/webhooks/subscribe", json={"url": receiver.url(), "events": ["agent.action"]}
    )
    assert_problem(response, 403, "https_required", param="url")


def test_default_configuration_refuses_loopback(tmp_path: Path, receiver: Receiver) -> None:
    with AgentCore.open(tmp_path / "b.db") as strict:
        assert strict.settings.webhook_allowed_networks == ()
        key = strict.keys.create(strict.create_organization("acme").name, "test", ["read", "write"])
        api = Api(create_app(strict), None, key.secret)
        for url in (receiver.url(), f"http://localhost:{receiver.port}/hook"):
            response = api.post(
                "/v1/webhooks/subscribe", json={"url": url, "events": ["agent.action"]}
            )
            assert_problem(response, 403, "url_not_allowed", param="url")
        assert api.get("/v1/webhooks").json()["webhooks"] == []


def test_read_key_can_look_but_not_change(api: Api, keys, receiver: Receiver) -> None:
    sub = _subscribe(api, receiver.url())
    reader = api.with_key(keys.make(scopes=("read",)).secret)
    assert reader.get("/v1/webhooks").status_code == 200
    assert reader.get(f"/v1/webhooks/{sub['id']}").status_code == 200
    assert reader.get(f"/v1/webhooks/{sub['id']}/deliveries").status_code == 200
    attempts = [
        reader.post(
            "/v1/webhooks/subscribe", json={"url": receiver.url(), "events": ["agent.action"]}
        ),
        reader.delete(f"/v1/webhooks/{sub['id']}"),
        reader.post(f"/v1/webhooks/{sub['id']}/rotate-secret"),
        reader.post(f"/v1/webhooks/{sub['id']}/test"),
        reader.post(f"/v1/webhooks/{sub['id']}/enable"),
    ]
    for response in attempts:
        assert_problem(response, 403, "insufficient_scope")
    assert [w["id"] for w in api.get("/v1/webhooks").json()["webhooks"]] == [sub["id"]]
    assert receiver.count() == 0


def test_test_ping_is_delivered_and_logged(api: Api, core: AgentCore, receiver: Receiver) -> None:
    receiver.script("/hook", [Reply(500)], then=Reply(204))
    sub = _subscribe(api, receiver.url("/hook"))
    core.start()  # the uvicorn variant's lifespan already did; ASGI has none
    response = api.post(f"/v1/webhooks/{sub['id']}/test")
    assert response.status_code == 202, response.text
    assert response.json()["id"] == sub["id"]
    assert receiver.wait_for(1), "no ping arrived"
    first = receiver.requests()[0]
    payload = Webhook(sub["secret"]).verify(first.body, first.headers)
    assert payload["type"] == "webhook.ping"
    assert payload["data"]["subscription_id"] == sub["id"]
    assert set(payload) == {"id", "type", "timestamp", "data"}
    assert payload["id"] == first.headers["webhook-id"]

    # the 500 is retried ~5 s later; the log shows that first attempt meanwhile (the
    # worker records it just after the receiver answered: poll briefly for it)
    deadline = time.monotonic() + 5
    while True:
        logged = api.get(f"/v1/webhooks/{sub['id']}/deliveries")
        assert logged.status_code == 200, logged.text
        page = logged.json()
        if page["deliveries"][0]["attempts"] or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert page["has_more"] is False
    [delivery] = page["deliveries"]
    assert delivery["event_type"] == "webhook.ping"
    assert delivery["event_id"] == first.webhook_id
    assert delivery["status"] == "pending"
    [attempt] = delivery["attempts"]
    assert attempt["status_code"] == 500
    when = datetime.fromisoformat(attempt["attempted_at"].replace("Z", "+00:00"))
    assert abs(when.timestamp() - first.wall) < 5
    assert attempt["duration_ms"] >= 0


def test_deliveries_show_success_and_error(api: Api, core: AgentCore, receiver: Receiver) -> None:
    sub = _subscribe(api, receiver.url("/ok"))
    dead = _subscribe(api, "http://127.0.0.1:9/closed")  # discard port: connection refused
    core.start()
    event = core.workspace("acme", "test").publish("agent.action", {"action": "reply.sent"})
    assert receiver.wait_for(1)
    deadline = time.monotonic() + 5
    while True:  # bounded: both attempts recorded
        ok = api.get(f"/v1/webhooks/{sub['id']}/deliveries").json()["deliveries"]
        failed = api.get(f"/v1/webhooks/{dead['id']}/deliveries").json()["deliveries"]
        if ok and failed and ok[0]["attempts"] and failed[0]["attempts"]:
            break
        assert time.monotonic() < deadline, (ok, failed)
        time.sleep(0.1)
    [ok] = ok
    assert ok["event_id"] == event.id and ok["status"] == "succeeded", repr(ok["attempts"])
    assert [a["status_code"] for a in ok["attempts"]] == [200]
    [failed] = failed
    assert failed["status"] == "pending" and failed["next_attempt_at"] is not None
    [attempt] = failed["attempts"]
    assert attempt["status_code"] is None and attempt["error"]
