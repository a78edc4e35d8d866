"""The core's rate-limit facts as IETF RateLimit headers (draft-ietf-httpapi-ratelimit-headers)."""

from __future__ import annotations

import math

from agentcore.errors import Decision

POLICY = "per-key"


def rate_limit_headers(decision: Decision) -> dict[str, str]:
    """``RateLimit-Policy`` and ``RateLimit``, plus ``Retry-After`` for a refused request."""
    # a rate below one a second is one request per window of 1/rate seconds
    rate = decision.limit
    quota, window = (int(rate), 1) if rate >= 1 else (1, math.ceil(1 / rate))
    headers = {
        "RateLimit-Policy": f'"{POLICY}";q={quota};w={window}',
        "RateLimit": f'"{POLICY}";r={decision.remaining};t={math.ceil(decision.reset)}',
    }
    if not decision.allowed:
        headers["Retry-After"] = retry_after_header(decision.retry_after)
    return headers


def retry_after_header(seconds: float) -> str:
    """``Retry-After`` for a wait of ``seconds``: whole seconds, rounded up, at least one."""
    return str(max(1, math.ceil(seconds)))
