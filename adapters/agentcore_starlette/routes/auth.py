"""Route: GET /v1/auth/verify."""

from __future__ import annotations

from agentcore.schema import VerifyResponse
from agentcore_starlette.routing import ApiRoute, Call


def verify_key(call: Call) -> VerifyResponse:
    """Who the key belongs to and what it may do."""
    return call.workspace.verify()


ROUTES = [
    ApiRoute(
        method="GET",
        path="/auth/verify",
        handler=verify_key,
        response=VerifyResponse,
        summary="Verify the API key",
        scope="any",
        tag="auth",
        blocking=False,
    ),
]
