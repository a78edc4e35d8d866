"""WorkspaceServices: a ``Workspace`` with its services, as host code and plugins use it.

``core.authenticate(key)`` and ``core.workspace(org, env)`` return one:
``ws.agents``, ``ws.knowledge``, ``ws.chat``, ``ws.conversations``, ``ws.webhooks`` and
``ws.client_tokens`` are the workspace's
services, built by the core (the composition root) on first use. This module sits
above the services and the ``Workspace`` value, which never import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from agentcore.agents import AgentService
from agentcore.chat import ChatService
from agentcore.client_tokens import ClientTokenService, grant
from agentcore.config import Settings
from agentcore.conversations import ConversationService
from agentcore.events import Event, EventBus
from agentcore.knowledge.service import KnowledgeService
from agentcore.storage.records import StoredClientToken
from agentcore.webhooks.service import WebhookService
from agentcore.workspace import Workspace


class ServiceFactory(Protocol):
    """Builds the services of a workspace (``AgentCore``, the composition root)."""

    @property
    def events(self) -> EventBus:
        """The core's event bus."""
        ...

    @property
    def settings(self) -> Settings:
        """The core's settings (adapters check request limits against them)."""
        ...

    def agent_service(self, workspace: Workspace) -> AgentService:
        """The agents of ``workspace``."""
        ...

    def knowledge_service(self, workspace: Workspace) -> KnowledgeService:
        """The knowledge core of ``workspace``."""
        ...

    def chat_service(self, workspace: Workspace) -> ChatService:
        """Chat in ``workspace``."""
        ...

    def conversation_service(self, workspace: Workspace) -> ConversationService:
        """The conversations of ``workspace``."""
        ...

    def webhook_service(self, workspace: Workspace) -> WebhookService:
        """Webhook subscriptions of ``workspace``."""
        ...

    def client_token_service(self, workspace: Workspace) -> ClientTokenService:
        """The client tokens of ``workspace``."""
        ...


@dataclass(frozen=True, kw_only=True, repr=False, eq=False)
class WorkspaceServices(Workspace):
    """A ``Workspace`` (organization, environment, scopes, key) with its services.

    Every service checks the workspace's scopes. Built by the core; compares as the
    ``Workspace`` it extends (the same tenant, scopes and key).

    :param core: builds the services (the ``AgentCore`` that handed this out).
    """

    core: ServiceFactory = field(repr=False)

    @classmethod
    def of(cls, workspace: Workspace, core: ServiceFactory) -> WorkspaceServices:
        """``workspace`` with the services ``core`` builds for it."""
        return cls(
            organization_id=workspace.organization_id,
            organization=workspace.organization,
            environment=workspace.environment,
            scopes=workspace.scopes,
            key_id=workspace.key_id,
            client=workspace.client,
            core=core,
        )

    @classmethod
    def of_token(cls, token: StoredClientToken, core: ServiceFactory) -> WorkspaceServices:
        """The workspace a live client token opens: its key's tenant and scopes, acting
        only as the token's user."""
        return cls(
            organization_id=token.organization_id,
            organization=token.organization,
            environment="live" if token.environment == "live" else "test",
            scopes=frozenset(scope for scope in ("read", "write") if scope in token.key_scopes),
            key_id=token.key_id,
            client=grant(token),
            core=core,
        )

    def publish(self, kind: str, data: dict[str, Any]) -> Event:
        """Publish an event of a registered ``kind`` in this workspace."""
        return self.core.events.publish(
            kind, data, organization_id=self.organization_id, environment=self.environment
        )

    @cached_property
    def agents(self) -> AgentService:
        """The agent registry of this workspace."""
        return self.core.agent_service(self)

    @cached_property
    def knowledge(self) -> KnowledgeService:
        """The knowledge core of this workspace: documents and search."""
        return self.core.knowledge_service(self)

    @cached_property
    def chat(self) -> ChatService:
        """Chat with this workspace's agents."""
        return self.core.chat_service(self)

    @cached_property
    def conversations(self) -> ConversationService:
        """The conversations of this workspace: their history, and deleting them."""
        return self.core.conversation_service(self)

    @cached_property
    def client_tokens(self) -> ClientTokenService:
        """Mint and revoke client tokens for this workspace's end users (write scope)."""
        return self.core.client_token_service(self)

    @cached_property
    def webhooks(self) -> WebhookService:
        """Webhook subscriptions of this workspace."""
        return self.core.webhook_service(self)
