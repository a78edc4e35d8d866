"""Route: POST /v1/chat/message."""

from __future__ import annotations

from typing import cast

from agentcore.models import ChatMessageRequest, ChatMessageResponse
from agentcore_starlette.routing import ApiRoute, Call


def send_chat_message(call: Call) -> ChatMessageResponse:
    """Send a message to an agent; the answer cites the source documents and pages used."""
    body = cast(ChatMessageRequest, call.body)
    return call.workspace.chat.send(body.agentId, body.message, body.conversationId)


ROUTES = [
    ApiRoute(
        "POST",
        "/chat/message",
        send_chat_message,
        ChatMessageResponse,
        "Send a message to an agent",
        "read",
        "chat",
        body="json",
        request=ChatMessageRequest,
    ),
]
