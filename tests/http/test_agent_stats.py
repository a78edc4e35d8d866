"""An agent's stats: ``GET /v1/agents/{id}/stats`` on both stores, over uvicorn and ASGI,
from real chat turns (answers with and without citations, both kinds of handoff,
ratings); its window, normalised questions and top-20 lists; who may read it; and the
Python API and both clients."""

# ruff: noqa: F811  (``api`` is the faster fixture imported from helpers)

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from conftest import Keys, ServerThread
from helpers import api, assert_problem  # noqa: F401 (api: faster fixture)

import agentcore
from agentcore import AgentCore, AsyncClient, Client, NotFound, PermissionDenied
from agentcore.chat_models import ChatRequest, ChatResult
from agentcore.errors import ValidationFailed
from agentcore.schema import Usage
from agentcore_starlette import create_app

HANDBOOK = "Employees get 25 vacation days per year. The office opens at 9 am on weekdays."
DAYS = "How many vacation days do I get?"
WIFI = "What is the wifi password?"  # nothing in the handbook answers it


class Metered:
    """A chat model that reports token usage: it quotes the first passage, if any."""

    name = "metered"

    def complete(self, request: ChatRequest) -> ChatResult:
        usage = Usage(input_tokens=20, output_tokens=5)
        if not request.passages:
            return ChatResult(text="I do not know.", usage=usage)
        passage = request.passages[0]
        return ChatResult(text=passage.text, used_passage_ids=[passage.id], usage=usage)

    @agentcore.hookimpl
    def agentcore_register_chat_models(self, register: Any, settings: Any) -> None:
        register(self)


@pytest.fixture
def core(store_url: str) -> Iterator[AgentCore]:
    """conftest's core, with the metered model registered (the default stays extractive)."""
    instance = AgentCore.open(
        store_url, plugins=[Metered()], rate_limit_test=1e6, rate_limit_live=1e6
    )
    yield instance
    instance.close()


def agent(api: Any, **fields: Any) -> str:
    made = api.post("/v1/agents", json={"name": "HR", **fields})
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def handbook(api: Any) -> None:
    document = {"source": "handbook.txt", "text": HANDBOOK}
    assert api.post("/v1/knowledge/documents", json=document).status_code == 201


def chat(api: Any, agent_id: str, message: str, conversation: str | None = None) -> Any:
    body = {"agentId": agent_id, "message": message}
    if conversation is not None:
        body["conversationId"] = conversation
    response = api.post("/v1/chat/message", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def stats(api: Any, agent_id: str, status: int = 200, **window: Any) -> Any:
    response = api.get(f"/v1/agents/{agent_id}/stats", params=window)
    assert response.status_code == status, response.text
    return response.json()


def answer_of(api: Any, conversation: str) -> str:
    page = api.get(f"/v1/conversations/{conversation}/messages", params={"order": "desc"})
    return str(next(m["id"] for m in page.json()["messages"] if m["role"] == "assistant"))


def rate(api: Any, conversation: str, rating: str) -> None:
    message = answer_of(api, conversation)
    path = f"/v1/conversations/{conversation}/messages/{message}/feedback"
    assert api.post(path, json={"rating": rating}).status_code == 200


def listed(questions: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(question["text"], question["count"]) for question in questions]


def test_stats_count_answers_handoffs_and_ratings(api: Any) -> None:
    handbook(api)
    hr, strict = agent(api), agent(api, handoff_on_no_answer=True)
    assert stats(api, hr) == {
        "agent_id": hr,
        "since": None,
        "until": None,
        "conversations": 0,
        "messages": 0,
        "answered": 0,
        "unanswered": 0,
        "handoffs": 0,
        "feedback": {"up": 0, "down": 0},
        "top_questions": [],
        "unanswered_questions": [],
        "usage": {"input_tokens": 0, "output_tokens": 0},
    }
    first = chat(api, hr, DAYS)
    assert first["citations"]  # the extractive model answers from the handbook
    conversation = first["conversationId"]
    chat(api, hr, "  how many VACATION   days do I get??", conversation)  # the same question
    rate(api, conversation, "up")
    unknown = chat(api, hr, WIFI)
    assert unknown["citations"] == [] and unknown["status"] == "completed"
    rate(api, unknown["conversationId"], "down")
    human = chat(api, hr, "I want to talk to a human")
    assert human["citations"] == [] and "human colleague" in human["response"]
    # the user writes on to the person who has it: a message, and a question, no answer
    kept = chat(api, hr, "Hello?", human["conversationId"])
    assert kept["status"] == "handed_off"
    nothing = chat(api, strict, WIFI)  # handed off for lack of knowledge
    assert nothing["citations"] == [] and "human colleague" in nothing["response"]

    counted = stats(api, hr)
    assert counted["conversations"] == 3
    assert counted["messages"] == 2 * 4 + 1  # four turns, and the message kept for a person
    # the handoff the user asked for is neither answered nor unanswered
    assert (counted["answered"], counted["unanswered"], counted["handoffs"]) == (2, 1, 1)
    assert counted["feedback"] == {"up": 1, "down": 1}
    assert listed(counted["top_questions"]) == [
        ("how many vacation days do i get", 2),
        ("hello", 1),
        ("i want to talk to a human", 1),
        ("what is the wifi password", 1),
    ]
    assert listed(counted["unanswered_questions"]) == [("what is the wifi password", 1)]
    assert counted["usage"] == {"input_tokens": 0, "output_tokens": 0}  # extractive: none
    handed = stats(api, strict)
    assert (handed["answered"], handed["unanswered"], handed["handoffs"]) == (0, 1, 1)
    assert listed(handed["unanswered_questions"]) == [("what is the wifi password", 1)]
    # an archived agent's stats stay readable
    assert api.delete(f"/v1/agents/{hr}").status_code == 200
    assert stats(api, hr) == counted


def test_usage_sums_every_answer_of_the_window(api: Any) -> None:
    handbook(api)
    metered = agent(api, model="metered")
    first = chat(api, metered, DAYS)
    chat(api, metered, DAYS, first["conversationId"])
    assert first["usage"] == {"input_tokens": 20, "output_tokens": 5}
    counted = stats(api, metered)
    assert counted["usage"] == {"input_tokens": 40, "output_tokens": 10}
    assert (counted["answered"], counted["messages"]) == (2, 4)


def _times(api: Any, conversation: str) -> list[str]:
    page = api.get(f"/v1/conversations/{conversation}/messages").json()["messages"]
    return [str(message["created_at"]) for message in page]


def test_the_window_includes_since_and_excludes_until(api: Any) -> None:
    handbook(api)
    hr = agent(api)
    early = chat(api, hr, DAYS)["conversationId"]
    time.sleep(0.01)  # the store keeps milliseconds: the second turn is later
    late = chat(api, hr, WIFI)["conversationId"]
    (asked, answered), (at, _) = _times(api, early), _times(api, late)
    assert asked == answered < at  # a turn's two messages share their time
    moment = datetime.fromisoformat(at)

    since = stats(api, hr, since=at)
    assert datetime.fromisoformat(since["since"]) == moment and since["until"] is None
    assert (since["conversations"], since["messages"], since["answered"]) == (1, 2, 0)
    assert listed(since["top_questions"]) == [("what is the wifi password", 1)]
    until = stats(api, hr, until=at)
    assert (until["conversations"], until["messages"], until["answered"]) == (1, 2, 1)
    assert listed(until["top_questions"]) == [("how many vacation days do i get", 1)]
    assert stats(api, hr, since=at, until=at)["messages"] == 0  # empty, not refused
    assert stats(api, hr, since=asked, until=at)["messages"] == 2
    # the same instant at another offset, without one (UTC), and a date alone (midnight)
    elsewhere = moment.astimezone(timezone(timedelta(hours=-5))).isoformat()
    assert stats(api, hr, since=elsewhere)["messages"] == 2
    naive = moment.replace(tzinfo=None).isoformat(timespec="milliseconds")
    assert stats(api, hr, until=naive)["messages"] == 2
    tomorrow = (moment + timedelta(days=1)).date().isoformat()
    assert stats(api, hr, since=tomorrow)["messages"] == 0
    assert stats(api, hr, until=tomorrow)["messages"] == 4
    # a bound between two milliseconds: rounded up to the next, as the times are kept
    half = timedelta(microseconds=500)
    assert stats(api, hr, since=(moment + half).isoformat())["messages"] == 0
    assert stats(api, hr, until=(moment + half).isoformat())["messages"] == 4
    # RFC 3339's lower-case t and z; the first and the last years there are
    assert stats(api, hr, since=at.replace("T", "t").replace("Z", "z"))["messages"] == 2
    assert stats(api, hr, since="0001-01-01T00:00:00+01:00")["messages"] == 4
    assert stats(api, hr, until="9999-12-31T23:59:59.9999-05:00")["messages"] == 4


def test_questions_are_normalised_and_each_list_is_cut_at_20(api: Any) -> None:
    hr = agent(api)  # no knowledge: every answer is unanswered
    conversation = None
    for text in [
        "Where do visitors park?",
        "  where DO visitors\tpark ",
        "WHERE DO VISITORS PARK!!",
        "Ｗhere do visitors park？",  # full-width forms: NFKC
        *[f"Question {n:02}." for n in range(21)],
    ]:
        conversation = chat(api, hr, text, conversation)["conversationId"]
    counted = stats(api, hr)
    expected = [("where do visitors park", 4)] + [(f"question {n:02}", 1) for n in range(19)]
    assert listed(counted["top_questions"]) == expected  # 20 of 22, ties by text
    assert listed(counted["unanswered_questions"]) == expected
    assert (counted["messages"], counted["unanswered"]) == (2 * 25, 25)


def test_bad_windows_other_workspaces_and_scopes_are_refused(api: Any, keys: Keys) -> None:
    hr = agent(api)
    for window, param in [
        ({"since": "yesterday"}, "since"),
        ({"since": ""}, "since"),  # empty is malformed, not absent
        ({"until": "2025-13-01T00:00:00Z"}, "until"),
        ({"since": "2025-06-02T00:00:00Z", "until": "2025-06-01T00:00:00Z"}, "until"),
        # the same instant: 00:00 at +02:00 is 22:00 the day before in UTC
        ({"since": "2025-06-01T23:00:00Z", "until": "2025-06-02T00:00:00+02:00"}, "until"),
    ]:
        response = api.get(f"/v1/agents/{hr}/stats", params=window)
        assert_problem(response, 422, "validation_error", param=param)
    unknown = api.get(f"/v1/agents/{hr}/stats", params={"from": "2025-06-01"})
    assert_problem(unknown, 422, "unknown_parameter", param="from")
    # the agent is looked up first: an unknown one is a 404 whatever the window
    missing = api.get("/v1/agents/agt_missing/stats", params={"since": "yesterday"})
    assert_problem(missing, 404, "resource_missing", param="id")
    for other in (keys.make("globex").secret, keys.make(env="live").secret):
        response = api.get(f"/v1/agents/{hr}/stats", key=other)
        assert_problem(response, 404, "resource_missing")
    reader = keys.make(scopes=("read",)).secret
    assert api.get(f"/v1/agents/{hr}/stats", key=reader).status_code == 200
    writer = keys.make(scopes=("write",)).secret
    refused = api.get(f"/v1/agents/{hr}/stats", key=writer)
    assert_problem(refused, 403, "insufficient_scope")
    # an end user's client token, even one minted for this agent, reads no stats
    token = api.post("/v1/client_tokens", json={"user": "ana", "agents": [hr]}).json()["token"]
    assert api.get(f"/v1/agents/{hr}", key=token).status_code == 200
    refused = api.get(f"/v1/agents/{hr}/stats", key=token)
    assert_problem(refused, 403, "insufficient_scope")


def test_the_python_api(core: AgentCore, keys: Keys) -> None:
    ws = core.authenticate(keys.make().secret)
    ws.knowledge.ingest_text("handbook.txt", HANDBOOK)
    hr = ws.agents.create(name="HR").id
    answered = ws.chat.send(hr, DAYS)
    created = ws.conversations.messages(answered.conversationId).messages[0].created_at
    counted = ws.agents.stats(hr)
    assert (counted.messages, counted.answered, counted.top_questions[0].count) == (2, 1, 1)
    assert ws.agents.stats(hr, since=created).messages == 2
    assert ws.agents.stats(hr, until=created).messages == 0
    naive = created.astimezone(UTC).replace(tzinfo=None)  # a time without an offset: UTC
    assert ws.agents.stats(hr, since=naive, until=naive + timedelta(seconds=1)).messages == 2
    assert ws.agents.stats(hr, since=created.isoformat()).since == created
    with pytest.raises(ValidationFailed) as refused:
        ws.agents.stats(hr, since=created, until=created - timedelta(milliseconds=1))
    assert refused.value.param == "until"
    with pytest.raises(ValidationFailed) as malformed:
        ws.agents.stats(hr, since="soon")
    assert malformed.value.param == "since"
    with pytest.raises(NotFound):
        ws.agents.stats("agt_missing")
    with pytest.raises(NotFound):
        core.workspace("acme", "live").agents.stats(hr)
    token = ws.client_tokens.create(user="ana").token
    with pytest.raises(PermissionDenied):
        core.authenticate(token).agents.stats(hr)


@pytest.mark.slow
def test_both_clients_read_an_agents_stats(core: AgentCore, keys: Keys) -> None:
    secret = keys.make().secret
    with ServerThread(create_app(core)) as server, Client(server.url, secret) as client:
        client.add_text("handbook.txt", HANDBOOK)
        hr = client.create_agent(name="HR").id
        answer = client.chat(hr, DAYS)
        created = client.list_messages(answer.conversationId).messages[0].created_at
        counted = client.agent_stats(hr)
        assert (counted.agent_id, counted.messages, counted.answered) == (hr, 2, 1)
        assert client.agent_stats(hr, since=created).messages == 2
        assert client.agent_stats(hr, until=created.isoformat()).messages == 0
        with pytest.raises(ValidationFailed) as refused:
            client.agent_stats(hr, since="soon")
        assert refused.value.param == "since"

        async def go() -> None:
            async with AsyncClient(server.url, secret) as remote:
                assert (await remote.agent_stats(hr)) == counted
                window = await remote.agent_stats(hr, created, created + timedelta(seconds=1))
                assert (window.since, window.messages) == (created, 2)
                with pytest.raises(NotFound):
                    await remote.agent_stats("agt_missing")

        asyncio.run(go())
