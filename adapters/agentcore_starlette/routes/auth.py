"""Routes: GET /v1/auth/verify, and the client tokens a backend mints for its end users
(POST /v1/client_tokens, POST /v1/client_tokens/revoke)."""

from __future__ import annotations

from typing import cast

from agentcore.schema import (
    ClientToken,
    ClientTokenCreate,
    ClientTokenRevocation,
    ClientTokenRevoke,
    VerifyResponse,
)
from agentcore_starlette.routing import ApiRoute, Call


def verify_key(call: Call) -> VerifyResponse:
    """Who the key (or client token) belongs to and what it may do."""
    return call.workspace.verify()


def create_client_token(call: Call) -> ClientToken:
    """A short-lived token for one end user, for their browser or app; shown only here."""
    return call.workspace.client_tokens.create(cast(ClientTokenCreate, call.body))


def revoke_client_tokens(call: Call) -> ClientTokenRevocation:
    """End every live client token of one end user."""
    return call.workspace.client_tokens.revoke(cast(ClientTokenRevoke, call.body).user)


ROUTES = [
    ApiRoute(
        method="GET",
        path="/auth/verify",
        handler=verify_key,
        response=VerifyResponse,
        summary="Verify the API key",
        scope="any",
        tag="auth",
        end_users=True,
        blocking=False,
    ),
    ApiRoute(
        method="POST",
        path="/client_tokens",
        handler=create_client_token,
        response=ClientToken,
        summary="Mint a client token for an end user",
        scope="write",
        tag="auth",
        body="json",
        request=ClientTokenCreate,
        status_code=201,
        # a kept answer would keep the token in the clear: a retry mints another instead
        idempotency=False,
    ),
    ApiRoute(
        method="POST",
        path="/client_tokens/revoke",
        handler=revoke_client_tokens,
        response=ClientTokenRevocation,
        summary="Revoke an end user's client tokens",
        scope="write",
        tag="auth",
        body="json",
        request=ClientTokenRevoke,
    ),
]
