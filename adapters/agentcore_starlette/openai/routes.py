"""Routes: OpenAI-compatible POST /v1/chat/completions, GET /v1/models and
GET /v1/models/{id}.

Requests, answers, errors and streams are in OpenAI's shapes (``requests``,
``responses``), so OpenAI's SDKs and the tools built on them talk to agents as
they talk to models. Keys, scopes, rate limits, limits and events are those of
``POST /v1/chat/message``: the same core call answers both.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import cast

from sse_starlette import ServerSentEvent

from agentcore.adapters import CHAT_STATUSES, new_id
from agentcore.chat_models import ChatTurn
from agentcore.errors import AgentCoreError, NotFound
from agentcore.schema import Agent, ChatMessageResponse
from agentcore_starlette.openai.requests import (
    ChatCompletionRequest,
    caller_options,
    end_user,
    refuse_unsupported,
    split_messages,
)
from agentcore_starlette.openai.responses import (
    ChatCompletion,
    ChatCompletionChunk,
    ChunkChoice,
    ChunkDelta,
    ChunkToolCall,
    CompletionChoice,
    CompletionFunction,
    CompletionMessage,
    CompletionToolCall,
    CompletionUsage,
    ModelList,
    ModelObject,
    OpenAIErrorResponse,
    url_citations,
)
from agentcore_starlette.problems import openai_error_body
from agentcore_starlette.routing import ApiRoute, Call, StreamEvent
from agentcore_starlette.streaming import Streamed


def create_chat_completion(call: Call) -> ChatCompletion | Streamed:
    """Ask an agent (`model`) in OpenAI's Chat Completions format.

    The last user message is answered; earlier user and assistant messages are the
    chat model's history, or, with the extension field `conversation_id`, the stored
    conversation is (`messages` then holds the one user message). An assistant reply
    after the last user message is replaced. `tools` are offered beside the agent's
    own and run by the caller: when the model calls one (or an agent's tool that no
    plugin runs), the answer's `finish_reason` is `tool_calls` with `message.tool_calls`,
    and the caller sends the same messages again with that assistant message and a
    `tool` message for each call (with `conversation_id`: only those). The answer cites
    its sources in the extension field `citations` (also on the streamed chunk with
    `finish_reason`). With
    `"stream": true` the answer comes as `chat.completion.chunk` events ending with
    `data: [DONE]`. Errors use OpenAI's envelope `{"error": {message, type, code,
    param}}`; parameters agentcore cannot honour are refused with 400
    `unsupported_parameter` (docs/openai-and-mcp.md lists each).
    """
    body = cast(ChatCompletionRequest, call.body)
    refuse_unsupported(body)
    chat = call.workspace.chat
    asked = split_messages(
        body.messages,
        max_chars=call.workspace.core.settings.max_message_chars,
        max_output=call.workspace.core.settings.max_tool_output_chars,
        stored=body.conversation_id is not None,
    )
    history: list[ChatTurn] | None = asked.history
    if body.conversation_id is not None and not history or asked.outputs is not None:
        # the stored conversation's turns are the history (earlier messages sent as
        # well would be a second, possibly different one: the core refuses both)
        history = None
    tools = caller_options(body, asked)
    # a resume offers the tools it was given again, or else those the turn paused with
    offered = tools if asked.outputs is None or body.tools is not None else None
    completion_id, created = new_id("chatcmpl"), int(time.time())
    with _openai_params(asked.index):
        if body.stream:
            stream = chat.stream(
                body.model,
                asked.message,
                body.conversation_id,
                history=history,
                tool_outputs=asked.outputs,
                caller=offered,
                user=end_user(body),
            )
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            framing = CompletionFraming(completion_id, created, body.model, include_usage)
            return Streamed(stream, framing)
        answer = chat.send(
            body.model,
            asked.message,
            body.conversation_id,
            history=history,
            cancellation=call.cancellation,
            tool_outputs=asked.outputs,
            caller=offered,
            user=end_user(body),
        )
    calls = completion_tool_calls(answer)
    content = answer.response if answer.response or not calls else None
    message = CompletionMessage(
        content=content,
        tool_calls=calls,
        annotations=url_citations(content or "", answer.citations),
    )
    return ChatCompletion(
        id=completion_id,
        created=created,
        model=answer.agentId,
        choices=[
            CompletionChoice(message=message, finish_reason="tool_calls" if calls else "stop")
        ],
        usage=completion_usage(answer),
        citations=answer.citations,
        conversation_id=answer.conversationId,
    )


def completion_tool_calls(answer: ChatMessageResponse) -> list[CompletionToolCall] | None:
    """The calls a turn waits for, as OpenAI's ``tool_calls`` (arguments as JSON text);
    ``None`` for an answer that waits for none."""
    if not answer.tool_calls:
        return None
    return [
        CompletionToolCall(
            id=call.id,
            function=CompletionFunction(name=call.name, arguments=json.dumps(call.arguments)),
        )
        for call in answer.tool_calls
    ]


def list_models(call: Call) -> ModelList:
    """The agents this key may chat with, as OpenAI lists models: with a test key every
    agent in `draft` or `deployed`, with a live key the deployed ones."""
    ws = call.workspace
    return ModelList(data=[_model(agent, ws.organization) for agent in ws.chat.agents()])


def retrieve_model(call: Call) -> ModelObject:
    """One agent as OpenAI describes a model, if this key may chat with it (else 404
    `model_not_found`, as for an agent of another tenant)."""
    ws = call.workspace
    with _openai_params(0):
        agent = ws.agents.get(call.path["agent_id"])
    if agent.status not in CHAT_STATUSES[ws.environment]:
        raise NotFound(
            f"The agent {agent.id!r} does not chat with this key (it is {agent.status}).",
            code="model_not_found",
            param="model",
        )
    return _model(agent, ws.organization)


def _model(agent: Agent, organization: str) -> ModelObject:
    return ModelObject(
        id=agent.id, created=int(agent.created_at.timestamp()), owned_by=organization
    )


def completion_usage(answer: ChatMessageResponse) -> CompletionUsage | None:
    """The turn's token counts in OpenAI's terms (``prompt_tokens`` are our
    ``input_tokens``, ``completion_tokens`` our ``output_tokens``); ``None`` when the
    chat model reported none."""
    usage = answer.usage
    if usage is None:
        return None
    return CompletionUsage(
        prompt_tokens=usage.input_tokens,
        completion_tokens=usage.output_tokens,
        total_tokens=usage.input_tokens + usage.output_tokens,
    )


_PARAMS = {"agentId": "model", "id": "model", "conversationId": "conversation_id"}
"""The chat call's field names and the request fields of Chat Completions they came from."""


@contextlib.contextmanager
def _openai_params(answered: int) -> Iterator[None]:
    """Name the Chat Completions field an error of the chat call is about (``model``,
    not ``agentId``); an unknown agent is OpenAI's 404 ``model_not_found``."""
    try:
        yield
    except AgentCoreError as error:
        if error.param == "message":
            error.param = f"messages.{answered}.content"
        elif error.param in _PARAMS:
            if isinstance(error, NotFound) and error.param in ("agentId", "id"):
                error.code = "model_not_found"
            error.param = _PARAMS[error.param]
        raise


class CompletionFraming:
    """A streamed answer as OpenAI's ``chat.completion.chunk`` events (``Framing``).

    The first chunk says the role, each delta is a chunk, the chunk with
    ``finish_reason`` carries the citations and conversation; with ``include_usage`` a
    last chunk has empty ``choices`` and the ``usage``; then ``data: [DONE]``. A failure
    is one ``{"error": {...}}`` event, as OpenAI sends it (its SDKs raise ``APIError``).
    """

    def __init__(self, completion_id: str, created: int, model: str, include_usage: bool) -> None:
        self.completion_id = completion_id
        self.created = created
        self.model = model
        self.include_usage = include_usage
        self.started = False

    def _chunk(self, chunk: ChatCompletionChunk) -> ServerSentEvent:
        return ServerSentEvent(chunk.__pydantic_serializer__.to_json(chunk).decode())

    def _make(self, choices: list[ChunkChoice], **extra: object) -> ServerSentEvent:
        chunk = ChatCompletionChunk.model_validate(
            {
                "id": self.completion_id,
                "created": self.created,
                "model": self.model,
                "choices": choices,
                **extra,
            }
        )
        return self._chunk(chunk)

    def _opening(self) -> list[ServerSentEvent]:
        if self.started:
            return []
        self.started = True
        return [self._make([ChunkChoice(delta=ChunkDelta(role="assistant", content=""))])]

    def delta(self, text: str) -> list[ServerSentEvent]:
        """A chunk with the next piece of text (after the role chunk, the first time)."""
        return [*self._opening(), self._make([ChunkChoice(delta=ChunkDelta(content=text))])]

    def completed(self, response: ChatMessageResponse) -> list[ServerSentEvent]:
        """The tool calls the turn waits for (a chunk holding them whole), the
        ``finish_reason`` chunk with the citations, the usage chunk, ``[DONE]``."""
        events = self._opening()
        calls = completion_tool_calls(response)
        if calls:
            numbered = [
                ChunkToolCall(index=index, **call.model_dump()) for index, call in enumerate(calls)
            ]
            events.append(self._make([ChunkChoice(delta=ChunkDelta(tool_calls=numbered))]))
        events.append(
            self._make(
                [ChunkChoice(delta=ChunkDelta(), finish_reason="tool_calls" if calls else "stop")],
                citations=response.citations,
                conversation_id=response.conversationId,
            )
        )
        if self.include_usage:
            events.append(self._make([], usage=completion_usage(response)))
        events.append(ServerSentEvent("[DONE]"))
        return events

    def error(self, error: AgentCoreError, request_id: str | None) -> list[ServerSentEvent]:
        """One event holding OpenAI's error envelope."""
        return [ServerSentEvent(json.dumps(openai_error_body(error), separators=(",", ":")))]


ROUTES = [
    ApiRoute(
        method="POST",
        path="/chat/completions",
        handler=create_chat_completion,
        response=ChatCompletion,
        summary="Ask an agent (OpenAI-compatible)",
        scope="read",
        tag="openai",
        end_users=True,
        body="json",
        request=ChatCompletionRequest,
        events=(
            StreamEvent(
                "chat.completion.chunk",
                ChatCompletionChunk,
                "Sent as unnamed `data:` events; the stream ends with `data: [DONE]`.",
            ),
            StreamEvent(
                "error",
                OpenAIErrorResponse,
                "An unnamed `data:` event holding OpenAI's error envelope; the last event.",
            ),
        ),
        error_format="openai",
        idempotency=False,
    ),
    ApiRoute(
        method="GET",
        path="/models/{agent_id}",
        handler=retrieve_model,
        response=ModelObject,
        summary="Retrieve an agent as a model (OpenAI-compatible)",
        scope="read",
        tag="openai",
        end_users=True,
        error_format="openai",
    ),
    ApiRoute(
        method="GET",
        path="/models",
        handler=list_models,
        response=ModelList,
        summary="List the agents as models (OpenAI-compatible)",
        scope="read",
        tag="openai",
        end_users=True,
        error_format="openai",
    ),
]
