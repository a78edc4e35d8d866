"""create_app: the /v1 API of a core as a Starlette app, and the lifespan that runs it.

The app is assembled here from its rooms: ``dispatch`` makes an endpoint of each route
of the table (``routes``), ``scheduling`` and ``batching`` decide where its handlers run,
``mcp`` serves ``/v1/mcp``, ``openapi`` the document, ``health`` and ``metrics`` the
operator's endpoints, and ``middleware`` gives every request its id, head limits and
problem documents.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.routing import Route

from agentcore import AgentCore
from agentcore_starlette.cors import EndUserCors
from agentcore_starlette.dispatch import Dispatcher, Endpoint, PathEndpoint, handler_pool
from agentcore_starlette.health import HealthCheck
from agentcore_starlette.mcp import openapi as mcp_openapi
from agentcore_starlette.mcp.endpoint import METHODS as MCP_METHODS
from agentcore_starlette.mcp.endpoint import PATH as MCP_PATH
from agentcore_starlette.mcp.endpoint import McpEndpoint, endpoints_running
from agentcore_starlette.metrics import instrumentation
from agentcore_starlette.middleware import ApiMiddleware
from agentcore_starlette.openapi import OpenApiDocument
from agentcore_starlette.problems import http_exception_problem
from agentcore_starlette.routes import ROUTES
from agentcore_starlette.routing import ApiRoute
from agentcore_starlette.scheduling import Scheduler
from agentcore_starlette.settings import HttpSettings

PREFIX = "/v1"


def lifespan_for(
    core: AgentCore, *, on_stop: Callable[[], None] | None = None
) -> Callable[[Starlette], contextlib.AbstractAsyncContextManager[None]]:
    """A Starlette lifespan that starts the core's workers and stops them on shutdown
    (then calls ``on_stop``, if given), and runs the MCP endpoints of the apps made for
    ``core`` (``mcp.endpoint``).

    Mounted sub-apps do not get lifespan events: a host app passes this (or enters it in
    its own lifespan; calling ``core.start()``/``core.stop()`` instead leaves ``/v1/mcp``
    answering 503 ``mcp_not_started``).
    """

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            # inside the try: a start that raised part-way is stopped all the same
            await run_in_threadpool(core.start)
            async with endpoints_running(core):  # the MCP endpoints' task groups
                yield
        finally:
            await run_in_threadpool(core.stop)
            if on_stop is not None:
                on_stop()

    return lifespan


def create_app(
    core: AgentCore,
    *,
    routes: Sequence[ApiRoute] | None = None,
    metrics: bool | None = None,
    clock: Callable[[], float] = time.perf_counter,
    **settings: Any,
) -> Starlette:
    """The /v1 API of ``core`` as a Starlette app.

    :param routes: the route table (default: every built-in route).
    :param metrics: whether to serve ``GET /metrics`` (Prometheus); unset, the core's
        ``metrics`` setting decides, which leaves it off unless set (``agentcore
        serve`` passes ``True`` unless the setting is false).
    :param clock: what handlers' run times are read from (``scheduling.Scheduler``);
        a test passes one it moves itself.
    :param settings: overrides of the core's ``HttpSettings`` for this app, e.g.
        ``max_body_bytes=2_000_000`` (validated: a misspelt one is an error, and one of
        the core's own settings a ``TypeError``, since the core enforces it).

    Serve it alone (``agentcore serve``) or mount it: ``host.mount("/api",
    create_app(core))`` serves ``/api/v1/...``.

    Built from Starlette's public parts only: a ``Route`` per path, ``ApiMiddleware``
    through ``middleware=`` (request ids, head limits, problems for failures), and an
    exception handler that answers the router's 404 and 405 as problems. With the
    ``mcp_enabled`` setting (the default) it also serves the MCP endpoint ``/v1/mcp``.
    """
    http = HttpSettings.of(core.settings, **settings)
    table = list(routes if routes is not None else ROUTES)
    pool = handler_pool(core)
    dispatcher = Dispatcher(core, http, pool, Scheduler(http.inline_budget, clock=clock))
    mcp = McpEndpoint(core, http, pool) if http.mcp_enabled else None
    document = OpenApiDocument(
        table,
        core.settings,
        prefix=PREFIX,
        event_kinds=list(core.events.kinds),
        chat_models=list(core.chat_models),
        rerank=bool(core.rerankers),
        paths={} if mcp is None else {MCP_PATH: mcp_openapi.path_item(http)},
    )
    starlette_routes = _api_routes(table, dispatcher)
    if mcp is not None:
        starlette_routes.append(Route(PREFIX + MCP_PATH, mcp, methods=MCP_METHODS))
    starlette_routes.append(Route(PREFIX + "/openapi.json", document.serve, methods=["GET"]))
    health = HealthCheck(core, pool)
    starlette_routes.append(Route(PREFIX + "/health", health.serve, methods=["GET"]))
    middleware = [
        Middleware(
            ApiMiddleware, max_url_bytes=http.max_url_bytes, max_header_bytes=http.max_header_bytes
        )
    ]
    if http.cors_origins:  # outside ApiMiddleware: its problems get the headers too
        paths = [PREFIX + route.path for route in table if route.end_users]
        if mcp is not None:
            paths.append(PREFIX + MCP_PATH)
        middleware.insert(0, Middleware(EndUserCors, origins=http.cors_origins, paths=paths))
    on_stop = None
    if core.settings.metrics if metrics is None else metrics:
        measured = instrumentation(core, pool)
        starlette_routes.append(measured.route)
        middleware.insert(0, measured.middleware)  # outermost: it times every answer
        on_stop = measured.on_stop
    app = Starlette(
        routes=starlette_routes,
        middleware=middleware,
        exception_handlers={HTTPException: http_exception_problem},
        lifespan=lifespan_for(core, on_stop=on_stop),
    )
    app.state.core = core
    app.state.http = http
    app.state.mcp = mcp
    return app


def _api_routes(table: Sequence[ApiRoute], dispatcher: Dispatcher) -> list[Route]:
    """One Starlette ``Route`` per path of ``table``, its operations by method
    (``PathEndpoint``)."""
    by_path: dict[str, dict[str, Endpoint]] = {}
    for route in table:
        by_path.setdefault(route.path, {})[route.method] = dispatcher.endpoint(route)
    # static paths first: the router tries its routes in turn, and the busiest
    # operations (search, chat, verify) have static paths (no two paths overlap but
    # for a static one and a parameterised one, whose methods differ: order is free)
    return [
        Route(PREFIX + path, PathEndpoint(handlers), methods=list(handlers))
        for path, handlers in sorted(by_path.items(), key=lambda item: "{" in item[0])
    ]
