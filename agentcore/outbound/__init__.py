"""Every call the server makes to an address a tenant chose: webhook deliveries and
remote MCP tool servers.

One SSRF guard decides which addresses they may reach (:class:`AddressPolicy`, with
``Settings.outbound_allowed_networks``), checked when the URL is given
(:func:`validate_url`) and again on every connection (:class:`GuardedTransport`, and
``AsyncGuardedTransport`` in ``agentcore.outbound.async_guard`` for the MCP client's
httpx2). Secrets the server must send back out (webhook signing secrets, MCP server
headers) are sealed at rest by one :class:`SecretBox`.
"""

from __future__ import annotations

from agentcore.outbound._sealing import (
    MCP_HEADERS,
    SEALED_PREFIX,
    SealedSecretError,
    SecretBox,
    is_sealed,
    parse_keys,
)
from agentcore.outbound._ssrf import (
    DEFAULT_LIMITS,
    MAX_URL_LENGTH,
    AddressPolicy,
    BlockedAddress,
    GuardedTransport,
    Resolver,
    deadline,
    default_resolver,
    validate_url,
)

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_URL_LENGTH",
    "MCP_HEADERS",
    "SEALED_PREFIX",
    "AddressPolicy",
    "BlockedAddress",
    "GuardedTransport",
    "Resolver",
    "SealedSecretError",
    "SecretBox",
    "default_resolver",
    "deadline",
    "is_sealed",
    "parse_keys",
    "validate_url",
]
