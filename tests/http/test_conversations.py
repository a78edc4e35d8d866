"""/v1/conversations over real HTTP (and ASGI), on SQLite and PostgreSQL: a chat UI's history,
token usage on answers, pagination, bad input, deletion, scopes and tenancy."""
# ruff: noqa: F811  (``api`` is the faster fixture imported from helpers)

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from helpers import api, assert_problem  # noqa: F401 (api: faster fixture)

import agentcore
from agentcore import AgentCore
from agentcore.chat_models import ChatRequest, ChatResult, ToolCall
from agentcore.schema import Usage

HANDBOOK = "Employees get 25 vacation days per year. The office opens at 9 am on weekdays."


class Metered:
    """A chat model that reports token usage: it calls the agent's tool once when asked
    to (two model calls, whose usage the answer sums), then quotes the first passage."""

    name = "metered"

    def complete(self, request: ChatRequest) -> ChatResult:
        if "tool" in request.message and not request.steps:
            call = ToolCall(id="call_1", name="lookup", arguments={"q": "x"})
            return ChatResult(
                text="", tool_calls=[call], usage=Usage(input_tokens=10, output_tokens=2)
            )
        passage = request.passages[0]
        return ChatResult(
            text=passage.text,
            used_passage_ids=[passage.id],
            usage=Usage(input_tokens=20 + len(request.history), output_tokens=5),
        )

    @agentcore.hookimpl
    def agentcore_register_chat_models(self, register: Any, settings: Any) -> None:
        register(self)

    @agentcore.hookimpl
    def agentcore_run_tool(self, workspace: Any, agent_id: str, name: str, arguments: Any) -> Any:
        return "opens at 9" if name == "lookup" else None


@pytest.fixture
def core(store_url: str) -> Iterator[AgentCore]:
    """conftest's core, with the metered model (and the tool it runs) registered."""
    instance = AgentCore.open(
        store_url, plugins=[Metered()], rate_limit_test=1e6, rate_limit_live=1e6
    )
    yield instance
    instance.close()


def _setup(api: Any, model: str | None = "metered") -> str:
    tool = {"name": "lookup", "parameters": {"type": "object", "properties": {}}}
    agent = api.post("/v1/agents", json={"name": "HR", "model": model, "tools": [tool]}).json()
    document = {"source": "handbook.txt", "text": HANDBOOK}
    assert api.post("/v1/knowledge/documents", json=document).status_code == 201
    return str(agent["id"])


def _chat(api: Any, agent_id: str, message: str, conversation: str | None = None) -> Any:
    body = {"agentId": agent_id, "message": message}
    if conversation is not None:
        body["conversationId"] = conversation
    response = api.post("/v1/chat/message", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_chat_ui_reads_the_history_back(api) -> None:
    agent = _setup(api)
    first = _chat(api, agent, "How many vacation days do I get?")
    second = _chat(api, agent, "Use the tool: when does the office open?", first["conversationId"])
    conversation_id = first["conversationId"]
    assert second["conversationId"] == conversation_id
    assert first["usage"] == {"input_tokens": 20, "output_tokens": 5}
    # two model calls (a tool step, then the answer): their usage summed
    assert second["usage"] == {"input_tokens": 10 + 22, "output_tokens": 2 + 5}

    got = api.get(f"/v1/conversations/{conversation_id}")
    assert got.status_code == 200, got.text
    conversation = got.json()
    assert conversation["id"] == conversation_id and conversation["agentId"] == agent
    assert conversation["message_count"] == 4
    updated, created = conversation["updated_at"], conversation["created_at"]
    assert datetime.fromisoformat(updated) >= datetime.fromisoformat(created)  # as instants

    messages = api.get(f"/v1/conversations/{conversation_id}/messages").json()
    assert messages["has_more"] is False
    rows = messages["messages"]
    assert [(m["role"], m["content"]) for m in rows] == [
        ("user", "How many vacation days do I get?"),
        ("assistant", first["response"]),
        ("user", "Use the tool: when does the office open?"),
        ("assistant", second["response"]),
    ]
    assert len({m["id"] for m in rows}) == 4 and all(m["id"].startswith("msg_") for m in rows)
    # an answer carries what its chat response carried; a user's message no usage
    assert rows[1]["citations"] == first["citations"] != []
    assert rows[3]["citations"] == second["citations"]
    assert rows[1]["usage"] == first["usage"] and rows[3]["usage"] == second["usage"]
    assert "usage" not in rows[0] and rows[0]["citations"] == []
    assert all(m["created_at"] for m in rows)


def test_usage_is_absent_when_the_model_reports_none(api) -> None:
    agent = _setup(api, model=None)  # the extractive model counts no tokens
    answer = _chat(api, agent, "How many vacation days do I get?")
    assert "usage" not in answer
    rows = api.get(f"/v1/conversations/{answer['conversationId']}/messages").json()["messages"]
    assert all("usage" not in row for row in rows)
    assert "null" not in json.dumps(rows)


def test_messages_page_in_both_orders(api) -> None:
    agent = _setup(api)
    conversation = _chat(api, agent, "Question 1 about vacation days?")["conversationId"]
    for n in range(2, 4):
        _chat(api, agent, f"Question {n} about vacation days?", conversation)
    path = f"/v1/conversations/{conversation}/messages"
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 4}
        if cursor:
            params["starting_after"] = cursor
        page = api.get(path, params=params).json()
        seen += [m["content"] for m in page["messages"]]
        if not page["has_more"]:
            break
        cursor = page["messages"][-1]["id"]
    assert len(seen) == 6 and seen[0] == "Question 1 about vacation days?"
    assert seen[4] == "Question 3 about vacation days?"
    newest = api.get(path, params={"order": "desc", "limit": 2}).json()
    assert [m["role"] for m in newest["messages"]] == ["assistant", "user"]
    assert newest["messages"][1]["content"] == "Question 3 about vacation days?"
    assert newest["has_more"] is True
    after = newest["messages"][-1]["id"]
    rest = api.get(path, params={"order": "desc", "starting_after": after}).json()
    assert [m["content"] for m in rest["messages"]] == list(reversed(seen[:4]))
    assert rest["has_more"] is False
    # the boundary: a limit equal to the count has nothing more
    whole = api.get(path, params={"limit": 6}).json()
    assert len(whole["messages"]) == 6 and whole["has_more"] is False


def test_conversations_list_newest_first_and_filter_by_agent(api) -> None:
    agent = _setup(api)
    other = api.post("/v1/agents", json={"name": "Other", "model": "metered"}).json()["id"]
    mine = [_chat(api, agent, "Vacation days?")["conversationId"] for _ in range(3)]
    theirs = _chat(api, other, "Vacation days?")["conversationId"]
    listed = api.get("/v1/conversations").json()
    assert [c["id"] for c in listed["conversations"]] == [theirs, *reversed(mine)]
    assert listed["has_more"] is False
    assert all(c["message_count"] == 2 for c in listed["conversations"])
    page = api.get("/v1/conversations", params={"agentId": agent, "limit": 2}).json()
    assert [c["id"] for c in page["conversations"]] == [mine[2], mine[1]]
    assert page["has_more"] is True
    rest = api.get("/v1/conversations", params={"agentId": agent, "starting_after": mine[1]}).json()
    assert [c["id"] for c in rest["conversations"]] == [mine[0]] and not rest["has_more"]
    # an agent with no conversations (or none of this workspace's): an empty page
    empty = api.get("/v1/conversations", params={"agentId": "agt_unknown"}).json()
    assert empty == {"conversations": [], "has_more": False}
    # an empty filter is a mistake, not "every agent's"
    blank = api.get("/v1/conversations", params={"agentId": ""})
    assert_problem(blank, 422, "validation_error", param="agentId")


def test_bad_input_is_a_problem(api) -> None:
    agent = _setup(api)
    conversation = _chat(api, agent, "Vacation days?")["conversationId"]
    path = f"/v1/conversations/{conversation}/messages"
    assert_problem(
        api.get(path, params={"order": "sideways"}), 422, "validation_error", param="order"
    )
    assert_problem(api.get(path, params={"limit": 0}), 422, "limit_out_of_range", param="limit")
    assert_problem(api.get(path, params={"limit": 101}), 422, "limit_out_of_range", param="limit")
    assert_problem(api.get(path, params={"limit": "ten"}), 422, "validation_error", param="limit")
    assert_problem(
        api.get(path, params={"starting_after": "msg_nope"}),
        404,
        "resource_missing",
        param="starting_after",
    )
    assert_problem(
        api.get("/v1/conversations", params={"starting_after": "conv_nope"}),
        404,
        "resource_missing",
        param="starting_after",
    )
    assert_problem(api.get("/v1/conversations", params={"agent": agent}), 422, "unknown_parameter")
    for method, route in (
        ("GET", "/v1/conversations/conv_nope"),
        ("GET", "/v1/conversations/conv_nope/messages"),
        ("DELETE", "/v1/conversations/conv_nope"),
    ):
        assert_problem(api.request(method, route), 404, "resource_missing", param="id")


def test_delete_is_for_good(api, keys) -> None:
    agent = _setup(api)
    conversation = _chat(api, agent, "Vacation days?")["conversationId"]
    kept = _chat(api, agent, "Vacation days?")["conversationId"]
    reader = api.with_key(keys.make(scopes=("read",)).secret)
    assert_problem(reader.delete(f"/v1/conversations/{conversation}"), 403, "insufficient_scope")
    assert reader.get(f"/v1/conversations/{conversation}").status_code == 200  # read is enough
    deleted = api.delete(f"/v1/conversations/{conversation}")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json() == {"id": conversation, "deleted": True}
    for method, route in (
        ("GET", f"/v1/conversations/{conversation}"),
        ("GET", f"/v1/conversations/{conversation}/messages"),
        ("DELETE", f"/v1/conversations/{conversation}"),
    ):
        assert_problem(api.request(method, route), 404, "resource_missing")
    gone = api.post(
        "/v1/chat/message",
        json={"agentId": agent, "message": "Still there?", "conversationId": conversation},
    )
    assert_problem(gone, 404, "resource_missing", param="conversationId")
    listed = [c["id"] for c in api.get("/v1/conversations").json()["conversations"]]
    assert listed == [kept]


def test_other_workspaces_see_404_everywhere(api, keys) -> None:
    agent = _setup(api)
    conversation = _chat(api, agent, "Vacation days?")["conversationId"]
    for org, env in (("globex", "test"), ("acme", "live")):
        other = api.with_key(keys.make(org=org, env=env).secret)
        for method, route in (
            ("GET", f"/v1/conversations/{conversation}"),
            ("GET", f"/v1/conversations/{conversation}/messages"),
            ("DELETE", f"/v1/conversations/{conversation}"),
        ):
            assert_problem(other.request(method, route), 404, "resource_missing")
        assert other.get("/v1/conversations").json() == {"conversations": [], "has_more": False}
        assert (
            other.get("/v1/conversations", params={"agentId": agent}).json()["conversations"] == []
        )
        assert_problem(
            other.get("/v1/conversations", params={"starting_after": conversation}),
            404,
            "resource_missing",
        )
    assert api.get(f"/v1/conversations/{conversation}").json()["message_count"] == 2


def test_a_streamed_answer_carries_usage_and_is_kept(api) -> None:
    agent = _setup(api)
    response = api.post(
        "/v1/chat/message",
        json={"agentId": agent, "message": "How many vacation days?", "stream": True},
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    text = response.text.replace("\r\n", "\n")
    events = [block for block in text.split("\n\n") if "event: " in block]
    completed = [e for e in events if e.startswith("event: response.completed")]
    assert len(completed) == 1
    body = json.loads(completed[0].split("data: ", 1)[1])
    assert body["usage"] == {"input_tokens": 20, "output_tokens": 5}
    rows = api.get(f"/v1/conversations/{body['conversationId']}/messages").json()["messages"]
    assert rows[-1]["usage"] == body["usage"] and rows[-1]["content"] == body["response"]
