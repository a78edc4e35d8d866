"""Workspace: one (organization, environment) seen through one key and its scopes.

A plain value: it names the tenant and what the caller may do, and checks scopes. The
services that act in a workspace are built by the core (``agentcore.core``); what
``authenticate()`` and ``workspace()`` hand out is a ``WorkspaceServices``
(``agentcore._workspace_services``), this value with its services attached.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from agentcore.errors import PermissionDenied
from agentcore.schema import AgentStatus, EndUser, Environment, Scope, VerifyResponse

CHAT_STATUSES: dict[str, tuple[AgentStatus, ...]] = {
    "test": ("draft", "deployed"),
    "live": ("deployed",),
}
"""The statuses of the agents a key of each environment may chat with ("draft queries":
a test key also reaches agents in ``draft``); a client token lists these too."""


@dataclass(frozen=True, kw_only=True)
class ClientGrant:
    """What a client token lets its holder do: act as one end user, with some agents.

    :param token_id: the token's id (its rate limit is its own).
    :param user: the end user the token was minted for; every search and answer is
        theirs, and only their conversations are visible.
    :param agents: the agents the token may list and chat with (``None``: every agent
        the key could chat with).
    :param expires_at: when the token stops working.
    """

    token_id: str
    user: EndUser
    agents: frozenset[str] | None
    expires_at: datetime

    def allows_agent(self, agent_id: str) -> bool:
        """Whether the token may see and chat with ``agent_id``."""
        return self.agents is None or agent_id in self.agents


@dataclass(frozen=True, kw_only=True)
class Workspace:
    """What a caller may see and do: every operation checks its scope here.

    :param organization_id: the organization's id, which scopes every stored row.
    :param organization: the organization's name.
    :param environment: ``"test"`` or ``"live"``: fully separate data.
    :param scopes: what the key may do (``"read"``, ``"write"``).
    :param key_id: the key the caller presented, or the key that minted its client
        token (``None`` for trusted host code).
    :param client: set when the caller holds a client token: it may use only the
        operations end users may (``require(..., end_users=True)``), as its user.
    """

    organization_id: str
    organization: str
    environment: Environment
    scopes: frozenset[Scope]
    key_id: str | None = None
    client: ClientGrant | None = None

    def __repr__(self) -> str:
        scopes = ",".join(sorted(self.scopes))
        return f"<Workspace {self.organization}/{self.environment} [{scopes}]>"

    def require(self, scope: Scope, *, end_users: bool = False) -> None:
        """Raise 403 unless this workspace's key has ``scope``, and, for a client token,
        unless the operation is one ``end_users`` may use."""
        if self.client is not None and not end_users:
            raise PermissionDenied(
                "A client token may only verify itself, list agents, search, chat and use its"
                " own conversations; use an API key (from your backend) for this operation.",
                code="insufficient_scope",
            )
        if scope not in self.scopes:
            held = ", ".join(sorted(self.scopes)) or "none"
            raise PermissionDenied(
                f"This operation needs the '{scope}' scope; the key has: {held}.",
                code="insufficient_scope",
            )

    @property
    def rate_limit_id(self) -> str:
        """Whose rate limit a request is charged to: its client token's, else its key's."""
        return self.client.token_id if self.client is not None else self.key_id or ""

    def sees_conversation_of(self, owner: str | None, agent_id: str) -> bool:
        """Whether a conversation started for ``owner`` (an end user's id, or ``None``)
        with ``agent_id`` is visible: every one to a key; to a client token only its
        user's own, with an agent the token may use."""
        client = self.client
        return client is None or (owner == client.user.id and client.allows_agent(agent_id))

    def reader(self, user: EndUser | None) -> EndUser | None:
        """The end user a request acts for: ``user``, or, for a client token, the token's
        user (a ``user`` given with a token must be that user, with no group the token
        lacks: 403 ``user_not_allowed`` otherwise)."""
        if self.client is None:
            return user
        own = self.client.user
        if user is None:
            return own
        if user.id != own.id or not set(user.groups) <= set(own.groups):
            raise PermissionDenied(
                "A client token acts only for the user it was minted for, with that user's groups.",
                code="user_not_allowed",
                param="user",
            )
        return user

    def verify(self) -> VerifyResponse:
        """Who is calling: organization, environment, scopes and the key's id (any valid
        key), and for a client token its own id (never its backend key's), its user and
        its expiry."""
        client = self.client
        return VerifyResponse(
            organization=self.organization,
            scope=sorted(self.scopes),
            environment=self.environment,
            key_id=self.key_id if client is None else client.token_id,
            user=None if client is None else client.user,
            expires_at=None if client is None else client.expires_at,
        )
