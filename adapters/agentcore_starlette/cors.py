"""Browsers: ``AGENTCORE_CORS_ORIGINS`` opens the routes a client token may use (and
only those) to pages of the origins named, preflight included.

Starlette's ``CORSMiddleware`` does the CORS work; this module decides where it
applies: a request to any other path (documents, webhooks, keys' own routes) passes
through untouched, so a browser's preflight there gets no CORS headers and the browser
refuses the call. Tokens travel in ``Authorization``, never in cookies, so credentials
mode stays off.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.middleware.cors import CORSMiddleware
from starlette.routing import compile_path
from starlette.types import ASGIApp, Receive, Scope, Send

ALLOWED_HEADERS = (
    "Authorization",
    "Content-Type",
    "Idempotency-Key",
    "Last-Event-ID",
    "Mcp-Session-Id",
    "Mcp-Protocol-Version",
)
"""Request headers a page may send."""
EXPOSED_HEADERS = (
    "Request-Id",
    "RateLimit",
    "RateLimit-Policy",
    "Retry-After",
    "Idempotent-Replayed",
    "Mcp-Session-Id",
)
"""Answer headers a page may read."""
PREFLIGHT_MAX_AGE = 600
"""Seconds a browser may keep a preflight's answer."""


class EndUserCors:
    """ASGI middleware: ``CORSMiddleware`` for ``origins`` on ``paths`` (path templates
    such as ``/v1/conversations/{conversation_id}``), nothing elsewhere.

    :param app: the app it wraps.
    :param origins: the allowed origins (``https://app.example.com``; ``*`` for any).
    :param paths: the paths a client token may use, with the app's prefix.
    """

    def __init__(self, app: ASGIApp, *, origins: Iterable[str], paths: Iterable[str]) -> None:
        self.app = app
        self.cors = CORSMiddleware(
            app,
            allow_origins=list(origins),
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=list(ALLOWED_HEADERS),
            expose_headers=list(EXPOSED_HEADERS),
            max_age=PREFLIGHT_MAX_AGE,
        )
        self.paths = [compile_path(path)[0] for path in sorted(set(paths))]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.opens(_route_path(scope)):
            await self.cors(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    def opens(self, path: str) -> bool:
        """Whether ``path`` (within the app) is one of the routes a browser may call."""
        return any(pattern.match(path) for pattern in self.paths)


def _route_path(scope: Scope) -> str:
    """The request's path within this app: a host that mounts it at ``/api`` hands it
    ``/api/v1/...`` with ``root_path`` ``/api``."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path
