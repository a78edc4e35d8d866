"""Tenant isolation matrix, built from the route table so new routes are covered.

Organization A (``acme``/test) owns an agent, a document and a webhook subscription.
Every route in ``ROUTES`` is then called with A's object ids substituted into its path
and a valid body, by keys of {A, B} x {test, live} x {read, write, read+write}:

- a key without the route's scope gets 403 ``insufficient_scope``;
- any other workspace (other organization or other environment) never gets a 2xx for
  a route naming one of A's objects (404 ``resource_missing``), chat with A's agent is
  a 404 (OpenAI's ``model_not_found`` on its route), and no 2xx answer (lists, search,
  verify, the OpenAI model list, creations) contains any of A's ids or text;
- A's own keys read everything of A (mutating routes are not run with A's keys, so A
  stays as it was);

and afterwards A's objects are fetched with A's key and must be exactly as before.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import assert_problem

import agentcore
from agentcore import AgentCore
from agentcore.chat_models import ChatRequest, ChatResult
from agentcore.schema import (
    AgentCreate,
    AgentUpdate,
    ChatMessageRequest,
    DocumentUpdate,
    FeedbackCreate,
    OperatorMessageCreate,
    SearchRequest,
    TextDocumentCreate,
    WebhookSubscribeRequest,
)
from agentcore_starlette import create_app
from agentcore_starlette.openai.requests import ChatCompletionRequest
from agentcore_starlette.routes import ROUTES
from agentcore_starlette.routing import ApiRoute

SECRET_WORD = "zyzzogetonquartz"  # appears only in A's document
SCOPE_SETS: dict[str, tuple[str, ...]] = {
    "read": ("read",),
    "write": ("write",),
    "read+write": ("read", "write"),
}
ORGS = ("acme", "globex")
ENVS = ("test", "live")


class EchoModel:
    """A chat model plugin that cites every passage it is given."""

    name = "echo"

    def complete(self, request: ChatRequest) -> ChatResult:
        return ChatResult(
            text=f"echo: {request.message}", used_passage_ids=[p.id for p in request.passages]
        )


class EchoPlugin:
    @agentcore.hookimpl
    def agentcore_register_chat_models(
        self, register: Callable[[Any], None], settings: Any
    ) -> None:
        register(EchoModel())


@dataclass
class Owned:
    """A's objects, and their state before the matrix ran."""

    agent_id: str
    document_id: str
    webhook_id: str
    conversation_id: str
    snapshot: dict[str, Any]
    message_id: str = "msg_x"  # the agent's answer in the conversation

    @property
    def ids(self) -> dict[str, str]:
        return {
            "agent_id": self.agent_id,
            "document_id": self.document_id,
            "webhook_id": self.webhook_id,
            "conversation_id": self.conversation_id,
            "message_id": self.message_id,
        }

    def markers(self) -> list[str]:
        """Strings that must never appear in another workspace's answers."""
        return [*self.ids.values(), SECRET_WORD]


# recipes: how to call each route ---------------------------------------------------

PATH_PARAM = re.compile(r"{(\w+)}")


def webhook_url(env: str) -> str:
    scheme = "https" if env == "live" else "http"  # live subscriptions must be https
    return f"{scheme}://127.0.0.1:9/x"


def body_for(route: ApiRoute, owned: Owned, env: str) -> dict[str, Any] | None:
    """A valid JSON body for ``route``; fails loudly for a request model without a recipe."""
    if route.body == "none":
        return None
    recipes: dict[type, dict[str, Any]] = {
        AgentCreate: {"name": "intruder", "role": "support"},
        AgentUpdate: {"name": "renamed by someone", "system_prompt": "leak everything"},
        TextDocumentCreate: {"source": "intruder.txt", "text": "An intruder wrote this."},
        DocumentUpdate: {"metadata": {"owner": "intruder"}},
        SearchRequest: {"query": f"{SECRET_WORD} warranty", "top_k": 100},
        ChatMessageRequest: {"agentId": owned.agent_id, "message": f"What is {SECRET_WORD}?"},
        OperatorMessageCreate: {"content": "An intruder's reply."},
        FeedbackCreate: {"rating": "down", "reason": "An intruder's rating."},
        WebhookSubscribeRequest: {"url": webhook_url(env), "events": ["agent.action"]},
        ChatCompletionRequest: {
            "model": owned.agent_id,
            "messages": [{"role": "user", "content": f"What is {SECRET_WORD}?"}],
        },
    }
    if route.request not in recipes:
        pytest.fail(
            f"{route.method} {route.path}: no body recipe for {route.request!r}; "
            "add one to tests/http/test_isolation.py"
        )
    return recipes[route.request]


def path_for(route: ApiRoute, owned: Owned) -> str:
    """The route's path with A's object ids; fails loudly for an unknown parameter."""
    ids = owned.ids

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in ids:
            pytest.fail(f"{route.method} {route.path}: no recipe for path parameter {name!r}")
        return ids[name]

    return "/v1" + PATH_PARAM.sub(substitute, route.path)


CHATS = (ChatMessageRequest, ChatCompletionRequest)
"""The bodies of a chat turn (agentcore's own route's and OpenAI's)."""


def names_an_object_of_a(route: ApiRoute) -> bool:
    """Routes whose path or body names one of A's objects."""
    return bool(PATH_PARAM.search(route.path)) or route.request in CHATS


def assert_refused(response: httpx.Response, route: ApiRoute, status: int, code: str) -> None:
    """A refusal in the route's error format: a problem, or OpenAI's envelope (whose
    code for an unknown agent is OpenAI's ``model_not_found``)."""
    if route.error_format == "problem":
        assert_problem(response, status, code)
        return
    assert response.status_code == status, (response.status_code, response.text)
    if code == "resource_missing":  # OpenAI's routes name only agents ("models")
        code = "model_not_found"
    assert response.json()["error"]["code"] == code, response.text


def mutates(route: ApiRoute) -> bool:
    return route.scope == "write"


def changes_a(route: ApiRoute) -> bool:
    """Routes that change what A's key sees of A's objects when A calls them: its writes,
    and rating an answer (a read-scope route: the people an answer was for rate it)."""
    return mutates(route) or route.path.endswith("/feedback")


# fixtures --------------------------------------------------------------------------


@pytest.fixture
def iso_core(tmp_path: Path) -> Iterator[AgentCore]:
    core = AgentCore.open(
        tmp_path / "isolation.db",
        plugins=[EchoPlugin()],
        webhook_allowed_networks="127.0.0.0/8",
        rate_limit_test=1e6,
        rate_limit_live=1e6,
    )
    yield core
    core.close()


class Session:
    """All requests of one test on one event loop over the ASGI app."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def run(self, calls: list[tuple[str, str, str, dict[str, Any] | None]]) -> list[httpx.Response]:
        """``calls`` are ``(key, method, path, json_body)``."""

        async def go() -> list[httpx.Response]:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://asgi") as client:
                out = []
                for key, method, path, body in calls:
                    response = await client.request(
                        method,
                        path,
                        json=body,
                        headers={"Authorization": f"Bearer {key}"},
                    )
                    await response.aread()
                    out.append(response)
                return out

        return asyncio.run(go())

    def one(self, key: str, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = self.run([(key, method, path, body)])[0]
        assert response.is_success, (method, path, response.status_code, response.text)
        return response.json()


def set_up_a(session: Session, key: str) -> Owned:
    agent = session.one(
        key, "POST", "/v1/agents", {"name": "A's agent", "role": "support", "model": "echo"}
    )
    session.one(key, "POST", f"/v1/agents/{agent['id']}/deploy")
    document = session.one(
        key,
        "POST",
        "/v1/knowledge/documents",
        {"source": "a-handbook.txt", "text": f"The {SECRET_WORD} warranty lasts two years."},
    )
    webhook = session.one(
        key,
        "POST",
        "/v1/webhooks/subscribe",
        {"url": webhook_url("test"), "events": ["agent.handoff"]},
    )
    answer = session.one(
        key, "POST", "/v1/chat/message", {"agentId": agent["id"], "message": "Hello?"}
    )
    conversation = answer["conversationId"]
    said = session.one(key, "GET", f"/v1/conversations/{conversation}/messages")
    owned = Owned(agent["id"], document["id"], webhook["id"], conversation, {})
    owned.message_id = said["messages"][-1]["id"]
    owned.snapshot = snapshot(session, key, owned)
    return owned


def snapshot(session: Session, key: str, owned: Owned) -> dict[str, Any]:
    """Everything observable about A's objects through A's key."""
    search = session.one(key, "POST", "/v1/knowledge/search", {"query": SECRET_WORD, "top_k": 100})
    return {
        "agent": session.one(key, "GET", f"/v1/agents/{owned.agent_id}"),
        "document": session.one(key, "GET", f"/v1/knowledge/documents/{owned.document_id}"),
        "webhook": session.one(key, "GET", f"/v1/webhooks/{owned.webhook_id}"),
        "deliveries": session.one(key, "GET", f"/v1/webhooks/{owned.webhook_id}/deliveries"),
        "agents": [a["id"] for a in session.one(key, "GET", "/v1/agents")["agents"]],
        "archived": session.one(key, "GET", "/v1/agents?status=archived")["agents"],
        "documents": [
            (d["id"], d["metadata"])
            for d in session.one(key, "GET", "/v1/knowledge/documents")["documents"]
        ],
        "webhooks": [w["id"] for w in session.one(key, "GET", "/v1/webhooks")["webhooks"]],
        "search": [(r["document_id"], r["chunk"]) for r in search["results"]],
        "conversation": session.one(key, "GET", f"/v1/conversations/{owned.conversation_id}"),
        "messages": session.one(key, "GET", f"/v1/conversations/{owned.conversation_id}/messages"),
    }


# the matrix -------------------------------------------------------------------------


def test_every_route_has_a_recipe() -> None:
    owned = Owned("agt_x", "doc_x", "wh_x", "conv_x", {})
    for route in ROUTES:
        assert path_for(route, owned).startswith("/v1/")
        for env in ENVS:
            body = body_for(route, owned, env)
            if body is not None:
                assert route.request is not None
                route.request.model_validate(body)  # the recipe is a valid body


@pytest.mark.slow
def test_isolation_matrix(iso_core: AgentCore) -> None:
    core = iso_core
    session = Session(create_app(core))
    keys: dict[tuple[str, str, str], str] = {}
    for org in ORGS:
        core.create_organization(org)
        for env in ENVS:
            for label, scopes in SCOPE_SETS.items():
                keys[(org, env, label)] = core.keys.create(org, env, scopes).secret
    owner = keys[("acme", "test", "read+write")]
    owned = set_up_a(session, owner)
    assert SECRET_WORD in str(owned.snapshot["search"])  # A can find its own text

    plan: list[tuple[tuple[str, str, str], ApiRoute, str, str, dict[str, Any] | None]] = []
    for (org, env, label), key in keys.items():
        own = (org, env) == ("acme", "test")
        for route in ROUTES:
            allowed = route.scope == "any" or route.scope in SCOPE_SETS[label]
            if own and allowed and changes_a(route):
                continue  # A's own writes would change A; other suites cover them
            plan.append(
                ((org, env, label), route, key, path_for(route, owned), body_for(route, owned, env))
            )
    responses = session.run([(key, r.method, path, body) for _, r, key, path, body in plan])

    checked = 0
    for ((org, env, label), route, _, path, _), response in zip(plan, responses, strict=True):
        where = f"{org}/{env} [{label}] {route.method} {path}"
        own = (org, env) == ("acme", "test")
        assert response.status_code < 500, (where, response.text)
        if route.scope != "any" and route.scope not in SCOPE_SETS[label]:
            assert_refused(response, route, 403, "insufficient_scope")
        elif own:
            assert response.is_success, (where, response.status_code, response.text)
            if route.response.__name__.endswith("List") and not PATH_PARAM.search(route.path):
                assert any(i in response.text for i in owned.ids.values()), (where, response.text)
            if route.request is SearchRequest:
                assert owned.document_id in response.text, where
            if route.request in CHATS:
                assert response.json()["citations"] == [
                    {"source": "a-handbook.txt", "pages": [1]}
                ], where
        elif names_an_object_of_a(route):
            assert response.status_code == 404, (where, response.status_code, response.text)
            assert_refused(response, route, 404, "resource_missing")
        else:
            assert response.is_success, (where, response.status_code, response.text)
            seen = response.text
            if route.request is SearchRequest:  # the query is echoed back: check the results
                seen = json.dumps(response.json()["results"])
            leaked = [m for m in owned.markers() if m in seen]
            assert not leaked, (where, leaked, response.text)
        checked += 1
    # every route ran for all 12 keys, except A's own writes (by the two of A's keys that
    # hold the route's scope: write and read+write, or read and read+write)
    assert checked == len(ROUTES) * 12 - 2 * len([r for r in ROUTES if changes_a(r)])

    # A's objects are exactly as they were, seen through A's key
    assert snapshot(session, owner, owned) == owned.snapshot


def test_other_workspaces_see_only_their_own_objects(iso_core: AgentCore) -> None:
    """Each workspace's lists and search show exactly what it created, nothing else."""
    core = iso_core
    session = Session(create_app(core))
    made: dict[tuple[str, str], dict[str, str]] = {}
    keys: dict[tuple[str, str], str] = {}
    for org in ORGS:
        core.create_organization(org)
        for env in ENVS:
            key = keys[(org, env)] = core.keys.create(org, env, ["read", "write"]).secret
            word = f"marker{org}{env}"
            made[(org, env)] = {
                "agent": session.one(key, "POST", "/v1/agents", {"name": word})["id"],
                "document": session.one(
                    key, "POST", "/v1/knowledge/documents", {"source": word, "text": f"{word} text"}
                )["id"],
                "webhook": session.one(
                    key,
                    "POST",
                    "/v1/webhooks/subscribe",
                    {"url": webhook_url(env), "events": ["agent.action"]},
                )["id"],
                "word": word,
            }
    for (org, env), key in keys.items():
        mine = made[(org, env)]
        assert [a["id"] for a in session.one(key, "GET", "/v1/agents")["agents"]] == [mine["agent"]]
        assert [
            d["id"] for d in session.one(key, "GET", "/v1/knowledge/documents")["documents"]
        ] == [mine["document"]]
        assert [w["id"] for w in session.one(key, "GET", "/v1/webhooks")["webhooks"]] == [
            mine["webhook"]
        ]
        for other, theirs in made.items():
            result = session.one(
                key, "POST", "/v1/knowledge/search", {"query": theirs["word"], "top_k": 100}
            )
            found = {r["document_id"] for r in result["results"]}
            assert found <= {mine["document"]}, ((org, env), other, found)
            if other == (org, env):
                assert found == {mine["document"]}


def test_a_write_only_key_can_run_every_write_route(iso_core: AgentCore) -> None:
    """Write routes need only 'write': no hidden 'read' check inside (fresh objects each)."""
    core = iso_core
    session = Session(create_app(core))
    core.create_organization("acme")
    key = core.keys.create("acme", "test", ["write"]).secret
    ws = core.workspace("acme", "test")
    write_routes = [r for r in ROUTES if mutates(r)]
    assert write_routes
    for route in write_routes:
        agent = ws.agents.create(name="w", model="echo")
        if route.path.endswith("/undeploy"):
            ws.agents.deploy(agent.id)
        document = ws.knowledge.ingest_text("w.txt", "write only")
        webhook = ws.webhooks.subscribe(webhook_url("test"), ["agent.action"], None)
        conversation = ws.chat.send(agent.id, "Hello?").conversationId
        owned = Owned(agent.id, document.id, webhook.id, conversation, {})
        path = path_for(route, owned)
        response = session.run([(key, route.method, path, body_for(route, owned, "test"))])[0]
        assert response.is_success, (route.method, path, response.status_code, response.text)
    for route in ROUTES:
        if route.scope == "read":
            owned = Owned("agt_x", "doc_x", "whk_x", "conv_x", {})
            response = session.run(
                [(key, route.method, path_for(route, owned), body_for(route, owned, "test"))]
            )[0]
            assert_refused(response, route, 403, "insufficient_scope")
