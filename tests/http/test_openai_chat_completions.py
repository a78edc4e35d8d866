"""The OpenAI-compatible routes through OpenAI's own SDK, as a user with an agentcore key
would call them: POST /v1/chat/completions (answers, streams, errors) and GET /v1/models,
over a real uvicorn server, served alone and mounted in FastAPI, on both stores."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from conftest import Keys
from helpers import open_with, where_cited

import agentcore
from agentcore import AgentCore, Event
from agentcore.chat_models import ChatRequest, ChatResult
from agentcore.errors import ProviderError
from agentcore.schema import Usage

QUESTION = "How many vacation days do employees get?"


class Scripted:
    """A chat model plugin that records what it is asked and answers from a script."""

    def __init__(self, answer: Any = None) -> None:
        self.name = "scripted"
        self.requests: list[ChatRequest] = []
        self.answer = answer or (lambda request: ChatResult(text=f"{len(request.history)} turns"))

    def complete(self, request: ChatRequest) -> ChatResult:
        self.requests.append(request)
        result: ChatResult = self.answer(request)
        return result

    @agentcore.hookimpl
    def agentcore_register_chat_models(self, register: Any, settings: Any) -> None:
        register(self)


@pytest.fixture
def scripted() -> Scripted:
    return Scripted()


@pytest.fixture
def core(store_url: str, scripted: Scripted) -> Iterator[AgentCore]:
    """conftest's core (SQLite or PostgreSQL) with the ``scripted`` chat model."""
    with open_with(store_url, scripted) as instance:
        yield instance


@pytest.fixture
def key(keys: Keys) -> str:
    """A read-only test key: chatting needs no more."""
    return keys.make(scopes=("read",)).secret


@pytest.fixture
def agent(handbook_agent: str) -> str:
    return handbook_agent


def client(base_url: str, key: str, **options: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=key, **options)


def test_a_completion_answers_and_cites_its_sources(served_v1: str, key: str, agent: str) -> None:
    completion = client(served_v1, key).chat.completions.create(
        model=agent,
        messages=[
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": QUESTION},
        ],
    )
    assert completion.object == "chat.completion"
    assert completion.id and completion.created > 0 and completion.model == agent
    (choice,) = completion.choices
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    assert "25 vacation days" in (choice.message.content or "")
    assert completion.usage is None  # the extractive model reports no tokens
    extra = completion.model_extra or {}
    assert where_cited(extra["citations"]) == [{"source": "handbook.pdf", "pages": [2]}]
    assert extra["conversation_id"].startswith("conv_")
    # and as OpenAI's annotations, which frameworks keep when they drop extension fields
    (cited,) = choice.message.annotations or []
    assert cited.type == "url_citation"
    assert (cited.url_citation.url, cited.url_citation.title) == (
        "handbook.pdf#page=2",
        "handbook.pdf, page 2",
    )
    assert cited.url_citation.end_index == len(choice.message.content or "")


def test_a_stream_sends_the_same_answer_in_chunks_then_done(
    served_v1: str, key: str, agent: str
) -> None:
    sdk = client(served_v1, key)
    whole = sdk.chat.completions.create(
        model=agent, messages=[{"role": "user", "content": QUESTION}]
    )
    chunks = list(
        sdk.chat.completions.create(
            model=agent,
            messages=[{"role": "user", "content": QUESTION}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert {chunk.object for chunk in chunks} == {"chat.completion.chunk"}
    assert len({chunk.id for chunk in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finish] == ["stop"]
    assert where_cited((finish[0].model_extra or {})["citations"]) == [
        {"source": "handbook.pdf", "pages": [2]}
    ]
    assert chunks[-1].choices == [] and chunks[-1].usage is None  # the include_usage chunk
    # on the wire: unnamed data events ending with [DONE], as OpenAI sends them
    with httpx.stream(
        "POST",
        served_v1 + "/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": agent, "messages": [{"role": "user", "content": QUESTION}], "stream": True},
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines), lines
    assert lines[-1] == "data: [DONE]"
    assert "citations" in json.loads(lines[-2].removeprefix("data: "))


def test_usage_is_the_models_token_counts_in_openais_terms(
    served_v1: str, key: str, agent: str, core: AgentCore, scripted: Scripted
) -> None:
    scripted.answer = lambda request: ChatResult(
        text="Twenty-five.", usage=Usage(input_tokens=31, output_tokens=4)
    )
    core.workspace("acme", "test").agents.update(agent, model="scripted")
    sdk = client(served_v1, key)
    messages: Any = [{"role": "user", "content": QUESTION}]
    completion = sdk.chat.completions.create(model=agent, messages=messages)
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (31, 4)
    assert completion.usage.total_tokens == 35
    chunks = list(
        sdk.chat.completions.create(
            model=agent, messages=messages, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == 35
    unasked = list(sdk.chat.completions.create(model=agent, messages=messages, stream=True))
    assert all(chunk.usage is None for chunk in unasked)  # only with include_usage


def test_earlier_messages_are_the_models_history(
    served_v1: str, key: str, agent: str, core: AgentCore, scripted: Scripted
) -> None:
    core.workspace("acme", "test").agents.update(agent, model="scripted")
    completion = client(served_v1, key).chat.completions.create(
        model=agent,
        messages=[
            {"role": "developer", "content": "Answer in French."},
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": [{"type": "text", "text": "Hi! How can I help?"}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Vacation"},
                    {"type": "text", "text": "days?"},
                ],
            },
        ],
    )
    assert completion.choices[0].message.content == "2 turns"
    (request,) = scripted.requests
    assert request.message == "Vacation\ndays?"
    assert [(t.role, t.content) for t in request.history] == [
        ("user", "Hello"),
        ("assistant", "Hi! How can I help?"),
    ]
    assert "French" not in request.system_prompt  # the agent's own prompt applies


def test_a_stored_conversation_continues_through_the_extension_field(
    served_v1: str, key: str, agent: str, core: AgentCore, scripted: Scripted
) -> None:
    core.workspace("acme", "test").agents.update(agent, model="scripted")
    sdk = client(served_v1, key, max_retries=0)
    first = sdk.chat.completions.create(model=agent, messages=[{"role": "user", "content": "one"}])
    conversation = (first.model_extra or {})["conversation_id"]
    second = sdk.chat.completions.create(
        model=agent,
        messages=[{"role": "user", "content": "two"}],
        extra_body={"conversation_id": conversation},
    )
    assert (second.model_extra or {})["conversation_id"] == conversation
    assert [(t.role, t.content) for t in scripted.requests[-1].history] == [
        ("user", "one"),
        ("assistant", "0 turns"),
    ]
    with pytest.raises(openai.BadRequestError) as both:  # a history and a conversation
        sdk.chat.completions.create(
            model=agent,
            messages=[{"role": "user", "content": "one"}, {"role": "user", "content": "two"}],
            extra_body={"conversation_id": conversation},
        )
    assert both.value.code == "history_with_conversation"
    assert both.value.param == "messages.0.role"
    with pytest.raises(openai.NotFoundError):
        sdk.chat.completions.create(
            model=agent,
            messages=[{"role": "user", "content": "two"}],
            extra_body={"conversation_id": "conv_missing"},
        )


def test_models_lists_the_agents_each_key_may_chat_with(
    served_v1: str, core: AgentCore, keys: Keys
) -> None:
    test_key = keys.make(scopes=("read",)).secret
    live_key = keys.make(env="live", scopes=("read",)).secret
    other_key = keys.make(org="globex", scopes=("read",)).secret
    test, live = core.workspace("acme", "test"), core.workspace("acme", "live")
    draft = test.agents.create(name="draft")
    deployed = test.agents.deploy(test.agents.create(name="on").id)
    test.agents.archive(test.agents.create(name="gone").id)
    live.agents.create(name="live draft")
    live_on = live.agents.deploy(live.agents.create(name="live on").id)
    listed = client(served_v1, test_key).models.list()
    assert [m.id for m in listed.data] == [deployed.id, draft.id]
    assert {(m.object, m.owned_by) for m in listed.data} == {("model", "acme")}
    assert listed.data[0].created == int(deployed.created_at.timestamp())
    assert [m.id for m in client(served_v1, live_key).models.list().data] == [live_on.id]
    assert client(served_v1, other_key).models.list().data == []
    one = client(served_v1, test_key).models.retrieve(draft.id)
    assert (one.id, one.object, one.owned_by) == (draft.id, "model", "acme")
    archived = test.agents.list(status="archived").agents[0].id
    refused = [
        (test_key, archived),  # archived: no chat
        (live_key, live.agents.list().agents[-1].id),  # a live key and a draft agent
        (other_key, draft.id),  # another tenant's
        (test_key, "agt_unknown"),
    ]
    for key, agent_id in refused:
        with pytest.raises(openai.NotFoundError) as missing:
            client(served_v1, key, max_retries=0).models.retrieve(agent_id)
        assert (missing.value.code, missing.value.param) == ("model_not_found", "model")


def test_sdk_errors_for_unknown_and_foreign_agents_and_bad_keys(
    served_v1: str, key: str, agent: str, keys: Keys, core: AgentCore
) -> None:
    ask = [{"role": "user", "content": QUESTION}]
    sdk = client(served_v1, key, max_retries=0)
    with pytest.raises(openai.NotFoundError) as unknown:
        sdk.chat.completions.create(model="agt_unknown", messages=ask)
    assert unknown.value.code == "model_not_found" and unknown.value.param == "model"
    assert unknown.value.type == "invalid_request_error"
    foreign = keys.make(org="globex").secret  # another tenant: no such agent there
    with pytest.raises(openai.NotFoundError):
        client(served_v1, foreign, max_retries=0).chat.completions.create(model=agent, messages=ask)
    live = keys.make(env="live").secret  # another environment of the same tenant
    with pytest.raises(openai.NotFoundError):
        client(served_v1, live, max_retries=0).chat.completions.create(model=agent, messages=ask)
    for bad in ("ak_test_not-a-key", keys.make(scopes=("read",)).secret + "x"):
        with pytest.raises(openai.AuthenticationError) as refused:
            client(served_v1, bad, max_retries=0).models.list()
        assert refused.value.status_code == 401 and refused.value.type == "authentication_error"
    with pytest.raises(openai.BadRequestError) as empty:
        sdk.chat.completions.create(model=agent, messages=[])
    assert empty.value.param == "messages"
    with pytest.raises(openai.BadRequestError) as blank:
        sdk.chat.completions.create(model=agent, messages=[{"role": "user", "content": "  "}])
    assert blank.value.code == "empty_message" and blank.value.param == "messages.0.content"


def test_a_conflict_is_not_retried_by_the_sdk(
    served_v1: str, key: str, agent: str, core: AgentCore
) -> None:
    core.workspace("acme", "test").agents.archive(agent)
    with pytest.raises(openai.ConflictError) as archived:
        client(served_v1, key).chat.completions.create(  # default retries: 2
            model=agent, messages=[{"role": "user", "content": QUESTION}]
        )
    assert archived.value.code == "agent_archived"
    assert archived.value.response.headers["x-should-retry"] == "false"
    # the request that failed was the first try: the SDK did not ask again
    assert archived.value.response.request.headers["x-stainless-retry-count"] == "0"


def test_a_model_failure_mid_stream_raises_the_sdks_error(
    served_v1: str, key: str, agent: str, core: AgentCore, scripted: Scripted
) -> None:
    def fail(request: ChatRequest) -> ChatResult:
        raise ProviderError("The model is down.")

    scripted.answer = fail
    core.workspace("acme", "test").agents.update(agent, model="scripted")
    sdk = client(served_v1, key, max_retries=0)
    stream = sdk.chat.completions.create(
        model=agent, messages=[{"role": "user", "content": QUESTION}], stream=True
    )
    with pytest.raises(openai.APIError) as failed:
        list(stream)
    assert "The model is down." in failed.value.message
    assert isinstance(failed.value.body, dict) and failed.value.body["code"] == "provider_error"
    with pytest.raises(openai.InternalServerError) as whole:
        sdk.chat.completions.create(model=agent, messages=[{"role": "user", "content": QUESTION}])
    assert whole.value.status_code == 502 and whole.value.type == "server_error"


def test_chat_events_are_published_as_for_chat_message(
    served_v1: str, key: str, agent: str, core: AgentCore
) -> None:
    events: list[Event] = []
    core.events.subscribe("agent.action", events.append)
    completion = client(served_v1, key).chat.completions.create(
        model=agent, messages=[{"role": "user", "content": QUESTION}]
    )
    actions = [event.data["action"] for event in events]
    assert actions == ["knowledge_lookup", "reply_sent"]
    assert events[-1].data["conversation_id"] == (completion.model_extra or {})["conversation_id"]


def test_the_per_key_rate_limit_applies(served_v1: str, core: AgentCore, keys: Keys) -> None:
    from agentcore._rate_limits import RateLimiter

    slow = {"rate_limit_test": 0.01, "rate_limit_backend": "local"}
    core.rate_limiter = RateLimiter(core.settings.model_copy(update=slow))
    sdk = client(served_v1, keys.make(scopes=("read",)).secret, max_retries=0)
    sdk.models.list()  # the bucket's one token
    with pytest.raises(openai.RateLimitError) as limited:
        sdk.models.list()
    assert limited.value.type == "rate_limit_error"
    assert int(limited.value.response.headers["retry-after"]) >= 1
