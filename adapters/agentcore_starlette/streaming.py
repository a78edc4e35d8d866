"""Streamed chat answers as server-sent events, framed by sse-starlette.

``response.delta`` events carry the text as it is generated, ``response.completed``
the whole answer (the body a non-streaming call returns), ``error`` the problem
document of a failure after the stream started. A comment heartbeat keeps idle
connections open; a client that goes away closes the ``ChatStream``, which stops
the model. A server that shuts down ends each open stream with an ``error`` event
(503 ``server_shutting_down``) rather than cutting it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.to_thread
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.responses import Response

from agentcore.chat import ChatStream
from agentcore.errors import AgentCoreError
from agentcore.redact import get_logger
from agentcore.schema import ChatDelta, ChatMessageResponse, Problem
from agentcore_starlette.problems import problem_body
from agentcore_starlette.routing import StreamEvent

log = get_logger("agentcore.http")  # masks keys and secrets in every record

SHUTDOWN_GRACE = 2.0  # seconds a stream has to say goodbye when the server shuts down


class ShuttingDown(AgentCoreError):
    """The server is shutting down; the answer was cut short (ask again)."""

    status = 503
    default_code = "server_shutting_down"
    title = "Service Unavailable"


CHAT_EVENTS = (
    StreamEvent("response.delta", ChatDelta, "The next piece of the answer's text."),
    StreamEvent(
        "response.completed",
        ChatMessageResponse,
        "The whole answer, as the non-streaming call returns it; the deltas joined are "
        "its `response`. The last event.",
    ),
    StreamEvent("error", Problem, "The problem document of a failure; the last event."),
)


def event_stream(stream: ChatStream, request_id: str | None, *, heartbeat: float) -> Response:
    """The ``text/event-stream`` response relaying ``stream``; a comment every
    ``heartbeat`` seconds while it is quiet."""
    shutdown = anyio.Event()
    return EventSourceResponse(
        _events(stream, request_id, shutdown),
        headers={"Cache-Control": "no-cache"},
        ping=heartbeat,
        sep="\n",
        shutdown_event=shutdown,
        shutdown_grace_period=SHUTDOWN_GRACE,
    )


async def _events(
    stream: ChatStream, request_id: str | None, shutdown: anyio.Event
) -> AsyncIterator[ServerSentEvent]:
    try:
        while True:
            kind, value = await _next(stream, shutdown)
            if kind == "shutdown":
                kind, value = "error", ShuttingDown("The server is shutting down; ask again.")
            if kind == "delta":
                yield ServerSentEvent(json.dumps({"delta": value}), event="response.delta")
            elif kind == "completed":
                yield ServerSentEvent(value.model_dump_json(), event="response.completed")
                return
            elif kind == "error":
                body = json.dumps(problem_body(value, request_id), separators=(",", ":"))
                yield ServerSentEvent(body, event="error")
                return
            else:  # closed
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
