"""The core's rate-limit facts as IETF RateLimit headers (draft-ietf-httpapi-ratelimit-headers)."""

from __future__ import annotations

import math

from agentcore.limits import Decision

POLICY = "per-key"


def rate_limit_headers(decision: Decision) -> dict[str, str]:
    """``RateLimit-Policy`` and ``RateLimit``, plus ``Retry-After`` for a refused request."""
    headers = {
        "RateLimit-Policy": f'"{POLICY}";q={int(decision.limit)};w=1',
        "RateLimit": f'"{POLICY}";r={decision.remaining};t={math.ceil(decision.reset)}',
    }
    if not decision.allowed:
        headers["Retry-After"] = str(max(1, math.ceil(decision.retry_after)))
    return headers
