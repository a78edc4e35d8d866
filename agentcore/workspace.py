"""Workspace: one (organization, environment) seen through one key and its scopes.

A plain value: it names the tenant and what the caller may do, and checks scopes. The
services that act in a workspace are built by the core (``agentcore.core``); what
``authenticate()`` and ``workspace()`` hand out is a ``WorkspaceServices``
(``agentcore._workspace_services``), this value with its services attached.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentcore.errors import PermissionDenied
from agentcore.schema import Environment, Scope, VerifyResponse


@dataclass(frozen=True, kw_only=True)
class Workspace:
    """What a caller may see and do: every operation checks its scope here.

    :param organization_id: the organization's id, which scopes every stored row.
    :param organization: the organization's name.
    :param environment: ``"test"`` or ``"live"``: fully separate data.
    :param scopes: what the key may do (``"read"``, ``"write"``).
    :param key_id: the key the caller presented (``None`` for trusted host code).
    """

    organization_id: str
    organization: str
    environment: Environment
    scopes: frozenset[Scope]
    key_id: str | None = None

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
