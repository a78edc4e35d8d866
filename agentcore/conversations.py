"""Conversation history: list a workspace's conversations, read their messages, delete them."""

from __future__ import annotations

from typing import Literal

from agentcore.config import Settings
from agentcore.errors import NotFound, ValidationFailed
from agentcore.schema import Conversation, ConversationList, Deleted, MessageList
from agentcore.storage.base import ConversationStore
from agentcore.workspace import Workspace

Order = Literal["asc", "desc"]
ORDERS: tuple[Order, ...] = ("asc", "desc")


def _missing(conversation_id: str) -> NotFound:
    return NotFound(f"No conversation with id {conversation_id!r}.", param="id")


class ConversationService:
    """The conversations of one workspace (what chat stores); reached as
    ``workspace.conversations``.

    Each chat turn adds the user's message and the agent's answer (with the answer's
    citations and token usage) to its conversation; this service reads them back for a
    chat UI and deletes them for good. Reading needs the ``read`` scope, deleting
    ``write``. Another organization's or environment's conversation is a 404.

    :param workspace: whose conversations, and the caller's scopes.
    :param store: where conversations are kept.
    :param settings: the page sizes.
    """

    def __init__(
        self, workspace: Workspace, *, store: ConversationStore, settings: Settings
    ) -> None:
        self._ws = workspace
        self._store = store
        self._settings = settings

    def list(
        self,
        *,
        agent_id: str | None = None,
        limit: int | None = None,
        starting_after: str | None = None,
    ) -> ConversationList:
        """A page of conversations, newest first (only ``agent_id``'s when given).

        ``limit`` defaults to ``default_page_size``; ``starting_after`` is the id of the
        last conversation of the previous page.
        """
        ws = self._ws
        ws.require("read")
        conversations, more = self._store.list_conversations(
            ws.organization_id,
            ws.environment,
            limit=self._settings.page_size(limit),
            starting_after=starting_after,
            agent_id=agent_id,
        )
        return ConversationList(conversations=conversations, has_more=more)

    def get(self, conversation_id: str) -> Conversation:
        """One conversation, with its message count."""
        ws = self._ws
        ws.require("read")
        found = self._store.get_conversation(ws.organization_id, ws.environment, conversation_id)
        if found is None:
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
        ws.require("read")
        if order not in ORDERS:
            raise ValidationFailed("order must be 'asc' or 'desc'.", param="order")
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

    def delete(self, conversation_id: str) -> Deleted:
        """Delete a conversation and all its messages, for good. Write scope.

        Afterwards it is a 404 everywhere, also as the ``conversationId`` of a chat.
        """
        ws = self._ws
        ws.require("write")
        if not self._store.delete_conversation(ws.organization_id, ws.environment, conversation_id):
            raise _missing(conversation_id)
        return Deleted(id=conversation_id)
