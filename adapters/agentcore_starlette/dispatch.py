"""Dispatch: a route of the table as a Starlette endpoint — the caller's key and rate
limit, the query and the body read within the limits, the request's deadline, the
Idempotency-Key, and the handler run where ``scheduling`` says (failures leave as
problems through ``ApiMiddleware``)."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from agentcore import AgentCore, Cancellation, ChatStream, WorkspaceServices
from agentcore.errors import NotFound, ValidationFailed
from agentcore_starlette.batching import Batcher
from agentcore_starlette.bodies import media_type, parse_json, read_limited, require_json, validate
from agentcore_starlette.credentials import identify, refuse_secrets_in_query
from agentcore_starlette.idempotency import (
    OutcomePending,
    canonical_body,
    check_key,
    fingerprint,
    run_once,
)
from agentcore_starlette.problems import RESPONDER, openai_error_response
from agentcore_starlette.routing import ApiRoute, Call
from agentcore_starlette.scheduling import Scheduler
from agentcore_starlette.settings import HttpSettings
from agentcore_starlette.streaming import Streamed, event_stream
from agentcore_starlette.uploads import read_upload

HANDLER_THREADS = 40
"""Threads running blocking handlers (as many as anyio's default thread limiter)."""
NO_QUERY = QueryParams()
"""The query parameters of a request without a query string (immutable, so shared)."""

Endpoint = Callable[[Request], Any]
"""What runs one operation: a request in, its response out (a coroutine function)."""


def handler_pool(core: AgentCore) -> Executor:
    """The threads blocking handlers run on (``HANDLER_THREADS``, named ``agentcore-http``).

    A plain executor rather than starlette's ``run_in_threadpool``: its hop (submit,
    then one ``call_soon_threadsafe`` back) costs about half of anyio's worker-thread
    round trip, and under uvloop anyio's hop often stalls on the GIL
    (benchmarks/http_overhead.py). Threads start lazily, and the core's runtime ends
    them when the core stops; every app of the core shares them.
    """
    return core.runtime.executor("agentcore-http", HANDLER_THREADS)


def refuse_unknown_query(route: ApiRoute, request: Request) -> None:
    """422 for a query parameter the route does not define (as for unknown body fields),
    or for a value holding a NUL character."""
    known = {param.name for param in route.query}
    for name, value in request.query_params.multi_items():
        if "\x00" in value:  # no store can keep one, and no id holds one
            raise ValidationFailed(
                f"Query parameter {name!r} must not contain NUL characters.", param=name
            )
        if name not in known:
            allowed = ", ".join(sorted(known)) or "none"
            raise ValidationFailed(
                f"Unknown query parameter {name!r} (allowed: {allowed}).",
                code="unknown_parameter",
                param=name,
            )


def _json(route: ApiRoute, result: Any, headers: dict[str, str] | None = None) -> Response:
    # the serializer's own bytes (model_dump_json() decodes them to a str, which the
    # response would encode back): the same JSON, one copy fewer per answer
    return Response(
        result.__pydantic_serializer__.to_json(result),
        status_code=route.status_for(result),
        media_type="application/json",
        headers=headers,
    )


def _for_caller(key: str, workspace: WorkspaceServices) -> str:
    """An Idempotency-Key in its caller's namespace: a client token's keys are its
    user's own, so two users sending the same key never see each other's answer."""
    client = workspace.client
    return key if client is None else f"{key} (client user {client.user.id})"


class Dispatcher:
    """Makes the endpoint of each route, bound to one core and one app's settings.

    :param core: whose keys, rate limits and idempotency keys the requests use.
    :param http: the app's HTTP settings (body limits, the request deadline).
    :param pool: the threads blocking handlers run on (``handler_pool``).
    :param scheduler: where each blocking handler runs (inline or on ``pool``).
    """

    def __init__(
        self, core: AgentCore, http: HttpSettings, pool: Executor, scheduler: Scheduler
    ) -> None:
        self.core = core
        self.http = http
        self.pool = pool
        self.scheduler = scheduler
        self.batcher = Batcher(scheduler)

    def endpoint(self, route: ApiRoute) -> Endpoint:
        """The endpoint running ``route``."""

        responder = openai_error_response if route.error_format == "openai" else None
        scheduler, batcher = self.scheduler, self.batcher

        async def run(request: Request) -> Response:
            if responder is not None:  # ApiMiddleware answers failures in this format
                request.scope["state"][RESPONDER] = responder
            if request.scope["query_string"]:  # most requests have none: skip parsing it
                refuse_secrets_in_query(request)
                refuse_unknown_query(route, request)
            if any("\x00" in value for value in request.path_params.values()):
                raise NotFound("No object has an id with a NUL character.")  # nor can one
            workspace, limits = identify(self.core, request, route.scope, end_users=route.end_users)
            query = request.query_params if request.scope["query_string"] else NO_QUERY
            # the request's deadline rides on its cancellation: work that waits (an upload
            # waiting for its worker) stops in time to answer before the adapter's 504
            deadline = Cancellation(timeout=self.http.request_deadline)
            call = Call(
                workspace, request.path_params, query, request.headers, cancellation=deadline
            )
            await self._read_body(route, request, call)

            async def handle() -> Response:
                if not route.blocking:
                    return _json(route, route.handler(call), limits)
                if scheduler.quick(route, call):  # headers as for the thread: see below
                    batch = batcher.joined(route, call)
                    if batch is not None:
                        return _json(route, await batcher.run(route, batch, call), limits)
                    return _json(route, scheduler.run_timed(route, call), limits)
                return await self._run_blocking(route, call, request, limits)

            key = request.headers.get("idempotency-key")
            # a stream is not stored for replay: the key does not apply (as at OpenAI, Stripe)
            if (
                route.method == "POST"
                and key is not None
                and route.idempotency
                and not route.streams(call.body)
            ):
                print_ = fingerprint(route.method, request.url.path, canonical_body(call))
                response = await run_once(
                    self.core.idempotency,
                    workspace,
                    _for_caller(check_key(key), workspace),
                    print_,
                    handle,
                    wait=self.http.request_deadline,
                    request_id=request.scope["state"].get("request_id"),
                )
            else:
                response = await handle()
            if "ratelimit" not in response.headers:  # a replay, a stream: add them now
                response.headers.update(limits)
            return response

        run.__name__ = route.operation_id
        return run

    async def _run_blocking(
        self, route: ApiRoute, call: Call, request: Request, limits: dict[str, str]
    ) -> Response:
        """Run the handler on a worker thread within the request deadline.

        A client that disconnects, a deadline that passes, or the server cancelling the
        request (shutting down) fires ``call.cancellation``: cancellable work
        (ingestion) stops before it commits.
        Past the deadline the answer is a 504 whose ``OutcomePending.outcome`` is the
        work still settling: it may yet commit (``run_once`` records what it ends as).
        """

        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()  # as run_in_threadpool: the handler sees it

        async def work() -> Response:
            result = await loop.run_in_executor(
                self.pool, context.run, self.scheduler.run_timed, route, call
            )
            if isinstance(result, ChatStream):
                result = Streamed(result)
            if isinstance(result, Streamed):
                request_id = request.scope["state"].get("request_id")
                return event_stream(result, request_id, heartbeat=self.http.stream_heartbeat)
            return _json(route, result, limits)

        task = asyncio.ensure_future(work())
        watcher = asyncio.ensure_future(_cancel_on_disconnect(request, call))
        deadline = self.http.request_deadline
        try:
            return await asyncio.wait_for(asyncio.shield(task), deadline)
        except TimeoutError:
            call.cancellation.cancel("deadline")
            task.add_done_callback(_retrieve)  # nobody else may await it
            raise OutcomePending(
                f"The request took longer than {deadline:g} s and was stopped. Retry with"
                " the same Idempotency-Key to get its outcome if it finished anyway.",
                outcome=task,
            ) from None
        except asyncio.CancelledError:  # the server stops waiting: so does the work
            call.cancellation.cancel("shutdown")
            task.add_done_callback(_retrieve)
            raise
        finally:
            watcher.cancel()

    async def _read_body(self, route: ApiRoute, request: Request, call: Call) -> None:
        """Parse the body into ``call`` (``call.body`` or ``call.upload``)."""
        if route.body == "none":
            return
        http = self.http
        if route.body == "json_or_upload" and media_type(request) == "multipart/form-data":
            call.upload = await read_upload(
                request,
                limit=self.core.settings.max_upload_bytes,
                timeout=http.body_timeout,
                deadline=http.body_deadline,
            )
            return
        require_json(request)
        raw = await read_limited(
            request, http.max_body_bytes, timeout=http.body_timeout, deadline=http.body_deadline
        )
        data = parse_json(raw, max_depth=http.max_json_depth)
        assert route.request is not None
        call.body = validate(route.request, data)


async def _cancel_on_disconnect(request: Request, call: Call) -> None:
    """Fire the call's cancellation when the client goes away (the body is read by now)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            call.cancellation.cancel("client disconnected")
            return


def _retrieve(task: asyncio.Future[Response]) -> None:
    # mark a late outcome's exception as seen, so asyncio does not log it as lost
    if not task.cancelled():
        task.exception()


class PathEndpoint:
    """The ASGI endpoint of one path of the API: the request's method picks the operation
    (``HEAD`` is answered by ``GET``'s).

    One Starlette ``Route`` per path (not per operation), so a 405 lists every method
    the path allows in ``Allow``. An ASGI object rather than a function: Starlette's
    ``Route`` calls it as it is, where a function endpoint would get two more layers
    (``request_response`` and its exception wrapper) around every request.
    """

    def __init__(self, handlers: dict[str, Endpoint]) -> None:
        self.handlers = dict(handlers)
        if "GET" in handlers:
            self.handlers.setdefault("HEAD", handlers["GET"])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # the route let only the path's methods through: others are its 405
        response: Response = await self.handlers[scope["method"]](Request(scope, receive, send))
        await response(scope, receive, send)
