"""OpenAI's Chat Completions request: its fields, what of them is honoured, ignored or
refused, and the conversation its ``messages`` ask about.

``model`` names an agent; the last user message of ``messages`` is the one answered,
the user and assistant messages before it are the model's history, and the assistant
``tool_calls`` and ``tool`` messages after it are the calls of this turn the caller
already ran (its ``tools``). ``PARAMETERS`` says, for every request field, whether it is
used, accepted and ignored, or refused (400) when set to a value that would silently
change the meaning of the answer (``n > 1``, JSON output, logprobs, ...);
docs/openai-and-mcp.md lists the same table (tests/docs check it).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, StrictBool, field_validator

from agentcore import CallerOptions
from agentcore.chat_models import ChatTurn, ToolCall, ToolSpec, ToolStep
from agentcore.errors import InvalidRequest, ValidationFailed
from agentcore.schema import MAX_PRINCIPALS, EndUser, FunctionShape, Principal, Request

Handling = Literal["used", "ignored", "refused"]

PARAMETERS: dict[str, Handling] = {
    "model": "used",
    "messages": "used",
    "stream": "used",
    "stream_options": "used",
    "conversation_id": "used",  # agentcore's extension
    "tools": "used",
    "tool_choice": "used",
    "n": "refused",
    "functions": "refused",
    "function_call": "refused",
    "response_format": "used",
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
    "user": "used",
    "user_groups": "used",  # agentcore's extension
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


MAX_REQUEST_TOOLS = 64
"""The most ``tools`` one request may offer (as an agent may have)."""


class CalledFunction(Request):
    """The function an assistant message's tool call names, with its JSON arguments."""

    name: str = Field(..., min_length=1, max_length=64)
    arguments: str = Field(description="The arguments, a JSON object as text.")


class MessageToolCall(Request):
    """One of an assistant message's ``tool_calls``."""

    id: str = Field(..., min_length=1, max_length=100)
    type: Literal["function"] = "function"
    function: CalledFunction


class FunctionDefinition(FunctionShape):
    """A function a request offers (``tools[].function``): an agent's tool's shape, and
    OpenAI's ``strict`` flag, accepted and not enforced."""

    strict: StrictBool | None = None


class ChatCompletionTool(Request):
    """One of a request's ``tools``: a function the caller runs."""

    type: Literal["function"]
    function: FunctionDefinition


class ChatCompletionMessageParam(Request):
    """One message of ``messages``, as OpenAI defines it (every role, every field)."""

    role: Literal["system", "developer", "user", "assistant", "tool", "function"] = Field(
        json_schema_extra={"enum": ["system", "developer", "user", "assistant", "tool"]}
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
    tool_calls: list[MessageToolCall] | None = Field(None, max_length=MAX_REQUEST_TOOLS)
    tool_call_id: str | None = Field(None, max_length=100)
    function_call: dict[str, Any] | None = Field(None, json_schema_extra=_only(_NOTHING))
    audio: dict[str, Any] | None = Field(None, json_schema_extra=_only(_NOTHING))
    annotations: list[dict[str, Any]] | None = Field(
        None,
        description="An assistant message's annotations, as an answer gave them (its"
        " citations): accepted back, not used.",
    )


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
    tools: list[ChatCompletionTool] | None = Field(None, max_length=MAX_REQUEST_TOOLS)
    tool_choice: str | dict[str, Any] | None = Field(
        None,
        json_schema_extra=_only(
            {"enum": ["none", "auto", "required"]},
            {
                "type": "object",
                "required": ["type", "function"],
                "properties": {
                    "type": {"const": "function"},
                    "function": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {"name": {"type": "string"}},
                    },
                },
            },
        ),
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
            {
                "type": "object",
                "required": ["type"],
                "properties": {"type": {"enum": ["text", "json_object"]}},
            },
            {
                "type": "object",
                "required": ["type", "json_schema"],
                "properties": {
                    "type": {"const": "json_schema"},
                    "json_schema": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {"name": {"type": "string"}},
                    },
                },
            },
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
    user: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        description="The end user the answer is for: only documents they may read"
        " (`access`) are retrieved and cited.",
    )
    user_groups: list[Principal] | None = Field(
        None,
        max_length=MAX_PRINCIPALS,
        description="agentcore's extension: the groups of `user` (ignored without it).",
    )
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
        ("functions", bool(body.functions), _NO_CLIENT_TOOLS),
        ("function_call", _named_choice(body.function_call), _NO_CLIENT_TOOLS),
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


_NO_CLIENT_TOOLS = "functions and function_call are not supported: use tools and tool_choice."


def _named_choice(choice: str | dict[str, Any] | None) -> bool:
    """Whether a ``tool_choice``/``function_call`` asks for a tool call (not none/auto)."""
    return choice is not None and choice not in _FREE_CHOICES


def caller_options(body: ChatCompletionRequest, asked: Conversation) -> CallerOptions:
    """The tools a request offers (``tools``, run by the caller), its ``tool_choice``,
    and the calls of this turn its messages say the caller ran. A turn that pauses is
    kept only in a stored conversation (``conversation_id``): otherwise the caller sends
    the turn again with the outputs, as OpenAI's API has it."""
    offered = [
        ToolSpec(tool.function.name, tool.function.description, tool.function.parameters)
        for tool in body.tools or ()
    ]
    choice = body.tool_choice
    if isinstance(choice, dict):
        named = choice.get("function")
        name = named.get("name") if isinstance(named, dict) else None
        if choice.get("type") != "function" or not isinstance(name, str):
            raise InvalidRequest(
                "tool_choice is 'none', 'auto', 'required' or"
                " {'type': 'function', 'function': {'name': ...}}.",
                code="invalid_tool_choice",
                param="tool_choice",
            )
        choice = name
    elif choice is not None and choice not in ("none", "auto", "required"):
        raise InvalidRequest(
            f"tool_choice {choice!r} is not one of 'none', 'auto', 'required'.",
            code="invalid_tool_choice",
            param="tool_choice",
        )
    return CallerOptions(
        tools=offered,
        steps=asked.steps,
        rounds=asked.rounds,
        choice=choice or "auto",
        kept=body.conversation_id is not None,
        response_format=_response_format(body.response_format),
        approves=False,  # Chat Completions has no way to approve a call
    )


def _response_format(given: dict[str, Any] | None) -> dict[str, Any] | None:
    """The JSON a request wants the answer in, or ``None`` for text (absent, or
    ``{"type": "text"}``); 400 ``invalid_response_format`` for another shape."""
    if given is None or given.get("type") == "text":
        return None
    schema = given.get("json_schema")
    if given.get("type") == "json_object" or (
        given.get("type") == "json_schema"
        and isinstance(schema, dict)
        and isinstance(schema.get("name"), str)
    ):
        return given
    raise InvalidRequest(
        "response_format is {'type': 'text'}, {'type': 'json_object'} or"
        " {'type': 'json_schema', 'json_schema': {'name': ..., 'schema': {...}}}.",
        code="invalid_response_format",
        param="response_format",
    )


@dataclass(frozen=True)
class Conversation:
    """What ``messages`` asks: the message to answer, the turns before it, and the tool
    calls of this turn the caller already ran; or, for a stored conversation's turn that
    waits for the caller's tools, only their ``outputs`` (``message`` is then None)."""

    message: str | None
    history: list[ChatTurn]
    index: int
    """The position of the answered message in ``messages`` (for error params)."""
    steps: list[ToolStep] = field(default_factory=list)
    rounds: int = 0
    outputs: list[dict[str, str]] | None = None


def split_messages(
    messages: list[ChatCompletionMessageParam],
    *,
    max_chars: int,
    stored: bool = False,
    max_output: int | None = None,
) -> Conversation:
    """The last user message, to answer, the user and assistant turns before it, and the
    tool calls of this turn the caller ran (the assistant ``tool_calls`` and ``tool``
    messages after it).

    System and developer messages are skipped (the agent's own prompt applies), and so
    are the tool calls and tool messages of earlier turns and an assistant's text after
    the last user message (a reply the new answer replaces, as regenerating one does).
    A function message, an assistant's ``function_call`` or audio, content parts other
    than text, a user message whose text is blank, a history message over
    ``max_chars``, a tool message that answers no call of the assistant message before
    it, a call left unanswered, and ``messages`` without a user message are refused
    with a 400 naming the field, e.g. ``messages.2.content.0.type``. With a ``stored``
    conversation (``conversation_id``), whose turns are the history, ``messages`` holds
    one user message and no assistant message, or only the ``tool`` messages (and the
    assistant's ``tool_calls`` they answer) that resume its waiting turn. The OpenAPI
    document declares each of these rules (``declare_completion_messages``). A tool
    message longer than ``max_output`` characters is a 400 ``tool_output_too_long``.
    """
    for index, item in enumerate(messages):
        where = f"messages.{index}"
        if item.role == "tool" and max_output is not None and len(_text(item, where)) > max_output:
            raise InvalidRequest(
                f"A tool's output may hold at most {max_output} characters.",
                code="tool_output_too_long",
                param=f"{where}.content",
            )
        if item.role == "function":
            raise InvalidRequest(
                "'function' messages are not supported: send 'tool' messages.",
                code="unsupported_message",
                param=f"{where}.role",
            )
        for name in ("function_call", "audio"):
            if getattr(item, name):
                raise InvalidRequest(
                    f"Messages with {name} are not supported: calls are tool_calls, and"
                    " answers are text.",
                    code="unsupported_message",
                    param=f"{where}.{name}",
                )
    users = [index for index, item in enumerate(messages) if item.role == "user"]
    if stored and not users and any(item.role == "tool" for item in messages):
        return _resumed(messages)
    if not users:
        raise InvalidRequest(
            "The messages hold no user message to answer.",
            code="no_user_message",
            param="messages",
        )
    last = users[-1]
    turns: list[ChatTurn] = []
    for index, item in enumerate(messages[: last + 1]):
        where = f"messages.{index}"
        if stored and (
            item.role in ("assistant", "tool") or (item.role == "user" and index != last)
        ):
            raise InvalidRequest(
                "Give the earlier turns either as messages or as a conversation id, not both.",
                code="history_with_conversation",
                param=f"{where}.role",
            )
        if item.role in ("system", "developer", "tool"):
            continue  # an earlier turn's tool outputs: the model saw them in that turn
        text = _text(item, where)
        if item.role == "user" and not text.strip():
            raise InvalidRequest(
                "The message is empty.", code="empty_message", param=f"{where}.content"
            )
        if index != last and len(text) > max_chars:
            raise ValidationFailed(
                f"The message is longer than {max_chars} characters.",
                code="message_too_long",
                param=f"{where}.content",
            )
        if item.role == "assistant" and item.tool_calls and not text:
            continue  # an earlier turn's calls, said nothing
        turns.append(ChatTurn(role="user" if item.role == "user" else "assistant", content=text))
    answered = turns.pop()
    for index in range(last + 1, len(messages)) if stored else ():
        if messages[index].role in ("assistant", "tool"):
            raise InvalidRequest(
                "With a conversation id, messages holds the one new user message.",
                code="history_with_conversation",
                param=f"messages.{index}.role",
            )
    steps, rounds = _tool_steps(messages, last + 1)
    return Conversation(answered.content, turns, last, steps, rounds)


def _tool_steps(
    messages: list[ChatCompletionMessageParam], start: int
) -> tuple[list[ToolStep], int]:
    """The calls the assistant messages from ``start`` on made and the tool messages
    that answer them, and how many assistant messages made calls (the model's steps)."""
    steps: list[ToolStep] = []
    rounds = 0
    calls: dict[str, ToolCall] = {}
    asked_at = -1
    for index in range(start, len(messages)):
        item, where = messages[index], f"messages.{index}"
        if item.role == "assistant" and item.tool_calls:
            _check_answered(calls, asked_at)
            calls = {
                call.id: _called(call, f"{where}.tool_calls.{number}")
                for number, call in enumerate(item.tool_calls)
            }
            asked_at, rounds = index, rounds + 1
        elif item.role == "tool":
            call = calls.pop(item.tool_call_id or "", None)
            if call is None:
                raise InvalidRequest(
                    "A tool message answers a call of the assistant message before it:"
                    f" {item.tool_call_id!r} is none of its calls (or is answered twice).",
                    code="unknown_tool_call",
                    param=f"{where}.tool_call_id",
                )
            steps.append(ToolStep(call, _text(item, where)))
    _check_answered(calls, asked_at)
    return steps, rounds


def _check_answered(calls: dict[str, ToolCall], asked_at: int) -> None:
    """400 when calls of the assistant message at ``asked_at`` have no tool message."""
    if calls:
        raise InvalidRequest(
            "Each tool call needs a tool message with its output; none came for "
            + ", ".join(calls)
            + ".",
            code="missing_tool_output",
            param=f"messages.{asked_at}.tool_calls",
        )


def _called(call: MessageToolCall, where: str) -> ToolCall:
    """An assistant message's call as the chat model's ``ToolCall``."""
    try:
        arguments = json.loads(call.function.arguments)
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        raise InvalidRequest(
            "A tool call's arguments are a JSON object, as text.",
            code="invalid_tool_arguments",
            param=f"{where}.function.arguments",
        )
    return ToolCall(call.id, call.function.name, arguments)


def _resumed(messages: list[ChatCompletionMessageParam]) -> Conversation:
    """The outputs that ``tool`` messages give a stored conversation's waiting turn."""
    outputs: list[dict[str, str]] = []
    for index, item in enumerate(messages):
        where = f"messages.{index}"
        if item.role != "tool":
            continue  # the assistant's tool_calls they answer, sent back as OpenAI's SDKs do
        if not item.tool_call_id:
            raise InvalidRequest(
                "A tool message names the call it answers in tool_call_id.",
                code="unknown_tool_call",
                param=f"{where}.tool_call_id",
            )
        outputs.append({"tool_call_id": item.tool_call_id, "output": _text(item, where)})
    return Conversation(None, [], len(messages) - 1, outputs=outputs)


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


def end_user(body: ChatCompletionRequest) -> EndUser | None:
    """The end user a completion answers for: ``user``, with the ``user_groups``
    extension as their groups; ``None`` without ``user``."""
    if body.user is None:
        return None
    return EndUser(id=body.user, groups=body.user_groups or [])
