"""Error responses: every failure of the API leaves through here, and this is the one
place where an error's facts (``retry_after``, the allowed methods, ...) become HTTP
headers.

The API answers failures as RFC 9457 problem documents; the OpenAI-compatible routes
answer them in OpenAI's error envelope (``openai_error_response``), so OpenAI's SDKs
raise their own exceptions, and ``/v1/mcp`` as JSON-RPC errors (``mcp_error_response``). A route picks its format for the request by putting its
responder in ``scope["state"][RESPONDER]``, which ``ApiMiddleware`` reads.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from agentcore.adapters import get_logger, new_id
from agentcore.errors import (
    PROBLEM_TYPE,
    AgentCoreError,
    AuthenticationError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    RateLimited,
    ServiceUnavailable,
)
from agentcore_starlette.ratelimit import rate_limit_headers, retry_after_header

log = get_logger("agentcore.http")  # masks keys and secrets in every record

MEDIA_TYPE = "application/problem+json"
CHALLENGE = 'Bearer realm="agentcore"'
"""The ``WWW-Authenticate`` challenge of every 401 (RFC 9110 asks one of each)."""
CLOSES_CONNECTION = frozenset({"body_too_large", "body_timeout"})
"""Codes of problems answered before the request's body was read to its end: the
connection is closed (``Connection: close``) rather than the unread rest drained."""


def problem_body(error: AgentCoreError, request_id: str | None) -> dict[str, Any]:
    """The problem document for ``error``: type, title, status, detail, code, param, request_id."""
    return problem_document(error.as_dict(), request_id)


def problem_document(fields: dict[str, Any], request_id: str | None) -> dict[str, Any]:
    """The problem document for an error's fields (``AgentCoreError.as_dict``)."""
    body: dict[str, Any] = {"type": PROBLEM_TYPE + str(fields.get("code"))}
    for name in ("title", "status", "detail", "code", "param"):
        body[name] = fields.get(name)
    body["request_id"] = request_id
    body.update((name, value) for name, value in fields.items() if name not in body)
    return body


def problem_bytes(error: AgentCoreError, request_id: str | None) -> bytes:
    """The problem document for ``error`` as compact JSON bytes."""
    return json.dumps(problem_body(error, request_id), separators=(",", ":")).encode()


def problem_headers(error: AgentCoreError) -> dict[str, str]:
    """The headers ``error``'s facts call for: ``WWW-Authenticate`` on a 401, ``Allow``
    on a 405, ``RateLimit-*`` and ``Retry-After`` on a 429, ``Retry-After`` on a 503
    that knows when to retry, ``Connection: close`` when the body was left unread."""
    headers: dict[str, str] = {}
    if isinstance(error, AuthenticationError):
        headers["WWW-Authenticate"] = CHALLENGE
    elif isinstance(error, MethodNotAllowed) and error.allowed:
        headers["Allow"] = ", ".join(error.allowed)
    elif isinstance(error, RateLimited):
        if error.decision is not None:
            headers.update(rate_limit_headers(error.decision))
        elif error.retry_after is not None:
            headers["Retry-After"] = retry_after_header(error.retry_after)
    elif isinstance(error, ServiceUnavailable) and error.retry_after is not None:
        headers["Retry-After"] = retry_after_header(error.retry_after)
    if error.code in CLOSES_CONNECTION:
        headers["Connection"] = "close"
    return headers


def problem_response(error: AgentCoreError, request_id: str | None) -> Response:
    """``error`` rendered as ``application/problem+json`` with its status and headers."""
    headers = problem_headers(error)
    if request_id:
        headers["Request-Id"] = request_id
    return Response(
        problem_bytes(error, request_id),
        status_code=error.status,
        media_type=MEDIA_TYPE,
        headers=headers,
    )


def problem_message(error: AgentCoreError, request_id: str | None = None) -> bytes:
    """``error`` as a whole HTTP/1.1 answer, with ``Request-Id`` (a fresh one unless
    given) and ``Connection: close``: what ``agentcore serve``'s protocol writes itself,
    before any app sees a request."""
    request_id = request_id or new_id("req")
    body = problem_bytes(error, request_id)
    headers = {
        **problem_headers(error),
        "Content-Type": MEDIA_TYPE,
        "Content-Length": str(len(body)),
        "Request-Id": request_id,
        "Connection": "close",
    }
    head = f"HTTP/1.1 {error.status} {error.title}\r\n" + "".join(
        f"{name}: {value}\r\n" for name, value in headers.items()
    )
    return head.encode("latin-1") + b"\r\n" + body


ErrorResponder = Callable[[AgentCoreError, "str | None"], Response]
"""Renders an error (and the request's id) as the HTTP answer."""

RESPONDER = "agentcore.error_responder"
"""Key in ``scope["state"]`` of the ``ErrorResponder`` of the request's route (unset:
``problem_response``)."""


def responder_of(scope: Any) -> ErrorResponder:
    """How the request's failures are answered: its route's responder, else problems."""
    state = scope.get("state")
    responder: ErrorResponder = (state or {}).get(RESPONDER, problem_response)
    return responder


OPENAI_ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    429: "rate_limit_error",
}
"""OpenAI's error ``type`` by status; other 4xx are ``invalid_request_error``, 5xx
``server_error``."""


def openai_error_body(error: AgentCoreError) -> dict[str, Any]:
    """``{"error": {"message", "type", "code", "param"}}``, OpenAI's error envelope."""
    if error.status >= 500:
        kind = "server_error"
    else:
        kind = OPENAI_ERROR_TYPES.get(error.status, "invalid_request_error")
    return {
        "error": {"message": error.detail, "type": kind, "code": error.code, "param": error.param}
    }


def openai_status(error: AgentCoreError) -> int:
    """The status OpenAI gives such an error: 400 for a field's invalid value (its SDK
    raises ``BadRequestError``), which the API's problems answer 422."""
    return 400 if error.status == 422 else error.status


def openai_error_response(error: AgentCoreError, request_id: str | None) -> Response:
    """``error`` in OpenAI's error envelope, with the headers its facts call for.

    A 409 (an archived agent, a live key and a draft) says ``x-should-retry: false``:
    OpenAI's SDKs retry a 409 otherwise, and asking again cannot change the answer.
    """
    headers = problem_headers(error)
    if request_id:
        headers["Request-Id"] = request_id
    if error.status == 409:
        headers["x-should-retry"] = "false"
    return Response(
        json.dumps(openai_error_body(error), separators=(",", ":")).encode(),
        status_code=openai_status(error),
        media_type="application/json",
        headers=headers,
    )


JSONRPC_INVALID_REQUEST = -32600
JSONRPC_INTERNAL_ERROR = -32603


def mcp_error_response(error: AgentCoreError, request_id: str | None) -> Response:
    """``error`` as a JSON-RPC error, for ``/v1/mcp``: the HTTP status and headers of the
    problem (a 401 still says ``WWW-Authenticate``), ``message`` its detail and ``data``
    the problem document. MCP clients surface such a body as the error of the request
    they sent (a problem document they would only report as a failed request)."""
    headers = problem_headers(error)
    if request_id:
        headers["Request-Id"] = request_id
    code = JSONRPC_INTERNAL_ERROR if error.status >= 500 else JSONRPC_INVALID_REQUEST
    body = {
        "jsonrpc": "2.0",
        "id": None,  # refused before the message was read
        "error": {"code": code, "message": error.detail, "data": problem_body(error, request_id)},
    }
    return Response(
        json.dumps(body, separators=(",", ":")).encode(),
        status_code=error.status,
        media_type="application/json",
        headers=headers,
    )


def routing_error(exc: HTTPException, method: str, path: str) -> AgentCoreError:
    """The error of a routing failure: 404 (no such route), 405 (with the allowed
    methods, from the router's ``Allow``), or a 400 for anything else Starlette refuses."""
    if exc.status_code == 405:
        allowed = (exc.headers or {}).get("Allow", "")
        return MethodNotAllowed(
            f"{method} is not allowed on {path}.",
            allowed=[name.strip() for name in allowed.split(",") if name.strip()],
        )
    if exc.status_code == 404:
        return NotFound(f"No route for {path}.", code="route_not_found")
    return InvalidRequest(str(exc.detail))


async def http_exception_problem(request: Request, exc: Exception) -> Response:
    """Starlette's exception handler for ``HTTPException`` (the router's 404 and 405):
    the same problem document as every other failure."""
    assert isinstance(exc, HTTPException)
    error = routing_error(exc, request.method, request.url.path)
    return problem_response(error, request_id_of(request.scope))


def request_id_of(scope: Any) -> str | None:
    """The id ``ApiMiddleware`` gave the request (``None`` outside it)."""
    state = scope.get("state")
    return None if state is None else state.get("request_id")
