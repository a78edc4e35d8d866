"""Workspace: one (organization, environment) seen through one key and its scopes."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

from agentcore.errors import PermissionDenied, ValidationFailed
from agentcore.models import Environment, Scope, VerifyResponse

if TYPE_CHECKING:
    from agentcore.agents import AgentService
    from agentcore.chat import ChatService
    from agentcore.conversations import ConversationService
    from agentcore.core import AgentCore
    from agentcore.events import Event
    from agentcore.knowledge.service import KnowledgeService
    from agentcore.webhooks.service import WebhookService


class Workspace:
    """What a caller may see and do: every operation checks its scope here.

    Obtained from ``core.authenticate(secret)`` (scopes of the key) or, for trusted
    host code and the CLI, ``core.workspace(organization, environment)``. Its
    services are built by the core (the composition root) on first use.
    """

    def __init__(
        self,
        core: AgentCore,
        *,
        organization_id: str,
        organization: str,
        environment: Environment,
        scopes: frozenset[Scope],
        key_id: str | None = None,
    ) -> None:
        self.core = core
        self.organization_id = organization_id
        self.organization = organization
        self.environment: Environment = environment
        self.scopes = scopes
        self.key_id = key_id

    def __repr__(self) -> str:
        scopes = ",".join(sorted(self.scopes))
        return f"<Workspace {self.organization}/{self.environment} [{scopes}]>"

    def require(self, scope: Scope) -> None:
        """Raise 403 unless this workspace's key has ``scope``."""
        if scope not in self.scopes:
            held = ", ".join(sorted(self.scopes)) or "none"
            raise PermissionDenied(
                f"This operation needs the '{scope}' scope; the key has: {held}.",
                code="insufficient_scope",
            )

    def verify(self) -> VerifyResponse:
        """Who is calling: organization, environment and scopes (any valid key)."""
        return VerifyResponse(
            organization=self.organization,
            scope=sorted(self.scopes),
            environment=self.environment,
            key_id=self.key_id,
        )

    def page_size(self, limit: int | None) -> int:
        """``limit`` checked against the configured maximum page size (default if None)."""
        settings = self.core.settings
        if limit is None:
            return settings.default_page_size
        if not 1 <= limit <= settings.max_page_size:
            raise ValidationFailed(
                f"limit must be between 1 and {settings.max_page_size}.",
                code="limit_out_of_range",
                param="limit",
            )
        return limit

    def publish(self, kind: str, data: dict[str, Any]) -> Event:
        """Publish an event scoped to this workspace."""
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
    def webhooks(self) -> WebhookService:
        """Webhook subscriptions of this workspace."""
        return self.core.webhook_service(self)
