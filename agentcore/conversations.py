"""Conversation history: list a workspace's conversations, read their messages, delete
them; and a person taking one over (an operator's reply, handing it back)."""

from __future__ import annotations

import unicodedata
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import ValidationError

from agentcore._ids import utcnow
from agentcore.config import Settings
from agentcore.errors import (
    NotFound,
    PermissionDenied,
    ValidationFailed,
    check_unicode,
    invalid_fields,
)
from agentcore.schema import (
    Conversation,
    ConversationList,
    Deleted,
    Environment,
    Feedback,
    FeedbackCreate,
    Message,
    MessageList,
    Rating,
)
from agentcore.storage.base import ConversationStore
from agentcore.storage.records import StoredMessage
from agentcore.workspace import Workspace

if TYPE_CHECKING:
    from agentcore.events import Event

Order = Literal["asc", "desc"]
ORDERS: tuple[Order, ...] = ("asc", "desc")


class Publisher(Protocol):
    """Where events go: a chat turn's, an operator's messages (``EventBus.publish``)."""

    def publish(
        self, kind: str, data: dict[str, Any], *, organization_id: str, environment: Environment
    ) -> Event:
        """Record and announce an event of a workspace."""
        ...


def publish_message(
    events: Publisher,
    workspace: Workspace,
    agent_id: str,
    conversation_id: str,
    role: str,
    content: str,
    *,
    user: str | None = None,
) -> None:
    """Announce a message of a handed-off conversation (``conversation.message``), with
    the end ``user`` it is for when one is known."""
    events.publish(
        "conversation.message",
        {
            "agent_id": agent_id,
            "conversation_id": conversation_id,
            **({} if user is None else {"user": user}),
            "role": role,
            "content": content,
        },
        organization_id=workspace.organization_id,
        environment=workspace.environment,
    )


def check_message(text: str, *, max_chars: int, param: str) -> None:
    """A 422 naming ``param`` for a message no conversation takes: blank
    (``empty_message``), longer than ``max_chars`` (``message_too_long``), or holding a
    lone surrogate. A user's chat message and an operator's reply are checked alike."""
    if not text.strip():
        raise ValidationFailed("The message is empty.", code="empty_message", param=param)
    if len(text) > max_chars:
        raise ValidationFailed(
            f"The message is longer than {max_chars} characters.",
            code="message_too_long",
            param=param,
        )
    check_unicode(text, param=param)


QUESTION_CHARS = 500
"""The most characters of a normalised question (``question_text``) that are kept."""
# what ends a sentence, after NFKC (which makes ？！，：； their ASCII forms)
_SENTENCE_ENDS = ".,;:!?\u3002\u3001\u061f"


def question_text(message: str) -> str:
    """``message`` as an agent's stats group questions: NFKC, case-folded, each run of
    white space one space, no trailing ``. , ; : ! ?`` (nor ``。、؟``), at most
    ``QUESTION_CHARS`` characters. A message of punctuation alone keeps it."""
    text = " ".join(unicodedata.normalize("NFKC", message).casefold().split())
    trimmed = text[:QUESTION_CHARS].rstrip(_SENTENCE_ENDS + " ")
    return trimmed or text[:QUESTION_CHARS]


def _missing(conversation_id: str) -> NotFound:
    return NotFound(f"No conversation with id {conversation_id!r}.", param="id")


class ConversationService:
    """The conversations of one workspace (what chat stores); reached as
    ``workspace.conversations``.

    Each chat turn adds the user's message and the agent's answer (with the answer's
    citations and token usage) to its conversation; this service reads them back for a
    chat UI and deletes them for good. Reading needs the ``read`` scope, deleting
    ``write``. Another organization's or environment's conversation is a 404.

    A person takes a conversation over when its agent hands off, or by replying in it
    (``reply``): its ``status`` is then ``handed_off``, the user's messages are kept and
    announced (``conversation.message``) and no model answers them, until ``release``
    gives it back to the agent.

    :param workspace: whose conversations, and the caller's scopes.
    :param store: where conversations are kept.
    :param settings: the page sizes and the longest message.
    :param events: where operators' messages are announced.
    """

    def __init__(
        self,
        workspace: Workspace,
        *,
        store: ConversationStore,
        settings: Settings,
        events: Publisher,
    ) -> None:
        self._ws = workspace
        self._store = store
        self._settings = settings
        self._events = events

    def list(
        self,
        *,
        agent_id: str | None = None,
        user: str | None = None,
        limit: int | None = None,
        starting_after: str | None = None,
    ) -> ConversationList:
        """A page of conversations, newest first (only ``agent_id``'s when given, only
        those for the end user ``user`` when given). A client token lists its own user's,
        with the agents it may use.

        ``limit`` defaults to ``default_page_size``; ``starting_after`` is the id of the
        last conversation of the previous page.
        """
        ws = self._ws
        ws.require("read", end_users=True)
        if ws.client is not None:  # a client token lists its own user's only
            if user is not None and user != ws.client.user.id:
                raise PermissionDenied(
                    "A client token lists only its own user's conversations.",
                    code="user_not_allowed",
                    param="user",
                )
            user = ws.client.user.id
        agents = None if ws.client is None else ws.client.agents
        conversations, more = self._store.list_conversations(
            ws.organization_id,
            ws.environment,
            limit=self._settings.page_size(limit),
            starting_after=starting_after,
            agent_id=agent_id,
            user=user,
            agent_ids=None if agents is None else sorted(agents),
        )
        return ConversationList(conversations=conversations, has_more=more)

    def get(self, conversation_id: str) -> Conversation:
        """One conversation, with its message count."""
        self._ws.require("read", end_users=True)
        return self._visible(conversation_id)

    def _visible(self, conversation_id: str) -> Conversation:
        """The conversation, if the caller may see it (a client token: its user's own, with
        an agent it may use), else a 404: another's does not exist for them."""
        ws = self._ws
        found = self._store.get_conversation(ws.organization_id, ws.environment, conversation_id)
        if found is None or not ws.sees_conversation_of(found.user, found.agentId):
            raise _missing(conversation_id)
        return found

    def messages(
        self,
        conversation_id: str,
        *,
        limit: int | None = None,
        starting_after: str | None = None,
        order: Order = "asc",
    ) -> MessageList:
        """A page of a conversation's messages, oldest first (``order="desc"``: newest
        first); ``starting_after`` is the id of the last message of the previous page."""
        ws = self._ws
        ws.require("read", end_users=True)
        if order not in ORDERS:
            raise ValidationFailed("order must be 'asc' or 'desc'.", param="order")
        if ws.client is not None:
            self._visible(conversation_id)
        page = self._store.list_messages(
            ws.organization_id,
            ws.environment,
            conversation_id,
            limit=self._settings.page_size(limit),
            starting_after=starting_after,
            newest_first=order == "desc",
        )
        if page is None:
            raise _missing(conversation_id)
        messages, more = page
        return MessageList(messages=messages, has_more=more)

    def reply(self, conversation_id: str, content: str) -> Message:
        """Add an operator's message (``role: "operator"``) and take the conversation over
        (``handed_off``), if the agent had not handed it off already. Write scope.

        The message is announced as ``conversation.message``; the model sees it as the
        agent's own turn once the conversation is released.
        """
        ws = self._ws
        ws.require("write")
        check_message(content, max_chars=self._settings.max_message_chars, param="content")
        # the store, not ``get``: replying needs only the write scope
        found = self._store.get_conversation(ws.organization_id, ws.environment, conversation_id)
        if found is None:
            raise _missing(conversation_id)
        self._store.add_messages(
            conversation_id, [StoredMessage("operator", content, [])], status="handed_off"
        )
        publish_message(
            self._events, ws, found.agentId, conversation_id, "operator", content, user=found.user
        )
        page = self._store.list_messages(
            ws.organization_id,
            ws.environment,
            conversation_id,
            limit=1,
            starting_after=None,
            newest_first=True,
        )
        if page is None or not page[0]:
            raise _missing(conversation_id)  # deleted meanwhile
        return page[0][0]

    def feedback(
        self,
        conversation_id: str,
        message_id: str,
        rating: Rating,
        reason: str | None = None,
    ) -> Message:
        """Rate an answer of the conversation (``rating`` ``"up"`` or ``"down"``, and why,
        at most 1,000 characters); a second rating replaces the first. Read scope: the
        people a conversation answers rate it. Announced as ``message.feedback``.

        A message that is not the agent's answer is a 409 (``not_an_answer``); a bad
        rating or reason a 422 naming it; another workspace's conversation a 404.
        """
        ws = self._ws
        ws.require("read", end_users=True)
        try:
            given = FeedbackCreate.model_validate({"rating": rating, "reason": reason})
        except ValidationError as exc:
            raise invalid_fields(exc) from None
        check_unicode(message_id, param="message_id")
        found = self._visible(conversation_id)
        feedback = Feedback(rating=given.rating, reason=given.reason, rated_at=utcnow())
        rated = self._store.rate_message(
            ws.organization_id, ws.environment, conversation_id, message_id, feedback
        )
        if rated is None:
            raise NotFound(
                f"No message with id {message_id!r} in this conversation.", param="message_id"
            )
        self._events.publish(
            "message.feedback",
            {
                "agent_id": found.agentId,
                "conversation_id": conversation_id,
                **({} if found.user is None else {"user": found.user}),
                "message_id": message_id,
                "rating": feedback.rating,
                "reason": feedback.reason,
            },
            organization_id=ws.organization_id,
            environment=ws.environment,
        )
        return rated

    def release(self, conversation_id: str) -> Conversation:
        """Give a handed-off conversation back to its agent (``active``): the next user
        message is answered by the model again. Releasing an active one changes nothing.
        Write scope."""
        ws = self._ws
        ws.require("write")
        released = self._store.set_conversation_status(
            ws.organization_id, ws.environment, conversation_id, "active"
        )
        if released is None:
            raise _missing(conversation_id)
        return released

    def delete(self, conversation_id: str) -> Deleted:
        """Delete a conversation and all its messages, for good. Write scope.

        Afterwards it is a 404 everywhere, also as the ``conversationId`` of a chat.
        A client token deletes only its own user's.
        """
        ws = self._ws
        ws.require("write", end_users=True)
        if ws.client is not None:
            self._visible(conversation_id)
        if not self._store.delete_conversation(ws.organization_id, ws.environment, conversation_id):
            raise _missing(conversation_id)
        return Deleted(id=conversation_id)
