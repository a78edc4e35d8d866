"""Route: POST /v1/chat/message."""

from __future__ import annotations

from typing import cast

from agentcore import ChatStream
from agentcore.schema import ChatMessageRequest, ChatMessageResponse
from agentcore_starlette.routing import ApiRoute, Call
from agentcore_starlette.streaming import CHAT_EVENTS


def send_chat_message(call: Call) -> ChatMessageResponse | ChatStream:
    """Send a message to an agent; the answer cites the source documents and pages used.

    With `"stream": true` the answer comes as server-sent events (`text/event-stream`)
    while it is generated: `response.delta` events (`{"delta": "..."}`), then one
    `response.completed` event holding the body the non-streaming call returns (the
    deltas joined are its `response`), or an `error` event holding a problem document.
    Comment lines (`: ping`) are heartbeats. Errors found before the stream starts
    are ordinary problem responses. `Idempotency-Key` does not apply to streams.

    When the model calls tools the caller runs, the answer has `status:
    "requires_action"` and `tool_calls` (streamed: a `response.requires_action` event
    ends the stream instead of `response.completed`); the turn waits until the same
    call brings their `tool_outputs` with the `conversationId` and no `message`. A call
    of a tool that needs approval waits as `type: "approval"`, decided in `approvals`.
    """
    body = cast(ChatMessageRequest, call.body)
    chat = call.workspace.chat
    if body.stream:  # a stream is stopped by closing it (the client going away)
        return chat.stream(
            body.agentId,
            body.message,
            body.conversationId,
            tool_outputs=body.tool_outputs,
            approvals=body.approvals,
            user=body.user,
        )
    return chat.send(
        body.agentId,
        body.message,
        body.conversationId,
        cancellation=call.cancellation,
        tool_outputs=body.tool_outputs,
        approvals=body.approvals,
        user=body.user,
    )


ROUTES = [
    ApiRoute(
        method="POST",
        path="/chat/message",
        handler=send_chat_message,
        response=ChatMessageResponse,
        summary="Send a message to an agent",
        scope="read",
        tag="chat",
        end_users=True,
        body="json",
        request=ChatMessageRequest,
        events=CHAT_EVENTS,
    ),
]
