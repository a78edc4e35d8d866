"""Each Chat Completions parameter is used, ignored or refused as ``PARAMETERS`` says, and
refusals come in OpenAI's error envelope naming the parameter (over uvicorn and ASGI)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Api, Keys
from helpers import api as _api_fixture  # noqa: F401 (the `api` fixture: uvicorn and ASGI)

from agentcore import AgentCore
from agentcore_starlette.openai.requests import PARAMETERS, ChatCompletionRequest

QUESTION = {"role": "user", "content": "How many vacation days do employees get?"}
CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
REFUSED: list[tuple[str, Any]] = [
    ("n", 2),
    ("functions", [{"name": "f", "parameters": {}}]),
    ("function_call", {"name": "f"}),
    ("logprobs", True),
    ("top_logprobs", 2),
    ("logit_bias", {"50256": -100}),
    ("stop", "\n"),
    ("stop", ["END"]),
    ("modalities", ["text", "audio"]),
    ("audio", {"voice": "alloy", "format": "wav"}),
    ("web_search_options", {}),
    ("store", False),
]
NEUTRAL: list[tuple[str, Any]] = [
    ("n", 1),
    ("tools", []),
    ("tool_choice", "auto"),
    ("tool_choice", "none"),
    ("functions", []),
    ("function_call", "none"),
    ("response_format", {"type": "text"}),
    ("logprobs", False),
    ("logit_bias", {}),
    ("stop", []),
    ("modalities", ["text"]),
    ("store", True),
]
IGNORED: list[tuple[str, Any]] = [
    ("parallel_tool_calls", False),
    ("temperature", 0.2),
    ("temperature", 1),  # an integer where OpenAI documents a number
    ("top_p", 0.5),
    ("max_tokens", 5),
    ("max_completion_tokens", 5),
    ("presence_penalty", -1.5),
    ("frequency_penalty", 2),
    ("seed", 42),
    ("safety_identifier", "hash-1"),
    ("prompt_cache_key", "hr"),
    ("metadata", {"team": "hr"}),
    ("service_tier", "auto"),
    ("reasoning_effort", "low"),
    ("verbosity", "low"),
    ("prediction", {"type": "content", "content": "25 days"}),
]


@pytest.fixture
def agent(core: AgentCore, keys: Keys) -> str:
    ws = core.workspace("acme", "test")
    ws.knowledge.ingest_text("handbook.txt", "Employees get 25 vacation days per year.")
    return ws.agents.create(name="HR").id


def ask(api: Api, agent: str, **extra: Any) -> Any:
    return api.post("/v1/chat/completions", json={"model": agent, "messages": [QUESTION], **extra})


def error_of(response: Any, status: int) -> dict[str, Any]:
    """The OpenAI error object of ``response``, checked for shape."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.headers["request-id"].startswith("req_")
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "code", "param"}
    error: dict[str, Any] = body["error"]
    return error


def test_every_request_field_has_its_handling() -> None:
    assert set(PARAMETERS) == set(ChatCompletionRequest.model_fields)
    assert set(PARAMETERS.values()) == {"used", "ignored", "refused"}
    assert {name for name, _ in REFUSED} == {n for n, h in PARAMETERS.items() if h == "refused"}
    assert {name for name, _ in IGNORED} == {n for n, h in PARAMETERS.items() if h == "ignored"}


@pytest.mark.parametrize(("name", "value"), REFUSED, ids=[f"{n}={v}" for n, v in REFUSED])
def test_a_refused_parameter_is_a_400_naming_it(
    api: Api, agent: str, name: str, value: Any
) -> None:
    error = error_of(ask(api, agent, **{name: value}), 400)
    assert error == {
        "message": error["message"],
        "type": "invalid_request_error",
        "code": "unsupported_parameter",
        "param": name,
    }


@pytest.mark.parametrize(
    "value",
    [{"type": "json_object"}, {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}],
)
def test_json_answers_are_refused_by_a_model_that_cannot_give_them(
    api: Api, agent: str, value: Any
) -> None:
    # the built-in extractive model quotes the knowledge: it cannot be asked for JSON
    error = error_of(ask(api, agent, response_format=value), 400)
    assert (error["code"], error["param"]) == ("response_format_unsupported", "response_format")


def test_a_response_format_of_another_shape_is_a_400(api: Api, agent: str) -> None:
    for value in ({"type": "json_schema"}, {"type": "json_schema", "json_schema": {}}):
        error = error_of(ask(api, agent, response_format=value), 400)
        assert error["param"] == "response_format", error


def test_neutral_values_of_refused_parameters_and_ignored_ones_change_nothing(
    api: Api, agent: str
) -> None:
    plain = ask(api, agent).json()["choices"][0]["message"]["content"]
    assert "25 vacation days" in plain
    # an end user, where no document has an access list, changes nothing either
    for name, value in [*NEUTRAL, *IGNORED, ("user", "user-1")]:
        response = ask(api, agent, **{name: value})
        assert response.status_code == 200, (name, response.text)
        assert response.json()["choices"][0]["message"]["content"] == plain, name


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"temperature": 2.5}, "temperature"),
        ({"n": 0}, "n"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"stream": "yes"}, "stream"),
        ({"frequency": 1}, "frequency"),  # no such parameter: refused, as OpenAI does
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "messages.0.role"),
        ({"model": ""}, "model"),
    ],
)
def test_invalid_values_are_a_400_naming_the_field(
    api: Api, agent: str, extra: dict[str, Any], param: str
) -> None:
    error = error_of(ask(api, agent, **extra), 400)
    assert error["type"] == "invalid_request_error" and error["code"] == "validation_error"
    assert error["param"] == param


@pytest.mark.parametrize(
    ("messages", "code", "param"),
    [
        (
            [QUESTION, {"role": "tool", "tool_call_id": "c1", "content": "42"}],
            "unknown_tool_call",
            "messages.1.tool_call_id",
        ),
        (
            [
                QUESTION,
                {"role": "assistant", "tool_calls": [CALL, {**CALL, "id": "c2"}]},
                {"role": "tool", "tool_call_id": "c1", "content": "42"},
            ],
            "missing_tool_output",
            "messages.1.tool_calls",
        ),
        (
            [
                QUESTION,
                {
                    "role": "assistant",
                    "tool_calls": [{**CALL, "function": {"name": "f", "arguments": "[1]"}}],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "42"},
            ],
            "invalid_tool_arguments",
            "messages.1.tool_calls.0.function.arguments",
        ),
        (
            [{"role": "function", "name": "f", "content": "42"}, QUESTION],
            "unsupported_message",
            "messages.0.role",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is in this picture?"},
                        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                    ],
                }
            ],
            "unsupported_content",
            "messages.0.content.1.type",
        ),
        ([{"role": "system", "content": "Be brief."}], "no_user_message", "messages"),
        ([{"role": "user", "content": " \n"}, QUESTION], "empty_message", "messages.0.content"),
        ([{"role": "user"}], "empty_message", "messages.0.content"),
        (
            [{"role": "user", "content": [{"type": "text", "text": "  "}]}],
            "empty_message",
            "messages.0.content",
        ),
    ],
)
def test_messages_agentcore_cannot_answer_are_refused(
    api: Api, agent: str, messages: list[dict[str, Any]], code: str, param: str
) -> None:
    response = api.post("/v1/chat/completions", json={"model": agent, "messages": messages})
    error = error_of(response, 400)
    assert (error["code"], error["param"]) == (code, param)


def test_a_long_history_message_is_refused_as_a_long_message_is(
    api: Api, agent: str, core: AgentCore
) -> None:
    long = "x" * (core.settings.max_message_chars + 1)
    history = [{"role": "user", "content": long}, {"role": "assistant", "content": "ok"}]
    response = api.post(
        "/v1/chat/completions", json={"model": agent, "messages": [*history, QUESTION]}
    )
    error = error_of(response, 400)
    assert (error["code"], error["param"]) == ("message_too_long", "messages.0.content")
    response = api.post(
        "/v1/chat/completions",
        json={"model": agent, "messages": [{"role": "user", "content": long}]},
    )
    assert error_of(response, 400)["param"] == "messages.0.content"


def test_scopes_and_keys_as_for_chat_message(api: Api, agent: str, keys: Keys) -> None:
    writer = api.with_key(keys.make(scopes=("write",)).secret)
    error = error_of(ask(writer, agent), 403)
    assert (error["type"], error["code"]) == ("permission_error", "insufficient_scope")
    anonymous = api.with_key(None)
    response = anonymous.get("/v1/models")
    assert error_of(response, 401)["code"] == "missing_api_key"
    assert response.headers["www-authenticate"] == 'Bearer realm="agentcore"'
    response = api.post(
        "/v1/chat/completions", content=b"{", headers={"Content-Type": "application/json"}
    )
    assert error_of(response, 400)["code"] == "invalid_json"
    response = api.post("/v1/chat/completions", content=b"model=x")
    assert error_of(response, 415)["code"] == "unsupported_media_type"


def test_idempotency_keys_do_not_apply(api: Api, agent: str) -> None:
    """OpenAI ignores them: two requests with one key are two answers, in two conversations."""
    first, second = (
        api.post(
            "/v1/chat/completions",
            json={"model": agent, "messages": [QUESTION]},
            headers={"Idempotency-Key": "k1"},
        )
        for _ in range(2)
    )
    assert first.status_code == second.status_code == 200
    assert "idempotent-replayed" not in second.headers
    assert first.json()["conversation_id"] != second.json()["conversation_id"]


def test_messages_after_the_last_user_message_are_not_used(api: Api, agent: str) -> None:
    """The last user message is answered: a system message after it is skipped as any
    is, an assistant reply after it is one the answer replaces (regenerating it)."""
    for after in ({"role": "system", "content": "Be brief."}, {"role": "assistant"}):
        body = {"model": agent, "messages": [QUESTION, after]}
        response = api.post("/v1/chat/completions", json=body)
        assert response.status_code == 200, response.text
        assert "25" in response.json()["choices"][0]["message"]["content"]
