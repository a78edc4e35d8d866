"""``GET /v1/health``: the node's health report for load balancers (no key: it holds no
tenant data)."""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor

from starlette.requests import Request
from starlette.responses import Response

from agentcore import AgentCore
from agentcore.errors import ServiceUnavailable


class HealthCheck:
    """The health of one core, checked on ``pool`` (it queries the store).

    ``serve`` is the endpoint: 200 with the report, or a 503 problem (code
    ``unhealthy``) naming what failed, with the report's members.
    """

    def __init__(self, core: AgentCore, pool: Executor) -> None:
        self.core = core
        self.pool = pool

    async def serve(self, request: Request) -> Response:
        """The endpoint: the report of ``core.health()``."""
        report = await asyncio.get_running_loop().run_in_executor(self.pool, self.core.health)
        if report.status != "ok":
            raise ServiceUnavailable(
                " ".join(report.problems),
                code="unhealthy",
                extra=report.model_dump(mode="json", exclude={"status"}),
            )
        return Response(
            report.model_dump_json(),
            media_type="application/json",
            headers={"Cache-Control": "no-store"},
        )
