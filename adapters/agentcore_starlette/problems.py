"""RFC 9457 problem responses: every failure of the API leaves through here."""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.responses import Response

from agentcore.errors import PROBLEM_TYPE, AgentCoreError

log = logging.getLogger("agentcore.http")

MEDIA_TYPE = "application/problem+json"


def problem_body(error: AgentCoreError, request_id: str | None) -> dict[str, Any]:
    """The problem document for ``error``: type, title, status, detail, code, param, request_id."""
    body: dict[str, Any] = {
        "type": PROBLEM_TYPE + error.code,
        "title": error.title,
        "status": error.status,
        "detail": error.detail,
        "code": error.code,
        "param": error.param,
        "request_id": request_id,
    }
    body.update(error.extra)
    return body


def problem_response(error: AgentCoreError, request_id: str | None) -> Response:
    """``error`` rendered as ``application/problem+json`` with its status and headers."""
    headers = dict(error.headers)
    if request_id:
        headers["Request-Id"] = request_id
    return Response(
        json.dumps(problem_body(error, request_id), separators=(",", ":")),
        status_code=error.status,
        media_type=MEDIA_TYPE,
        headers=headers,
    )
