"""RFC 9457 problem responses: every failure of the API leaves through here."""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response

from agentcore.errors import PROBLEM_TYPE, AgentCoreError, RateLimited
from agentcore.redact import get_logger
from agentcore_starlette.ratelimit import rate_limit_headers

log = get_logger("agentcore.http")  # masks keys and secrets in every record

MEDIA_TYPE = "application/problem+json"


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


def problem_response(error: AgentCoreError, request_id: str | None) -> Response:
    """``error`` rendered as ``application/problem+json`` with its status and headers."""
    headers = dict(error.headers)
    if isinstance(error, RateLimited) and error.decision is not None:
        headers.update(rate_limit_headers(error.decision))
    if request_id:
        headers["Request-Id"] = request_id
    return Response(
        json.dumps(problem_body(error, request_id), separators=(",", ":")),
        status_code=error.status,
        media_type=MEDIA_TYPE,
        headers=headers,
    )
