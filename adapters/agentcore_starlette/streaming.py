"""Streamed chat answers as server-sent events, framed by sse-starlette.

A ``Framing`` turns each step of a ``ChatStream`` into events. The API's own
(``CHAT_FRAMING``): ``response.delta`` events carry the text as it is generated,
``response.completed`` the whole answer (the body a non-streaming call returns; for
a turn that waits for the caller's tools, ``response.requires_action``),
``error`` the problem document of a failure after the stream started; the OpenAI
route frames the same steps as ``chat.completion.chunk`` objects. A comment heartbeat
keeps idle connections open; a client that goes away closes the ``ChatStream``, which
stops the model. A server that shuts down ends each open stream with an error event
(503 ``server_shutting_down``) rather than cutting it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import anyio.to_thread
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.responses import Response

from agentcore import ChatStream
from agentcore.adapters import get_logger
from agentcore.errors import AgentCoreError, ShuttingDown
from agentcore.schema import ChatDelta, ChatMessageResponse, Problem
from agentcore_starlette.problems import problem_body
from agentcore_starlette.routing import StreamEvent

log = get_logger("agentcore.http")  # masks keys and secrets in every record

SHUTDOWN_GRACE = 2.0  # seconds a stream has to say goodbye when the server shuts down


CHAT_EVENTS = (
    StreamEvent("response.delta", ChatDelta, "The next piece of the answer's text."),
    StreamEvent(
        "response.completed",
        ChatMessageResponse,
        "The whole answer, as the non-streaming call returns it; the deltas joined are "
        "its `response`. The last event.",
    ),
    StreamEvent(
        "response.requires_action",
        ChatMessageResponse,
        "The answer so far, with the `tool_calls` the turn waits for (`status:"
        " requires_action`), in place of `response.completed`. The last event.",
    ),
    StreamEvent("error", Problem, "The problem document of a failure; the last event."),
)


class Framing(Protocol):
    """How the steps of a streamed answer become server-sent events."""

    def delta(self, text: str) -> list[ServerSentEvent]:
        """The events for the next piece of the answer's text."""
        ...

    def completed(self, response: ChatMessageResponse) -> list[ServerSentEvent]:
        """The events that end a complete answer (the last ones sent)."""
        ...

    def error(self, error: AgentCoreError, request_id: str | None) -> list[ServerSentEvent]:
        """The events that end a failed answer (the last ones sent)."""
        ...


class ChatFraming:
    """The API's own events (``CHAT_EVENTS``): ``response.delta``, then
    ``response.completed`` or ``error``."""

    def delta(self, text: str) -> list[ServerSentEvent]:
        """A ``response.delta`` event: ``{"delta": text}``."""
        return [ServerSentEvent(json.dumps({"delta": text}), event="response.delta")]

    def completed(self, response: ChatMessageResponse) -> list[ServerSentEvent]:
        """A ``response.completed`` event holding the whole answer, or for a turn that
        waits for the caller's tools, a ``response.requires_action`` event."""
        kind = "response.requires_action" if response.tool_calls else "response.completed"
        return [ServerSentEvent(response.model_dump_json(), event=kind)]

    def error(self, error: AgentCoreError, request_id: str | None) -> list[ServerSentEvent]:
        """An ``error`` event holding the failure's problem document."""
        body = json.dumps(problem_body(error, request_id), separators=(",", ":"))
        return [ServerSentEvent(body, event="error")]


CHAT_FRAMING = ChatFraming()


@dataclass(frozen=True)
class Streamed:
    """What a handler returns for an answer sent as it is generated: the stream, and
    how its steps are framed (a bare ``ChatStream`` is framed as ``CHAT_FRAMING``)."""

    stream: ChatStream
    framing: Framing = CHAT_FRAMING


def event_stream(streamed: Streamed, request_id: str | None, *, heartbeat: float) -> Response:
    """The ``text/event-stream`` response relaying ``streamed``; a comment every
    ``heartbeat`` seconds while it is quiet."""
    shutdown = anyio.Event()
    return EventSourceResponse(
        _events(streamed, request_id, shutdown),
        headers={"Cache-Control": "no-cache"},
        ping=heartbeat,
        sep="\n",
        shutdown_event=shutdown,
        shutdown_grace_period=SHUTDOWN_GRACE,
    )


async def _events(
    streamed: Streamed, request_id: str | None, shutdown: anyio.Event
) -> AsyncIterator[ServerSentEvent]:
    stream, framing = streamed.stream, streamed.framing
    try:
        while True:
            kind, value = await _next(stream, shutdown)
            if kind == "shutdown":
                kind, value = "error", ShuttingDown("The server is shutting down; ask again.")
            if kind == "delta":
                events = framing.delta(value)
            elif kind == "completed":
                events = framing.completed(value)
            elif kind == "error":
                events = framing.error(value, request_id)
            else:  # closed
                return
            for event in events:
                yield event
            if kind != "delta":
                return
    finally:
        stream.close()


async def _next(stream: ChatStream, shutdown: anyio.Event) -> tuple[str, Any]:
    """The stream's next step, or ``("shutdown", None)`` once the server shuts down."""
    outcome: tuple[str, Any] = ("shutdown", None)
    async with anyio.create_task_group() as group:

        async def step() -> None:
            nonlocal outcome
            # abandon_on_cancel: a client that leaves (or a shutdown) ends the wait at
            # once; stream.close() then wakes the worker thread still waiting on the model
            outcome = await anyio.to_thread.run_sync(_step, stream, abandon_on_cancel=True)
            group.cancel_scope.cancel()

        async def watch() -> None:
            await shutdown.wait()
            group.cancel_scope.cancel()

        group.start_soon(step)
        group.start_soon(watch)
    return outcome


def _step(stream: ChatStream) -> tuple[str, Any]:
    """The stream's next event: a delta, the completed answer, an error, or closed."""
    try:
        return "delta", next(stream)
    except StopIteration:
        return ("closed", None) if stream.closed else ("completed", stream.response)
    except AgentCoreError as error:
        return "error", error
    except Exception:
        log.exception("unhandled error in a streamed answer")
        return "error", AgentCoreError("The server hit an unexpected error.")
