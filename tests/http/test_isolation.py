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

``test_isolation_matrix_for_client_tokens`` does the same with client tokens of
{A, B} x {test, live} x {ana, bob} x {no group, "hr"} (and one of A's limited to one
agent), over every route and every MCP tool, in the variants that matter to an end
user: routes a token may not use are a 403; A's tokens search and get cited only the
documents their user (and groups) may read, and see only their user's conversations;
no other workspace's token gets a 2xx naming A's objects or sees A's ids or text.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import pytest
from helpers import assert_problem, where_cited

import agentcore
from agentcore import AgentCore
from agentcore.chat_models import ChatRequest, ChatResult
from agentcore.schema import (
    AgentCreate,
    AgentUpdate,
    ChatMessageRequest,
    ClientTokenCreate,
    ClientTokenRevoke,
    DocumentUpdate,
    FeedbackCreate,
    OperatorMessageCreate,
    SearchRequest,
    TextDocumentCreate,
    WebhookSubscribeRequest,
)
from agentcore_starlette import create_app
from agentcore_starlette.mcp.tools import (
    TOOLS,
    ChatWithAgentArguments,
    ListAgentsArguments,
    McpTool,
)
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
        ClientTokenCreate: {"user": "intruder"},
        ClientTokenRevoke: {"user": "intruder"},
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


def assert_refused(
    response: httpx.Response,
    route: ApiRoute,
    status: int,
    code: str,
    *,
    missing_agent: bool = True,
) -> None:
    """A refusal in the route's error format: a problem, or OpenAI's envelope (whose
    code for an unknown agent is OpenAI's ``model_not_found``; ``missing_agent=False``
    for another missing object, e.g. a chat's ``conversation_id``)."""
    if route.error_format == "problem":
        assert_problem(response, status, code)
        return
    assert response.status_code == status, (response.status_code, response.text)
    if code == "resource_missing" and missing_agent:  # an agent is a "model" there
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
def iso_core(store_url: str) -> Iterator[AgentCore]:
    """A core with the echo model on ``store_url``: a SQLite file, or for a test marked
    ``both_stores`` also an empty PostgreSQL database (tests/conftest.py)."""
    core = AgentCore.open(
        store_url,
        plugins=[EchoPlugin()],
        webhook_allowed_networks="127.0.0.0/8",
        rate_limit_test=1e6,
        rate_limit_live=1e6,
    )
    yield core
    core.close()


MCP_PATH = "/v1/mcp"
MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-06-18",
}


class Session:
    """All requests of one test over the ASGI app: each run on an event loop of its
    own, or, inside ``serving()``, all on one loop within the app's lifespan."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._runner: asyncio.Runner | None = None

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """Run the requests made meanwhile within the app's lifespan (``/v1/mcp`` needs
        it; its end stops the core): one task holds the lifespan open between them."""
        with asyncio.Runner() as runner:
            entered, leave = asyncio.Event(), asyncio.Event()

            async def hold() -> None:
                async with self.app.router.lifespan_context(self.app):
                    entered.set()
                    await leave.wait()

            async def enter() -> asyncio.Task[None]:
                task = asyncio.create_task(hold())
                await asyncio.wait(
                    [task, asyncio.create_task(entered.wait())], return_when="FIRST_COMPLETED"
                )
                if task.done():
                    task.result()  # the lifespan failed to start: raise why
                return task

            holder = runner.run(enter())
            self._runner = runner
            try:
                yield
            finally:
                self._runner = None

                async def leave_it() -> None:
                    leave.set()
                    await holder

                runner.run(leave_it())

    def run(self, calls: list[tuple[str, str, str, dict[str, Any] | None]]) -> list[httpx.Response]:
        """``calls`` are ``(key, method, path, json_body)``, made one after the other."""

        async def go() -> list[httpx.Response]:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://asgi") as client:
                out = []
                for key, method, path, body in calls:
                    headers = {"Authorization": f"Bearer {key}"}
                    if path == MCP_PATH:
                        headers.update(MCP_HEADERS)
                    response = await client.request(method, path, json=body, headers=headers)
                    await response.aread()
                    out.append(response)
                return out

        if self._runner is not None:
            return self._runner.run(go())
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
                assert where_cited(response.json()["citations"]) == [
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


# the client token matrix ------------------------------------------------------------
#
# Client tokens of {A, B} x {test, live} x {ana, bob} x {no group, "hr"} (minted by a
# read+write key of their workspace), and one of A's limited to another agent, call
# every route of ROUTES and every MCP tool, each in the variants that matter to an end
# user: a conversation route on the user's own conversation, another user's and one
# started with no user; a chat without a conversation, continuing each of those, and
# streamed; a search or chat with a `user` in the body (the token's own, with fewer
# groups, another user, or a group the token lacks).

A_USERS = ("ana", "bob")
GROUP_SETS: tuple[tuple[str, ...], ...] = ((), ("hr",))
HR_WORD = "quibblewortflange"  # appears only in A's document for the group hr
ANA_WORD = "vorpelstiltquine"  # appears only in A's document for the user ana
CONVERSATION_TARGETS = ("own", "other", "nobody")
"""Whose conversation a route names: the token's user's, the other user's, or the one
A's key started with no user."""
BODY_USERS = ("self", "self_without_groups", "other_user", "extra_group")
"""The ``user`` a search or chat body names: the token's (with its groups, or none of
them), or one a token may not act for (another user; its own with a group it lacks)."""
REFUSED_BODY_USERS = ("other_user", "extra_group")
CONVERSATION_ID = re.compile(r"conv_[A-Za-z0-9]+")


@dataclass(frozen=True)
class ADocument:
    """One of A's documents, with who may read it (``access``: ``None`` is everyone)."""

    id: str
    source: str
    word: str
    access: dict[str, list[str]] | None

    def readable_by(self, user: str, groups: Collection[str]) -> bool:
        if self.access is None:
            return True
        users, named = self.access.get("users", []), self.access.get("groups", [])
        return user in users or bool(set(groups) & set(named))


@dataclass
class AccessFixtures:
    """A's objects for the token matrix, besides ``Owned``: its documents with and
    without access lists, a conversation of each of ``A_USERS``, and a draft agent."""

    owned: Owned
    documents: list[ADocument]
    conversations: dict[str, tuple[str, str]]  # end user -> (conversation, its answer)
    draft_agent_id: str

    def markers(self) -> list[str]:
        """Strings that must never appear in another workspace's answers."""
        return [
            *self.owned.markers(),
            *(d.id for d in self.documents),
            *(d.word for d in self.documents),
            *(part for pair in self.conversations.values() for part in pair),
            self.draft_agent_id,
        ]


@dataclass(frozen=True)
class Token:
    """A client token of the matrix and what it was minted with."""

    org: str
    env: str
    user: str
    groups: tuple[str, ...]
    secret: str = field(repr=False)
    agents: tuple[str, ...] | None = None
    # the token's own conversation to delete (A's tokens), as (conversation, answer)
    doomed: tuple[str, str] | None = None

    @property
    def own(self) -> bool:
        """Whether it is a token of A's workspace."""
        return (self.org, self.env) == ("acme", "test")

    @property
    def other_user(self) -> str:
        return next(u for u in A_USERS if u != self.user)

    def __str__(self) -> str:
        limited = "" if self.agents is None else " limited"
        return f"{self.org}/{self.env} {self.user}{list(self.groups)}{limited}"


@dataclass(frozen=True)
class Variant:
    """How a route is called: which conversation it names (``new``: a chat without
    one), streamed or not, with which ``user`` in its body, over REST or MCP."""

    conversation: str | None = None
    stream: bool = False
    user: str | None = None
    mcp: bool = False


def variants(route: ApiRoute, *, mcp: bool = False) -> list[Variant]:
    """The variants a token calls ``route`` in (over MCP: no streams). A route a token
    may not call is called once: it is refused before anything else is looked at."""
    if not route.end_users:
        return [Variant(mcp=mcp)]
    if route.request in CHATS:
        return [
            *(
                Variant(conversation=c, stream=s, mcp=mcp)
                for c in ("new", *CONVERSATION_TARGETS)
                for s in ((False,) if mcp else (False, True))
            ),
            *(Variant(conversation="new", user=u, mcp=mcp) for u in BODY_USERS),
        ]
    if route.request is SearchRequest:
        return [Variant(mcp=mcp), *(Variant(user=u, mcp=mcp) for u in BODY_USERS)]
    if "{conversation_id}" in route.path:
        return [Variant(conversation=c, mcp=mcp) for c in CONVERSATION_TARGETS]
    return [Variant(mcp=mcp)]


def body_user(token: Token, variant: Variant) -> tuple[str, list[str]]:
    """The end user (id, groups) a variant's body names."""
    groups = list(token.groups)
    return {
        "self": (token.user, groups),
        "self_without_groups": (token.user, []),
        "other_user": (token.other_user, groups),
        "extra_group": (token.user, [*groups, "board"]),
    }[str(variant.user)]


def reader_of(token: Token, variant: Variant) -> tuple[str, tuple[str, ...]]:
    """Whom an allowed search or chat reads for: the body's user, else the token's."""
    if variant.user is None:
        return token.user, token.groups
    user, groups = body_user(token, variant)
    return user, tuple(groups)


def conversation_of(
    token: Token, route: ApiRoute, variant: Variant, fixtures: AccessFixtures
) -> tuple[str, str] | None:
    """The (conversation, answer) a variant names. DELETE on the token's own is its
    own ``doomed`` conversation: the shared ones stay for the other routes' checks (the
    tokens of another workspace name A's conversation of their user's name instead)."""
    target = variant.conversation
    if target in (None, "new"):
        return None
    if target == "nobody":
        return fixtures.owned.conversation_id, fixtures.owned.message_id
    user = token.user if target == "own" else token.other_user
    if target == "own" and route.method == "DELETE" and token.doomed is not None:
        return token.doomed
    return fixtures.conversations[user]


def token_request(
    token: Token, route: ApiRoute, variant: Variant, fixtures: AccessFixtures
) -> tuple[str, dict[str, Any] | None]:
    """The path and body of a call of ``route`` in ``variant`` by ``token``."""
    owned = fixtures.owned
    named = conversation_of(token, route, variant, fixtures)
    if named is not None:
        owned = replace(owned, conversation_id=named[0], message_id=named[1])
    path = path_for(route, owned)
    if route.method == "GET" and route.path == "/conversations":
        path += "?limit=100"  # all of the user's: the check looks for its own
    body = body_for(route, owned, token.env)
    if body is None:
        return path, None
    body = dict(body)
    if named is not None and route.request in CHATS:
        body["conversationId" if route.request is ChatMessageRequest else "conversation_id"] = (
            named[0]
        )
    if variant.stream:
        body["stream"] = True
    if variant.user is not None:
        user, groups = body_user(token, variant)
        if route.request is ChatCompletionRequest:
            body.update(user=user, user_groups=groups)
        else:
            body["user"] = {"id": user, "groups": groups}
    return path, body


def mcp_arguments(tool: McpTool, body: dict[str, Any] | None) -> dict[str, Any]:
    """A tool's arguments for the REST body of its route."""
    if tool.arguments is ChatWithAgentArguments:
        assert body is not None
        names = {"agentId": "agent_id", "conversationId": "conversation_id"}
        return {names.get(name, name): value for name, value in body.items()}
    if tool.arguments is ListAgentsArguments:
        return {}
    if tool.arguments is tool.route.request:
        return body or {}
    pytest.fail(f"MCP tool {tool.name}: no recipe for its arguments")


def mcp_call(name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
    """The JSON-RPC request of a ``tools/call`` (``tools/list`` without a name)."""
    if not name:
        return {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}


def as_rest(response: httpx.Response) -> httpx.Response:
    """An MCP tool's answer as its route's REST answer would be: its structured result
    (200), or the problem document it holds, with the problem's status and headers."""
    assert response.status_code == 200, (response.status_code, response.text)
    payload = response.json()
    assert "error" not in payload, payload
    result = payload["result"]
    content = result["structuredContent"]
    if not result["isError"]:
        return httpx.Response(200, json=content)
    headers = {"content-type": "application/problem+json", "request-id": content["request_id"]}
    return httpx.Response(content["status"], json=content, headers=headers)


def set_up_access(session: Session, key: str, owned: Owned) -> AccessFixtures:
    """A's objects beyond ``set_up_a``'s (whose document has no access list)."""
    documents = [ADocument(owned.document_id, "a-handbook.txt", SECRET_WORD, None)]
    for source, word, access in (
        ("a-hr-handbook.txt", HR_WORD, {"groups": ["hr"]}),
        ("a-notes-for-ana.txt", ANA_WORD, {"users": ["ana"]}),
    ):
        text = f"The {word} warranty is {source}'s own."
        made = session.one(
            key,
            "POST",
            "/v1/knowledge/documents",
            {"source": source, "text": text, "access": access},
        )
        documents.append(ADocument(made["id"], source, word, access))
    draft = session.one(key, "POST", "/v1/agents", {"name": "A's draft", "model": "echo"})
    # ana's conversation started by a token of hers, bob's by the key acting for him
    ana = session.one(key, "POST", "/v1/client_tokens", {"user": "ana"})["token"]
    conversations = {}
    for user, secret, extra in (("ana", ana, {}), ("bob", key, {"user": {"id": "bob"}})):
        body = {"agentId": owned.agent_id, "message": f"Hello, I am {user}.", **extra}
        conversation = session.one(secret, "POST", "/v1/chat/message", body)["conversationId"]
        said = session.one(key, "GET", f"/v1/conversations/{conversation}/messages")
        conversations[user] = (conversation, said["messages"][-1]["id"])
        assert session.one(key, "GET", f"/v1/conversations/{conversation}")["user"] == user
    return AccessFixtures(owned, documents, conversations, draft["id"])


def mint_tokens(
    session: Session, core: AgentCore, fixtures: AccessFixtures
) -> tuple[list[Token], dict[tuple[str, str], set[str]], set[str]]:
    """The matrix's tokens; the agents each other workspace's tokens may list (a test
    token: draft and deployed ones; a live one: deployed ones); A's conversations."""
    tokens: list[Token] = []
    agents: dict[tuple[str, str], set[str]] = {}
    owner = ""
    for org in ORGS:
        if org != "acme":
            core.create_organization(org)
        for env in ENVS:
            key = core.keys.create(org, env, ["read", "write"]).secret
            if (org, env) == ("acme", "test"):
                owner = key
            else:  # a deployed and a draft agent of its own
                made = [
                    session.one(key, "POST", "/v1/agents", {"name": name, "model": "echo"})["id"]
                    for name in ("theirs", "their draft")
                ]
                session.one(key, "POST", f"/v1/agents/{made[0]}/deploy")
                agents[(org, env)] = set(made) if env == "test" else {made[0]}
            for user in A_USERS:
                for groups in GROUP_SETS:
                    body = {"user": user, "groups": list(groups)}
                    minted = session.one(key, "POST", "/v1/client_tokens", body)
                    assert minted["token"].startswith(f"ct_{env}_"), minted
                    assert (minted["user"], minted["groups"]) == (user, list(groups))
                    tokens.append(Token(org, env, user, groups, minted["token"]))
    # one of A's tokens limited to the draft agent
    limited = (fixtures.draft_agent_id,)
    body = {"user": "bob", "groups": ["hr"], "agents": list(limited)}
    minted = session.one(owner, "POST", "/v1/client_tokens", body)
    assert minted["agents"] == list(limited)
    tokens.append(Token("acme", "test", "bob", ("hr",), minted["token"], agents=limited))
    # each of A's tokens starts a conversation of its own, for DELETE to delete
    for at, token in enumerate(tokens):
        if token.own:
            agent = fixtures.owned.agent_id if token.agents is None else token.agents[0]
            body = {"agentId": agent, "message": "Delete this later."}
            conversation = session.one(token.secret, "POST", "/v1/chat/message", body)
            said = session.one(
                token.secret, "GET", f"/v1/conversations/{conversation['conversationId']}/messages"
            )
            doomed = (conversation["conversationId"], said["messages"][-1]["id"])
            tokens[at] = replace(token, doomed=doomed)
    return tokens, agents, all_conversations(session, owner)


def all_conversations(session: Session, key: str) -> set[str]:
    """The ids of every conversation of the key's workspace."""
    found: set[str] = set()
    after = ""
    while True:
        page = session.one(key, "GET", f"/v1/conversations?limit=100{after}")
        found.update(c["id"] for c in page["conversations"])
        if not page["has_more"]:
            return found
        after = f"&starting_after={page['conversations'][-1]['id']}"


def names_a_agent(route: ApiRoute) -> bool:
    """Routes naming A's (deployed) agent: its path's ``agent_id``, or a chat's body."""
    return "{agent_id}" in route.path or route.request in CHATS


def check_token_call(
    token: Token,
    route: ApiRoute,
    variant: Variant,
    response: httpx.Response,
    fixtures: AccessFixtures,
    their_agents: dict[tuple[str, str], set[str]],
    started: dict[str, str],
) -> None:
    """Assert what ``token``'s call of ``route`` in ``variant`` answered (a chat of A's
    tokens that started a conversation adds it to ``started``, with its user)."""
    owned = fixtures.owned
    where = f"{token} {route.method} {route.path} {variant}"
    assert response.status_code < 500, (where, response.text)
    if not route.end_users:
        assert_refused(response, route, 403, "insufficient_scope")
        return
    if variant.user in REFUSED_BODY_USERS:
        # checked before anything is looked up: the same refusal in every workspace
        assert_refused(response, route, 403, "user_not_allowed")
        return
    if not token.own:
        if names_an_object_of_a(route):
            assert response.status_code == 404, (where, response.status_code, response.text)
            assert_refused(response, route, 404, "resource_missing")
            return
        assert response.is_success, (where, response.status_code, response.text)
        seen = response.text
        if route.request is SearchRequest:  # the query is echoed back: check the results
            seen = json.dumps(response.json()["results"])
        leaked = [m for m in fixtures.markers() if m in seen]
        assert not leaked, (where, leaked, response.text)
        check_listing(token, route, response, their_agents[(token.org, token.env)], where)
        return
    # A's own tokens. The one limited to the draft agent may not get or chat with A's
    # agent, nor see its user's conversations with it (they were started with A's
    # agent); the conversation it started with the draft agent is its own to delete
    hidden = not (token.agents is None or owned.agent_id in token.agents)
    if names_a_agent(route) and hidden:
        assert_refused(response, route, 403, "agent_not_allowed")
        return
    deleting_its_own = route.method == "DELETE" and token.doomed is not None
    if variant.conversation in ("other", "nobody") or (
        hidden and variant.conversation == "own" and not deleting_its_own
    ):
        assert_refused(response, route, 404, "resource_missing", missing_agent=False)
        return
    assert response.is_success, (where, response.status_code, response.text)
    allowed = {owned.agent_id, fixtures.draft_agent_id}
    check_listing(
        token, route, response, allowed if token.agents is None else set(token.agents), where
    )
    user, groups = reader_of(token, variant)
    readable = [d for d in fixtures.documents if d.readable_by(user, groups)]
    unreadable = [d for d in fixtures.documents if d not in readable]
    if route.request is SearchRequest:
        results = response.json()["results"]
        assert {r["document_id"] for r in results} == {d.id for d in readable}, where
        leaked = [d.word for d in unreadable if d.word in json.dumps(results)]
        assert not leaked, (where, leaked)
    if route.request in CHATS:
        # streamed or not, the citations name the sources: exactly the readable ones
        cited = {d.source for d in fixtures.documents if d.source in response.text}
        assert cited == {d.source for d in readable}, (where, response.text)
        leaked = [d.word for d in unreadable if d.word in response.text]
        assert not leaked, (where, leaked)
        if not variant.stream:
            body = response.json()
            citations = body.get("citations")
            assert {c["source"] for c in citations} == {d.source for d in readable}, where
        (conversation,) = set(CONVERSATION_ID.findall(response.text))
        if variant.conversation == "own":
            assert conversation == fixtures.conversations[token.user][0], where
        else:
            started[conversation] = token.user
    if route.path == "/conversations":
        listed = response.json()["conversations"]
        assert {c["user"] for c in listed} <= {token.user}, (where, listed)
        usable = allowed if token.agents is None else set(token.agents)
        assert all(c["agentId"] in usable for c in listed), (where, listed)
        ids = {c["id"] for c in listed}
        assert (fixtures.conversations[token.user][0] in ids) is not hidden, where
        if not hidden:
            assert {c["user"] for c in listed} == {token.user}, (where, listed)
        foreign = {fixtures.conversations[token.other_user][0], owned.conversation_id}
        assert not ids & foreign, where
    elif route.method == "GET" and route.path == "/conversations/{conversation_id}":
        assert response.json()["user"] == token.user, where
    elif route.method == "DELETE":
        assert token.doomed is not None and response.json()["id"] == token.doomed[0], where


def check_listing(
    token: Token, route: ApiRoute, response: httpx.Response, agents: set[str], where: str
) -> None:
    """The agent and model lists hold exactly the agents the token may chat with;
    ``verify`` names the token's own workspace and user."""
    if route.path == "/agents" and route.method == "GET":
        assert {a["id"] for a in response.json()["agents"]} == agents, (where, response.text)
    elif route.path == "/models":
        assert {m["id"] for m in response.json()["data"]} == agents, (where, response.text)
    elif route.path == "/conversations" and not token.own:
        assert response.json()["conversations"] == [], where  # nobody chatted there
    elif route.path == "/auth/verify":
        verified = response.json()
        assert (verified["organization"], verified["environment"]) == (token.org, token.env)
        assert verified["user"] == {"id": token.user, "groups": list(token.groups)}, where


@pytest.mark.slow
@pytest.mark.both_stores
def test_isolation_matrix_for_client_tokens(iso_core: AgentCore) -> None:
    session = Session(create_app(iso_core))
    with session.serving():  # /v1/mcp answers within the app's lifespan only
        run_token_matrix(iso_core, session)


def run_token_matrix(core: AgentCore, session: Session) -> None:
    core.create_organization("acme")
    owner = core.keys.create("acme", "test", ["read", "write"]).secret
    owned = set_up_a(session, owner)
    fixtures = set_up_access(session, owner, owned)
    owned.snapshot = snapshot(session, owner, owned)  # with A's further documents
    assert {d for d, _ in owned.snapshot["documents"]} == {d.id for d in fixtures.documents}
    tokens, their_agents, conversations_before = mint_tokens(session, core, fixtures)
    assert len(tokens) == len(ORGS) * len(ENVS) * len(A_USERS) * len(GROUP_SETS) + 1

    # every route and MCP tool (and the MCP tool list), in each of its variants, by
    # every token; a "tool" is None for a REST route
    plan: list[tuple[Token, ApiRoute, McpTool | None, Variant, str, dict[str, Any] | None]] = []
    for token in tokens:
        for route in ROUTES:
            for variant in variants(route):
                path, body = token_request(token, route, variant, fixtures)
                plan.append((token, route, None, variant, path, body))
        for tool in TOOLS:
            for variant in variants(tool.route, mcp=True):
                _, body = token_request(token, tool.route, variant, fixtures)
                call = mcp_call(tool.name, mcp_arguments(tool, body))
                plan.append((token, tool.route, tool, variant, MCP_PATH, call))
    lists = [(t.secret, "POST", MCP_PATH, mcp_call("", None)) for t in tokens]
    calls = [
        (token.secret, route.method if tool is None else "POST", path, body)
        for token, route, tool, _, path, body in plan
    ]
    responses = session.run([*calls, *lists])

    checked: list[tuple[str, str, Variant]] = []
    started: dict[str, str] = {}  # conversations A's tokens' chats started -> their user
    for (token, route, tool, variant, _, _), response in zip(
        plan, responses[: len(plan)], strict=True
    ):
        answer = response if tool is None else as_rest(response)
        check_token_call(token, route, variant, answer, fixtures, their_agents, started)
        checked.append((str(token), tool.name if tool else f"{route.method} {route.path}", variant))
    for token, response in zip(tokens, responses[len(plan) :], strict=True):
        assert response.status_code == 200, (str(token), response.text)
        listed = [t["name"] for t in response.json()["result"]["tools"]]
        assert listed == [t.name for t in TOOLS if t.route.end_users], (str(token), listed)
        checked.append((str(token), "tools/list", Variant(mcp=True)))

    # each token ran every route and tool in each of its variants: a chat route 12
    # (4 conversations x streamed or not, and 4 body users), a search 5 (no body user,
    # and 4), a route naming a conversation 3; over MCP no streams (a chat 8)
    assert len(variants(next(r for r in ROUTES if r.request is ChatMessageRequest))) == 12
    per_token = sum(len(variants(r)) for r in ROUTES) + sum(
        len(variants(t.route, mcp=True)) for t in TOOLS
    )
    assert len(checked) == len(tokens) * (per_token + 1)
    assert len(set(checked)) == len(checked)  # no call checked twice
    names = {f"{r.method} {r.path}" for r in ROUTES} | {t.name for t in TOOLS} | {"tools/list"}
    for token in tokens:
        assert {name for who, name, _ in checked if who == str(token)} == names, str(token)

    # A is as it was through A's key: its agents, documents, webhooks, search, and the
    # conversation its key started (no token may reach it); A's conversations are those
    # there were, less the ones A's tokens deleted, plus the ones their chats started
    assert snapshot(session, owner, owned) == owned.snapshot
    doomed = {t.doomed[0] for t in tokens if t.doomed is not None}
    assert len(doomed) == len([t for t in tokens if t.own])
    assert all_conversations(session, owner) == (conversations_before - doomed) | set(started)
    for conversation, user in started.items():
        assert session.one(owner, "GET", f"/v1/conversations/{conversation}")["user"] == user


def test_searches_answered_together_read_each_for_its_own_user(iso_core: AgentCore) -> None:
    """Searches of one workspace started together may run as one batch, as their first
    caller: a client token's search never joins one, so it finds only what its user may
    read, and the key beside it everything, in either order."""
    core = iso_core
    core.create_organization("acme")
    key = core.keys.create("acme", "test", ["read", "write"]).secret
    ws = core.authenticate(key)
    ws.knowledge.ingest_text("open.txt", f"The {SECRET_WORD} warranty lasts two years.")
    ws.knowledge.ingest_text(
        "hr.txt", f"The {HR_WORD} warranty is secret.", access={"groups": ["hr"]}
    )
    ana = ws.client_tokens.create(user="ana").token
    hr_bob = ws.client_tokens.create(user="bob", groups=["hr"]).token
    # a budget any batch fits in: batches form however fast this machine runs a search
    app = create_app(core, inline_budget=10.0)
    body = {"query": "warranty", "top_k": 10}

    async def go() -> list[list[list[str]]]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://asgi") as client:

            async def search(secret: str) -> list[str]:
                headers = {"Authorization": f"Bearer {secret}"}
                answer = await client.post("/v1/knowledge/search", json=body, headers=headers)
                assert answer.status_code == 200, answer.text
                return sorted(r["source"] for r in answer.json()["results"])

            for _ in range(3):  # the index loaded, the route's recent runs quick
                await search(ana)
                await search(key)
            seen = []
            for first in (key, hr_bob, key):
                seen.append(await asyncio.gather(search(first), search(ana)))
            return seen

    async def keys_together() -> None:
        # a fresh app: its scheduler has seen three quick lone searches, and no streak
        transport = httpx.ASGITransport(app=create_app(core, inline_budget=10.0))
        async with httpx.AsyncClient(transport=transport, base_url="http://asgi") as client:
            headers = {"Authorization": f"Bearer {key}"}
            for _ in range(3):
                await client.post("/v1/knowledge/search", json=body, headers=headers)
            await asyncio.gather(
                *(client.post("/v1/knowledge/search", json=body, headers=headers) for _ in range(4))
            )

    both, alone = ["hr.txt", "open.txt"], ["open.txt"]
    assert asyncio.run(go()) == [[both, alone], [both, alone], [both, alone]]
    # searches for no end user are still answered together: some batch held more than one
    registry = core.metrics.registry
    sizes, batches = "agentcore_search_batch_size_sum", "agentcore_search_batch_size_count"
    before = (registry.get_sample_value(sizes) or 0.0) - (registry.get_sample_value(batches) or 0.0)
    asyncio.run(keys_together())
    after = (registry.get_sample_value(sizes) or 0.0) - (registry.get_sample_value(batches) or 0.0)
    assert after > before
