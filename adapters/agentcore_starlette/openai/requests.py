"""OpenAI's Chat Completions request: its fields, what of them is honoured, ignored or
refused, and the conversation its ``messages`` ask about.

``model`` names an agent; the last message of ``messages`` (a user's) is the one
answered, and the user and assistant messages before it are the model's history.
``PARAMETERS`` says, for every request field, whether it is used, accepted and ignored,
or refused (400) when set to a value that would silently change the meaning of the
answer (``n > 1``, client-side tools, JSON output, logprobs, ...); docs/openai-and-mcp.md
lists the same table (tests/docs check it).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, StrictBool, field_validator

from agentcore.chat_models import ChatTurn
from agentcore.errors import InvalidRequest, ValidationFailed
from agentcore.schema import Request

Handling = Literal["used", "ignored", "refused"]

PARAMETERS: dict[str, Handling] = {
    "model": "used",
    "messages": "used",
    "stream": "used",
    "stream_options": "used",
    "conversation_id": "used",  # agentcore's extension
    "n": "refused",
    "tools": "refused",
    "tool_choice": "refused",
    "functions": "refused",
    "function_call": "refused",
    "response_format": "refused",
    "logprobs": "refused",
    "top_logprobs": "refused",
    "logit_bias": "refused",
    "stop": "refused",
    "modalities": "refused",
    "audio": "refused",
    "web_search_options": "refused",
    "store": "refused",
    "parallel_tool_calls": "ignored",
    "temperature": "ignored",
    "top_p": "ignored",
    "max_tokens": "ignored",
    "max_completion_tokens": "ignored",
    "presence_penalty": "ignored",
    "frequency_penalty": "ignored",
    "seed": "ignored",
    "user": "ignored",
    "safety_identifier": "ignored",
    "prompt_cache_key": "ignored",
    "metadata": "ignored",
    "service_tier": "ignored",
    "reasoning_effort": "ignored",
    "verbosity": "ignored",
    "prediction": "ignored",
}
"""What agentcore does with each field of a Chat Completions request: ``used`` (it has
its effect), ``ignored`` (accepted, checked for type and range, without effect), or
``refused`` (400 ``unsupported_parameter`` when set to a value that would change the
answer's meaning; its neutral values, such as ``n: 1`` or ``tools: []``, are accepted).
docs/openai-and-mcp.md says why for each."""

_TEXT_PARTS = ("text", "refusal")
_FREE_CHOICES = ("none", "auto")


def _only(*accepted: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """A ``json_schema_extra`` declaring that a field accepts only ``accepted`` (or null):
    what OpenAI allows beyond that is refused (``refuse_unsupported``), and the OpenAPI
    document says so."""

    def declare(schema: dict[str, Any]) -> None:
        kept: dict[str, Any] = {k: schema[k] for k in ("default", "description") if k in schema}
        schema.clear()
        # copies: the OpenAPI document adds limits and patterns to what it is given
        schema.update(kept, anyOf=copy.deepcopy([*accepted, {"type": "null"}]))

    return declare


_NOTHING: dict[str, Any] = {"not": {}}
"""Matches no value: only null is accepted."""
_TEXT_PART = {
    "type": "object",
    "required": ["type", "text"],
    "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
}
_REFUSAL_PART = {
    "type": "object",
    "required": ["type", "refusal"],
    "properties": {"type": {"const": "refusal"}, "refusal": {"type": "string"}},
}


class StreamOptions(Request):
    """``stream_options`` of a streamed completion."""

    include_usage: StrictBool | None = None
    include_obfuscation: StrictBool | None = None


class ChatCompletionMessageParam(Request):
    """One message of ``messages``, as OpenAI defines it (every role, every field)."""

    role: Literal["system", "developer", "user", "assistant", "tool", "function"] = Field(
        json_schema_extra={"enum": ["system", "developer", "user", "assistant"]}
    )
    content: str | list[dict[str, Any]] | None = Field(
        None,
        description="Text, or content parts; only text parts (and an assistant's refusal"
        " parts) are accepted.",
        json_schema_extra=_only(
            {"type": "string"}, {"type": "array", "items": {"anyOf": [_TEXT_PART, _REFUSAL_PART]}}
        ),
    )
    name: str | None = None
    refusal: str | None = None
    tool_calls: list[dict[str, Any]] | None = Field(None, json_schema_extra={"maxItems": 0})
    tool_call_id: str | None = None
    function_call: dict[str, Any] | None = Field(None, json_schema_extra=_only(_NOTHING))
    audio: dict[str, Any] | None = Field(None, json_schema_extra=_only(_NOTHING))


class ChatCompletionRequest(Request):
    """Body of ``POST /v1/chat/completions`` (``PARAMETERS`` says what each field does)."""

    model: str = Field(..., min_length=1, max_length=100, description="The id of an agent.")
    messages: list[ChatCompletionMessageParam] = Field(..., min_length=1)
    stream: StrictBool | None = None
    stream_options: StreamOptions | None = None
    conversation_id: str | None = Field(
        None,
        min_length=1,
        max_length=100,
        description="agentcore's extension: continue this stored conversation.",
    )
    n: int | None = Field(None, ge=1, json_schema_extra={"maximum": 1})
    tools: list[dict[str, Any]] | None = Field(
        None, json_schema_extra={"maxItems": 0, "items": {"type": "object"}}
    )
    tool_choice: str | dict[str, Any] | None = Field(
        None, json_schema_extra=_only({"enum": list(_FREE_CHOICES)})
    )
    parallel_tool_calls: StrictBool | None = None
    functions: list[dict[str, Any]] | None = Field(
        None, json_schema_extra={"maxItems": 0, "items": {"type": "object"}}
    )
    function_call: str | dict[str, Any] | None = Field(
        None, json_schema_extra=_only({"enum": list(_FREE_CHOICES)})
    )
    response_format: dict[str, Any] | None = Field(
        None,
        json_schema_extra=_only(
            {"type": "object", "required": ["type"], "properties": {"type": {"const": "text"}}}
        ),
    )
    logprobs: StrictBool | None = Field(None, json_schema_extra=_only({"const": False}))
    top_logprobs: int | None = Field(None, json_schema_extra=_only(_NOTHING))
    logit_bias: dict[str, int] | None = Field(None, json_schema_extra={"maxProperties": 0})
    stop: str | list[str] | None = Field(
        None,
        json_schema_extra=_only(
            {"type": "string", "maxLength": 0},
            # items declared: generated clients cannot type an array without them
            {"type": "array", "maxItems": 0, "items": {"type": "string"}},
        ),
    )
    modalities: list[str] | None = Field(
        None, json_schema_extra=_only({"type": "array", "items": {"const": "text"}})
    )
    audio: dict[str, Any] | None = Field(None, json_schema_extra=_only(_NOTHING))
    web_search_options: dict[str, Any] | None = Field(None, json_schema_extra=_only(_NOTHING))
    store: StrictBool | None = Field(None, json_schema_extra=_only({"const": True}))
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    seed: int | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    metadata: dict[str, str] | None = None
    service_tier: str | None = None
    reasoning_effort: str | None = None
    verbosity: str | None = None
    prediction: dict[str, Any] | None = None

    @field_validator(
        "n", "top_logprobs", "max_tokens", "max_completion_tokens", "seed", mode="before"
    )
    @classmethod
    def _integral_number(cls, value: Any) -> Any:
        # JSON Schema counts 2.0 as an integer (as SearchRequest.top_k); 2.5 stays an error
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value


def refuse_unsupported(body: ChatCompletionRequest) -> None:
    """400 ``unsupported_parameter`` naming the first field set to a value agentcore
    cannot honour (``PARAMETERS``: the ``refused`` ones)."""
    refused: list[tuple[str, bool, str]] = [
        ("n", (body.n or 1) > 1, "n above 1 is not supported: an agent gives one answer."),
        ("tools", bool(body.tools), _NO_CLIENT_TOOLS),
        ("tool_choice", _named_choice(body.tool_choice), _NO_CLIENT_TOOLS),
        ("functions", bool(body.functions), _NO_CLIENT_TOOLS),
        ("function_call", _named_choice(body.function_call), _NO_CLIENT_TOOLS),
        (
            "response_format",
            body.response_format is not None and body.response_format.get("type") != "text",
            "Only response_format {'type': 'text'} is supported: answers are cited text,"
            " not guaranteed JSON.",
        ),
        ("logprobs", body.logprobs is True, "logprobs are not supported."),
        ("top_logprobs", body.top_logprobs is not None, "top_logprobs are not supported."),
        ("logit_bias", bool(body.logit_bias), "logit_bias is not supported."),
        ("stop", bool(body.stop), "Stop sequences are not supported: the answer is not cut."),
        (
            "modalities",
            any(kind != "text" for kind in body.modalities or ()),
            "Only the text modality is supported.",
        ),
        ("audio", body.audio is not None, "Audio output is not supported."),
        (
            "web_search_options",
            body.web_search_options is not None,
            "Web search is not supported: answers come from the knowledge core.",
        ),
        (
            "store",
            body.store is False,
            "store=false is not supported: every answered turn is kept in its conversation.",
        ),
    ]
    for name, is_refused, detail in refused:
        if is_refused:
            raise InvalidRequest(detail, code="unsupported_parameter", param=name)


_NO_CLIENT_TOOLS = (
    "Client-side tools are not supported: an agent's tools are set on the agent"
    " (PATCH /v1/agents/{id}) and run by agentcore."
)


def _named_choice(choice: str | dict[str, Any] | None) -> bool:
    """Whether a ``tool_choice``/``function_call`` asks for a tool call (not none/auto)."""
    return choice is not None and choice not in _FREE_CHOICES


@dataclass(frozen=True)
class Conversation:
    """What ``messages`` asks: the message to answer, and the turns before it."""

    message: str
    history: list[ChatTurn]
    index: int
    """The position of the answered message in ``messages`` (for error params)."""


def split_messages(
    messages: list[ChatCompletionMessageParam], *, max_chars: int, stored: bool = False
) -> Conversation:
    """The last user message, to answer, and the user and assistant turns before it.

    System and developer messages are skipped (the agent's own prompt applies), and so
    are messages after the last user message (an assistant reply there is one the new
    answer replaces, as regenerating a reply does). A tool or function message, an
    assistant's tool calls or audio, content parts other than text, a user message whose
    text is blank, a history message over ``max_chars`` and ``messages`` without a user
    message are refused with a 400 naming the field, e.g. ``messages.2.content.0.type``.
    With a ``stored`` conversation (``conversation_id``), whose turns are the history,
    ``messages`` holds one user message and no assistant message. The OpenAPI document
    declares each of these rules (``declare_completion_messages``).
    """
    users = [index for index, item in enumerate(messages) if item.role == "user"]
    if not users:
        raise InvalidRequest(
            "The messages hold no user message to answer.",
            code="no_user_message",
            param="messages",
        )
    last = users[-1]
    turns: list[ChatTurn] = []
    for index, item in enumerate(messages):
        where = f"messages.{index}"
        if item.role in ("tool", "function"):
            raise InvalidRequest(
                f"{item.role!r} messages are not supported: there are no client-side tools.",
                code="unsupported_message",
                param=f"{where}.role",
            )
        for field in ("tool_calls", "function_call", "audio"):
            if getattr(item, field):
                raise InvalidRequest(
                    f"Messages with {field} are not supported: there are no client-side"
                    " tools, and answers are text.",
                    code="unsupported_message",
                    param=f"{where}.{field}",
                )
        if stored and (item.role == "assistant" or (item.role == "user" and index != last)):
            raise InvalidRequest(
                "Give the earlier turns either as messages or as a conversation id, not both.",
                code="history_with_conversation",
                param=f"{where}.role",
            )
        if item.role in ("system", "developer"):
            continue
        text = _text(item, where)
        if item.role == "user" and not text.strip():
            raise InvalidRequest(
                "The message is empty.", code="empty_message", param=f"{where}.content"
            )
        if index > last:
            continue  # an assistant reply after the question: the answer replaces it
        if index != last and len(text) > max_chars:
            raise ValidationFailed(
                f"The message is longer than {max_chars} characters.",
                code="message_too_long",
                param=f"{where}.content",
            )
        turns.append(ChatTurn(role="user" if item.role == "user" else "assistant", content=text))
    answered = turns.pop()
    return Conversation(answered.content, turns, last)


def _text(item: ChatCompletionMessageParam, where: str) -> str:
    """A message's text: its content string, or its text parts joined by newlines."""
    content = item.content
    if content is None:
        return item.refusal or ""
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for number, part in enumerate(content):
        kind = part.get("type")
        value = part.get(kind) if isinstance(kind, str) else None
        if kind not in _TEXT_PARTS or not isinstance(value, str):
            raise InvalidRequest(
                f"Content parts of type {kind!r} are not supported: send text"
                " ({'type': 'text', 'text': '...'}).",
                code="unsupported_content",
                param=f"{where}.content.{number}.type",
            )
        texts.append(value)
    return "\n".join(texts)
