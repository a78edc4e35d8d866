"""Who is calling: the key of ``Authorization: Bearer``, parsed strictly, checked by the
core and charged to its rate limit; and no secret in the URL (URLs are logged)."""

from __future__ import annotations

import re
from typing import Literal

from starlette.requests import Request

from agentcore import AgentCore, WorkspaceServices
from agentcore.adapters import QUERY_SECRET_NAMES, looks_secret
from agentcore.errors import AuthenticationError, InvalidRequest
from agentcore_starlette.ratelimit import rate_limit_headers

_BEARER = re.compile(r"(?i)bearer ([^\s]+)")


def bearer_token(request: Request) -> str | None:
    """The key from ``Authorization: Bearer <key>``, parsed strictly; 401 otherwise.

    The scheme is case-insensitive; exactly one space separates it from the key, and
    the key has no whitespace (``Bearer  key``, ``Bearer``, ``Basic …`` are refused).
    Two ``Authorization`` headers are a 400 ``duplicate_authorization``: which one a
    proxy or a server would pick differs, so neither is used.
    """
    found = [value for name, value in request.scope["headers"] if name == b"authorization"]
    if not found:
        return None
    if len(found) > 1:
        raise InvalidRequest(
            "The request has more than one Authorization header: send exactly one,"
            " 'Authorization: Bearer <key>'.",
            code="duplicate_authorization",
            param="Authorization",
        )
    match = _BEARER.fullmatch(found[0].decode("latin-1"))
    if match is None:
        raise AuthenticationError(
            "Malformed Authorization header: send exactly 'Authorization: Bearer <key>'"
            " (the scheme, one space, the key).",
            code="malformed_authorization",
        )
    return match.group(1)


def refuse_secrets_in_query(request: Request) -> None:
    """400 when the query string carries a key or secret: it would end up in access logs.

    Refused: a parameter named like a credential (``api_key``, ``key``, ``token``, …,
    see ``agentcore._logs.QUERY_SECRET_NAMES``) whatever its value, and any value
    shaped like ``ak_test_…``, ``ak_live_…`` or ``whsec_…``. The value is never echoed.
    """
    for name, value in request.query_params.multi_items():
        if name.lower() in QUERY_SECRET_NAMES or looks_secret(value) or looks_secret(name):
            raise InvalidRequest(
                "API keys and secrets must not be sent in the URL (URLs are logged):"
                " send the key as 'Authorization: Bearer <key>' and rotate a key that was"
                " sent this way.",
                code="secret_in_query",
                param=None if looks_secret(name) else name,
            )


def identify(
    core: AgentCore,
    request: Request,
    scope: Literal["any", "read", "write"],
    *,
    end_users: bool = False,
) -> tuple[WorkspaceServices, dict[str, str]]:
    """The caller's workspace, from its key or client token (401 without a valid one),
    checked for ``scope`` and, for a client token, that the route is one ``end_users``
    may call (403; before the body is read, which it does not depend on), and the
    ``RateLimit`` headers of the request it is charged for (429 past the limit)."""
    # on the loop: a read of one indexed row (WAL readers never wait for the
    # writer); the occasional last_used_at write goes to a background thread
    workspace = core.authenticate(bearer_token(request), defer_touch=True)
    if scope != "any":
        workspace.require(scope, end_users=end_users)
    elif workspace.client is not None and not end_users:
        workspace.require("read")  # refuses a client token
    limits = rate_limit_headers(core.rate_limiter.enforce_for(workspace))
    return workspace, limits
