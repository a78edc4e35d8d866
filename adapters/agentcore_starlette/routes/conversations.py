"""Routes: /v1/conversations — list, get, read messages, delete; an operator's reply and
handing a conversation back to its agent."""

from __future__ import annotations

from typing import cast

from agentcore.adapters import ORDERS, Order
from agentcore.errors import ValidationFailed
from agentcore.schema import (
    MAX_PRINCIPAL_CHARS,
    Conversation,
    ConversationList,
    Deleted,
    FeedbackCreate,
    Message,
    MessageList,
    OperatorMessageCreate,
)
from agentcore_starlette.routing import PAGINATION, ApiRoute, Call, QueryParam


def list_conversations(call: Call) -> ConversationList:
    """A page of conversations, newest first; `agentId` keeps one agent's, `user` one end
    user's."""
    agent_id, user = call.query.get("agentId"), call.query.get("user")
    for name, value in (("agentId", agent_id), ("user", user)):
        if value == "":  # an empty filter would silently list every conversation
            raise ValidationFailed(
                f"'{name}' must not be empty: leave it out to list every conversation.",
                param=name,
            )
    if user is not None and len(user) > MAX_PRINCIPAL_CHARS:
        raise ValidationFailed(
            f"'user' must be at most {MAX_PRINCIPAL_CHARS} characters.", param="user"
        )
    return call.workspace.conversations.list(
        agent_id=agent_id,
        user=user,
        limit=call.int_query("limit"),
        starting_after=call.str_query("starting_after"),
    )


def get_conversation(call: Call) -> Conversation:
    """One conversation, with its message count."""
    return call.workspace.conversations.get(call.path["conversation_id"])


def list_conversation_messages(call: Call) -> MessageList:
    """A page of the conversation's messages, oldest first (`order=desc`: newest first).

    An answer carries the citations (and token `usage`, when the model reported it)
    its chat response carried.
    """
    return call.workspace.conversations.messages(
        call.path["conversation_id"],
        limit=call.int_query("limit"),
        starting_after=call.str_query("starting_after"),
        order=cast(Order, call.str_query("order", ORDERS) or "asc"),
    )


def rate_message(call: Call) -> Message:
    """Rate one of the agent's answers: `up` (it helped) or `down`, with an optional
    `reason`; a second rating replaces the first. The message shows its `feedback`, and
    a `message.feedback` event is sent to subscribers. Rating a message that is not an
    answer is a 409 (`not_an_answer`)."""
    body = cast(FeedbackCreate, call.body)
    return call.workspace.conversations.feedback(
        call.path["conversation_id"], call.path["message_id"], body.rating, body.reason
    )


def reply_in_conversation(call: Call) -> Message:
    """A person's reply in the conversation (`role: "operator"`), which takes it over.

    The conversation becomes `handed_off` (if its agent had not handed off already): the
    user's next messages are kept and sent to webhook subscribers as
    `conversation.message` events, and no model answers them, until it is released.
    """
    body = cast(OperatorMessageCreate, call.body)
    return call.workspace.conversations.reply(call.path["conversation_id"], body.content)


def release_conversation(call: Call) -> Conversation:
    """Give a handed-off conversation back to its agent: status `active`, and the agent
    answers the next message (with the operator's replies in its history)."""
    return call.workspace.conversations.release(call.path["conversation_id"])


def delete_conversation(call: Call) -> Deleted:
    """Delete the conversation and its messages for good; chatting with its id is then a 404."""
    return call.workspace.conversations.delete(call.path["conversation_id"])


_ONE = "/conversations/{conversation_id}"
ROUTES = [
    ApiRoute(
        method="GET",
        path="/conversations",
        handler=list_conversations,
        response=ConversationList,
        summary="List conversations",
        scope="read",
        tag="conversations",
        end_users=True,
        query=(
            *PAGINATION,
            QueryParam(
                "agentId", {"type": "string", "minLength": 1}, "Only this agent's conversations."
            ),
            QueryParam(
                "user",
                {"type": "string", "minLength": 1, "maxLength": MAX_PRINCIPAL_CHARS},
                "Only the conversations of this end user (the `user` they were started with).",
            ),
        ),
    ),
    ApiRoute(
        method="GET",
        path=_ONE,
        handler=get_conversation,
        response=Conversation,
        summary="Retrieve a conversation",
        scope="read",
        tag="conversations",
        end_users=True,
    ),
    ApiRoute(
        method="GET",
        path=_ONE + "/messages",
        handler=list_conversation_messages,
        response=MessageList,
        summary="List a conversation's messages",
        scope="read",
        tag="conversations",
        end_users=True,
        query=(
            *PAGINATION,
            QueryParam(
                "order",
                {"type": "string", "enum": list(ORDERS), "default": "asc"},
                "asc: oldest first (the default); desc: newest first.",
            ),
        ),
    ),
    ApiRoute(
        method="POST",
        path=_ONE + "/messages",
        handler=reply_in_conversation,
        response=Message,
        summary="Reply in a conversation as an operator",
        scope="write",
        tag="conversations",
        body="json",
        request=OperatorMessageCreate,
        status_code=201,
    ),
    ApiRoute(
        method="POST",
        path=_ONE + "/messages/{message_id}/feedback",
        handler=rate_message,
        response=Message,
        summary="Rate an answer",
        scope="read",
        tag="conversations",
        end_users=True,
        body="json",
        request=FeedbackCreate,
    ),
    ApiRoute(
        method="POST",
        path=_ONE + "/release",
        handler=release_conversation,
        response=Conversation,
        summary="Hand a conversation back to its agent",
        scope="write",
        tag="conversations",
    ),
    ApiRoute(
        method="DELETE",
        path=_ONE,
        handler=delete_conversation,
        response=Deleted,
        summary="Delete a conversation",
        scope="write",
        tag="conversations",
        end_users=True,
    ),
]
