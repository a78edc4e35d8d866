"""create_app: the /v1 API as a Starlette app — its routes, auth, bodies and handlers."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Hashable, Sequence
from typing import Any, Literal

from prometheus_client import CollectorRegistry
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import QueryParams
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from agentcore import __version__
from agentcore.cancellation import Cancellation
from agentcore.chat import ChatStream
from agentcore.config import Settings, metrics_multiprocess_dir
from agentcore.core import AgentCore
from agentcore.errors import (
    AgentCoreError,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    ServiceUnavailable,
    ValidationFailed,
)
from agentcore.redact import get_logger
from agentcore.residency import Sweeper
from agentcore.services import WorkspaceServices
from agentcore.workspace import Workspace
from agentcore_starlette.bodies import (
    media_type,
    parse_json,
    read_limited,
    require_json,
    validate,
)
from agentcore_starlette.credentials import bearer_token, refuse_secrets_in_query
from agentcore_starlette.idempotency import OutcomePending, check_key, fingerprint, run_once
from agentcore_starlette.mcp_endpoint import METHODS as MCP_METHODS
from agentcore_starlette.mcp_endpoint import PATH as MCP_PATH
from agentcore_starlette.mcp_endpoint import McpEndpoint, endpoints_running
from agentcore_starlette.metrics import (
    RequestMetrics,
    forget_this_process,
    metrics_route,
    request_histogram,
    scraped,
)
from agentcore_starlette.middleware import ApiMiddleware
from agentcore_starlette.openapi import build_openapi
from agentcore_starlette.problems import RESPONDER, http_exception_problem, openai_error_response
from agentcore_starlette.ratelimit import rate_limit_headers
from agentcore_starlette.routes import ROUTES
from agentcore_starlette.routing import ApiRoute, Call, Upload
from agentcore_starlette.streaming import Streamed, event_stream

log = get_logger("agentcore.http")  # masks keys and secrets in every record

PREFIX = "/v1"
RECENT_RUNS = 5
"""Run times of a ``quick_when`` route (per workspace) whose median decides inline runs."""
ESTIMATES_SWEPT_PAST = 10_000
"""Workspaces' run-time estimates kept before the idle ones are dropped (see ``_note``)."""
ESTIMATE_IDLE_SECONDS = 600.0
"""An estimate not added to for this long is dropped at the next sweep: the workspace's
next run takes a thread, as its first did, and starts a new estimate."""
BatchKey = tuple[asyncio.AbstractEventLoop, str, Hashable]
"""A batch of calls (``Api._batched``): the loop it runs on, the route, its batch key."""
BATCH_MAX = 32
"""Most calls one batch answers (``Api._batched``): the loop runs a batch without a
break, so a bound keeps other requests' wait short (32 searches of a 2,000-chunk
workspace take about 8 ms together)."""
LONE_BATCHES = 8
"""Batches of one call in a row after which a route's calls stop waiting for a batch."""
BATCH_PROBE_EVERY = 16
"""While they do not wait, every this many-th call waits anyway, to notice company."""
HANDLER_THREADS = 40
"""Threads running blocking handlers (as many as anyio's default thread limiter)."""
MULTIPART_OVERHEAD = 64 * 1024
UPLOAD_FIELDS = ("file", "metadata", "external_id")
"""The multipart fields a document upload may carry (openapi.py declares the same)."""


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


NO_QUERY = QueryParams()
"""The query parameters of a request without a query string (immutable, so shared)."""


def _json(route: ApiRoute, result: Any, headers: dict[str, str] | None = None) -> Response:
    # the serializer's own bytes (model_dump_json() decodes them to a str, which the
    # response would encode back): the same JSON, one copy fewer per answer
    return Response(
        result.__pydantic_serializer__.to_json(result),
        status_code=route.status_for(result),
        media_type="application/json",
        headers=headers,
    )


class _Runs:
    """A route's recent run times in one workspace, their median, and when the last was
    noted (``Api._note``)."""

    __slots__ = ("median", "noted_at", "times")

    def __init__(self) -> None:
        self.times: list[float] = []  # a list: a deque of five is four times its size
        self.median = 0.0
        self.noted_at = 0.0

    def note(self, began: float, ended: float) -> None:
        """Add a run that began and ended at those times."""
        self.times.append(ended - began)
        if len(self.times) > RECENT_RUNS:
            del self.times[0]
        self.median = sorted(self.times)[len(self.times) // 2]
        self.noted_at = ended


class _Batching:
    """Whether a route's batchable calls wait a turn of the loop for others to join.

    Waiting costs a lone call a turn (about 0.02 ms of CPU), which is worth it only
    while calls arrive together. After ``LONE_BATCHES`` batches in a row of one call,
    calls run at once, but every ``BATCH_PROBE_EVERY``-th still waits, and the calls
    of its batch key reaching the loop in the same turn join it, so that calls arriving
    together again are noticed (a batch of several starts waiting anew).
    """

    __slots__ = ("lone", "skipped")

    def __init__(self) -> None:
        self.lone = 0  # batches of one call in a row
        self.skipped = 0  # calls run at once since the last that waited

    def wanted(self) -> bool:
        """Whether the next call waits for a batch."""
        if self.lone < LONE_BATCHES:
            return True
        self.skipped += 1
        if self.skipped < BATCH_PROBE_EVERY:
            return False
        self.skipped = 0
        return True

    def ran(self, calls: int) -> None:
        """A batch of ``calls`` calls ran."""
        self.lone = self.lone + 1 if calls == 1 else 0


class Api:
    """Turns the route table into Starlette endpoints bound to one core."""

    def __init__(self, core: AgentCore, settings: Settings) -> None:
        self.core = core
        self.settings = settings
        # blocking handlers run here rather than through starlette's run_in_threadpool:
        # a plain executor hop (submit, then one call_soon_threadsafe back) costs about
        # half of anyio's worker-thread round trip, and under uvloop anyio's hop often
        # stalls on the GIL (benchmarks/http_overhead.py); threads start lazily, and
        # the core's runtime ends them when the core stops
        self.pool = core.runtime.executor("agentcore-http", HANDLER_THREADS)
        # recent run times of each quick_when route per workspace: (route, org, env) ->
        # its runs and their median (what _quick reads); swept so that a node serving
        # many tenants keeps those of the workspaces used lately, not of all it has seen
        self.runs: dict[tuple[str, str, str], _Runs] = {}
        self.runs_lock = threading.Lock()
        self.sweep_runs = Sweeper(ESTIMATES_SWEPT_PAST)
        self.clock: Callable[[], float] = time.perf_counter  # what run times are read from
        self.batching: dict[str, _Batching] = {}  # by route
        # quick calls waiting for their batch's run (route.batch), by loop, route and batch
        # key; an entry lives for one turn of its loop (popped by the run it scheduled)
        self.batches: dict[BatchKey, list[tuple[Call, asyncio.Future[Any]]]] = {}

    def endpoint(self, route: ApiRoute) -> Callable[[Request], Any]:
        """The Starlette endpoint running ``route``."""

        responder = openai_error_response if route.error_format == "openai" else None

        async def run(request: Request) -> Response:
            if responder is not None:  # ApiMiddleware answers failures in this format
                request.scope["state"][RESPONDER] = responder
            if request.scope["query_string"]:  # most requests have none: skip parsing it
                refuse_secrets_in_query(request)
                refuse_unknown_query(route, request)
            if any("\x00" in value for value in request.path_params.values()):
                raise NotFound("No object has an id with a NUL character.")  # nor can one
            workspace, limits = self.identify(request, route.scope)
            query = request.query_params if request.scope["query_string"] else NO_QUERY
            # the request's deadline rides on its cancellation: work that waits (an upload
            # waiting for its worker) stops in time to answer before the adapter's 504
            deadline = Cancellation(timeout=self.settings.request_deadline)
            call = Call(
                workspace, request.path_params, query, request.headers, cancellation=deadline
            )
            await self._read_body(route, request, call)

            async def handle() -> Response:
                if not route.blocking:
                    return _json(route, route.handler(call), limits)
                if self._quick(route, call):  # headers as for the thread: see below
                    group = None if route.batch_key is None else route.batch_key(call)
                    batch = None if group is None else self._joined_batch(route, group)
                    if batch is not None:
                        return _json(route, await self._batched(route, batch, call), limits)
                    return _json(route, self._run_timed(route, call), limits)
                return await self._run_blocking(route, call, request, limits)

            key = request.headers.get("idempotency-key")
            # a stream is not stored for replay: the key does not apply (as at OpenAI, Stripe)
            if (
                route.method == "POST"
                and key is not None
                and route.idempotency
                and not route.streams(call.body)
            ):
                print_ = fingerprint(route.method, request.url.path, _canonical(call))
                response = await run_once(
                    self.core.idempotency,
                    workspace,
                    check_key(key),
                    print_,
                    handle,
                    wait=self.settings.request_deadline,
                    request_id=request.scope["state"].get("request_id"),
                )
            else:
                response = await handle()
            if "ratelimit" not in response.headers:  # a replay, a stream: add them now
                response.headers.update(limits)
            return response

        run.__name__ = route.operation_id
        return run

    def identify(
        self, request: Request, scope: Literal["any", "read", "write"]
    ) -> tuple[WorkspaceServices, dict[str, str]]:
        """The caller's workspace, from its key (401 without a valid one), checked for
        ``scope`` (403; before the body is read, which it does not depend on), and the
        ``RateLimit`` headers of the request it is charged for (429 past the limit)."""
        # on the loop: a read of one indexed row (WAL readers never wait for the
        # writer); the occasional last_used_at write goes to a background thread
        workspace = self.core.authenticate(bearer_token(request), defer_touch=True)
        if scope != "any":
            workspace.require(scope)
        limits = rate_limit_headers(
            self.core.rate_limiter.enforce(workspace.key_id or "", workspace.environment)
        )
        return workspace, limits

    def _quick(self, route: ApiRoute, call: Call) -> bool:
        """Whether to run a blocking handler on the loop: its route allows it
        (``quick_when``), its recent runs in this workspace took at most
        ``inline_budget``, and ``quick_when(call)`` holds (a search: the index is
        current).

        A thread hop costs two thread wake-ups, and on a busy machine each may wait for
        a CPU: more than a search of a small index takes. Concurrent requests do not
        change that: a search's scan already shares the cores (the index's helper
        threads), and quick searches on worker threads mostly wait for the GIL and hand
        it back and forth (each hand-over a wake-up). Deciding by whether another
        handler was running made a loaded server settle in one of two states (all on
        threads, or all on the loop) by chance; see docs/benchmarks.md.

        The first run in a workspace goes to a thread (no estimate yet); a handler that
        turns slow blocks the loop for a few runs (until they are most of the recent
        ones, see ``_note``), then runs on threads until its runs are quick again.
        """
        budget = self.settings.inline_budget
        if route.quick_when is None or budget <= 0:
            return False
        recent = self._recent(route, call.workspace)
        return recent is not None and recent.median <= budget and route.quick_when(call)

    def _recent(self, route: ApiRoute, ws: Workspace) -> _Runs | None:
        """``route``'s recent runs in ``ws`` (``_note``), if it has any."""
        return self.runs.get((route.operation_id, ws.organization_id, ws.environment))

    async def _batched(self, route: ApiRoute, key: BatchKey, call: Call) -> Any:
        """The result of ``call``, run together with the calls of the same batch ``key``
        (``_joined_batch``) that reach the loop in the same turn.

        The first of them schedules the run for the loop's next turn, after the
        request tasks already due (requests read with it) have joined. One call alone
        runs as ever; under load, requests arrive while a batch runs, so the next
        turn finds several.
        """
        loop = key[0]
        future: asyncio.Future[Any] = loop.create_future()
        waiting = self.batches.get(key)
        if waiting is None:
            waiting = self.batches[key] = []
            loop.call_soon(self._run_batch, route, key, waiting)
        waiting.append((call, future))
        if len(waiting) >= self._batch_limit(route, call.workspace):
            del self.batches[key]  # full: the next call starts another batch
        return await future

    def _batch_limit(self, route: ApiRoute, ws: Workspace) -> int:
        """How many calls one batch of ``route`` in ``ws`` answers: as many as its
        recent runs (a batch's calls noted at their share of it) say fit in
        ``inline_budget``, since a batch holds the loop, and other requests wait, until
        it ends; at least 1 and at most ``BATCH_MAX``."""
        recent = self._recent(route, ws)
        if recent is None or recent.median <= 0:
            return BATCH_MAX
        return max(1, min(BATCH_MAX, int(self.settings.inline_budget / recent.median)))

    def _joined_batch(self, route: ApiRoute, group: Hashable) -> BatchKey | None:
        """The batch a call of ``group`` waits for (an app served by two loops: one
        batch each), or ``None`` to run it at once: it waits when such a batch is
        waiting to run, else as ``route``'s recent batches say (``_Batching``)."""
        key = (asyncio.get_running_loop(), route.operation_id, group)
        return key if key in self.batches or self._batching(route).wanted() else None

    def _batching(self, route: ApiRoute) -> _Batching:
        """Whether ``route``'s batchable calls wait for a batch now (see ``_Batching``)."""
        state = self.batching.get(route.operation_id)
        if state is None:
            state = self.batching[route.operation_id] = _Batching()
        return state

    def _run_batch(
        self,
        route: ApiRoute,
        key: BatchKey,
        waiting: list[tuple[Call, asyncio.Future[Any]]],
    ) -> None:
        """Settle the futures of the calls ``waiting`` under ``key``: by one
        ``route.batch`` run; or, when they are one or the batch fails, by one run each,
        each in a turn of the loop of its own (so that each call gets its own answer or
        error, and the loop is not held longer than without batches)."""
        assert route.batch is not None
        if self.batches.get(key) is waiting:
            del self.batches[key]
        self._batching(route).ran(len(waiting))
        live: list[tuple[Call, asyncio.Future[Any]]] = []
        for call, future in waiting:
            if future.done():  # its request was cancelled meanwhile
                continue
            try:  # a call past its deadline (or its client gone) is not started
                call.cancellation.check()
            except AgentCoreError as error:
                future.set_exception(error)
                continue
            live.append((call, future))
        try:
            results = None
            if len(live) > 1:
                calls = [call for call, _ in live]
                began = self.clock()
                try:
                    results = route.batch(calls)
                except Exception as error:  # each call alone answers its own error
                    if not isinstance(error, AgentCoreError):
                        log.warning(
                            "%s: a batch failed (%r); its calls run one by one",
                            route.operation_id,
                            error,
                        )
                else:
                    each = (self.clock() - began) / len(calls)
                    self._note(route, calls[0].workspace, began, began + each)
            if results is not None:
                for (_, future), result in zip(live, results, strict=True):
                    future.set_result(result)
                return
        except BaseException as error:  # no request may wait for ever
            for _, future in live:
                if not future.done():
                    future.set_exception(error)
            raise
        if len(live) == 1:
            self._run_one(route, *live[0])
            return
        for call, future in live:  # each in a turn of its own, as without batches
            asyncio.get_running_loop().call_soon(self._run_one, route, call, future)

    def _run_one(self, route: ApiRoute, call: Call, future: asyncio.Future[Any]) -> None:
        """Settle ``future`` with the result (or error) of ``call`` run alone."""
        if future.done():  # its request was cancelled meanwhile
            return
        try:
            result = self._run_timed(route, call)
        except BaseException as error:  # its request answers it; no request waits for ever
            future.set_exception(error)
            if not isinstance(error, Exception):
                raise
        else:
            future.set_result(result)

    def _run_timed(self, route: ApiRoute, call: Call) -> Any:
        """``route.handler(call)``, noting how long it took when the route may run inline.

        A call whose cancellation fired before it started (queued behind a full pool
        past its deadline, or its client gone) is not started: its answer was sent or
        is not wanted, and work started then could only commit unseen.
        """
        call.cancellation.check()
        if route.quick_when is None:
            return route.handler(call)
        began = self.clock()
        result = route.handler(call)  # an error is not noted: it says nothing of the work
        self._note(route, call.workspace, began, self.clock())
        return result

    def _note(self, route: ApiRoute, ws: Workspace, began: float, ended: float) -> None:
        """Record a run (``began`` and ``ended`` read from ``clock``): a route's estimate
        in a workspace is the median (the upper one of an even count) of its last
        ``RECENT_RUNS`` run times (wall clock, so waiting on I/O counts), which a stray
        slow run (the machine busy) does not move, but a run of slow ones does. Worker
        threads and the loop both note runs.

        Once ``ESTIMATES_SWEPT_PAST`` workspaces have estimates (or twice what the last
        sweep kept), those not added to for ``ESTIMATE_IDLE_SECONDS`` are dropped."""
        key = (route.operation_id, ws.organization_id, ws.environment)
        with self.runs_lock:
            runs = self.runs.get(key)
            if runs is not None:
                runs.note(began, ended)
                return
            runs = _Runs()
            runs.note(began, ended)  # before _quick (on the loop, unlocked) can see it
            self.runs[key] = runs
            idle = ended - ESTIMATE_IDLE_SECONDS
            self.runs = self.sweep_runs(self.runs, lambda kept: kept.noted_at > idle)

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
                self.pool, context.run, self._run_timed, route, call
            )
            if isinstance(result, ChatStream):
                result = Streamed(result)
            if isinstance(result, Streamed):
                request_id = request.scope["state"].get("request_id")
                return event_stream(result, request_id, heartbeat=self.settings.stream_heartbeat)
            return _json(route, result, limits)

        task = asyncio.ensure_future(work())
        watcher = asyncio.ensure_future(_cancel_on_disconnect(request, call))
        deadline = self.settings.request_deadline
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
        settings = self.settings
        if route.body == "json_or_upload" and media_type(request) == "multipart/form-data":
            call.upload = await self._read_upload(request)
            return
        require_json(request)
        raw = await read_limited(
            request,
            settings.max_body_bytes,
            timeout=settings.body_timeout,
            deadline=settings.body_deadline,
        )
        data = parse_json(raw, max_depth=settings.max_json_depth)
        assert route.request is not None
        call.body = validate(route.request, data)

    async def _read_upload(self, request: Request) -> Upload:
        limit = self.settings.max_upload_bytes
        raw = await read_limited(
            request,
            limit + MULTIPART_OVERHEAD,
            timeout=self.settings.body_timeout,
            deadline=self.settings.body_deadline,
            what="upload",
        )
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return {"type": "http.disconnect"}
            replayed = True
            return {"type": "http.request", "body": raw, "more_body": False}

        try:
            form = await Request(request.scope, replay).form(
                max_files=1, max_fields=8, max_part_size=1024 * 1024
            )
        except HTTPException as exc:
            raise InvalidRequest(f"Bad multipart body: {exc.detail}", param="file") from None
        file = form.get("file")
        if file is None or isinstance(file, str):
            raise InvalidRequest("Send the document as the multipart field 'file'.", param="file")
        unknown = [name for name in form if name not in UPLOAD_FIELDS]
        if unknown:  # as unknown JSON fields are: refused, not silently dropped
            await form.close()
            raise ValidationFailed(
                f"Unknown multipart field {unknown[0]!r} (allowed: {', '.join(UPLOAD_FIELDS)}).",
                code="unknown_parameter",
                param=unknown[0],
            )
        metadata = _form_metadata(form.get("metadata"))
        external_id = form.get("external_id")
        if external_id is not None and not isinstance(external_id, str):
            await form.close()
            raise ValidationFailed("The 'external_id' field must be text.", param="external_id")
        data = await file.read()
        await form.close()
        for value in (file.filename, file.content_type):
            if value is not None and "\x00" in value:  # as JSON strings: no NUL anywhere
                raise ValidationFailed(
                    "The file name and type must not contain NUL characters.", param="file"
                )
        if len(data) > limit:
            raise PayloadTooLarge(
                f"The uploaded file exceeds the limit of {limit} bytes.",
                code="file_too_large",
                param="file",
            )
        return Upload(file.filename or "upload", file.content_type, data, metadata, external_id)


def _form_metadata(field: Any) -> dict[str, Any] | None:
    """The multipart ``metadata`` field: a JSON object (checked like the JSON body's
    ``metadata`` by the core), or a 422 naming it."""
    if field is None:
        return None
    if not isinstance(field, str):
        raise ValidationFailed("The 'metadata' field must be JSON text.", param="metadata")
    try:
        value = json.loads(field)
    except ValueError:
        raise ValidationFailed(
            "The 'metadata' field is not valid JSON.", param="metadata"
        ) from None
    except RecursionError:  # nested deeper than the decoder's stack (values must be flat)
        raise ValidationFailed(
            "The 'metadata' field is nested too deeply: its values must be strings,"
            " numbers or booleans.",
            param="metadata",
        ) from None
    if not isinstance(value, dict):
        raise ValidationFailed("The 'metadata' field must be a JSON object.", param="metadata")
    return value


def _canonical(call: Call) -> bytes:
    """The parsed body as bytes, for the idempotency fingerprint (computed only when a
    request carries an ``Idempotency-Key``): the upload's name, type and digest, or the
    validated JSON body re-serialised, so formatting differences do not count."""
    upload = call.upload
    if upload is not None:
        attributes = json.dumps([upload.metadata, upload.external_id], sort_keys=True)
        meta = f"{upload.filename}\0{upload.content_type}\0{attributes}\0".encode()
        return meta + hashlib.sha256(upload.data).digest()
    if call.body is None:
        return b""
    body: BaseModel = call.body
    return body.model_dump_json().encode()


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

    def __init__(self, handlers: dict[str, Callable[[Request], Any]]) -> None:
        self.handlers = dict(handlers)
        if "GET" in handlers:
            self.handlers.setdefault("HEAD", handlers["GET"])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # the route let only the path's methods through: others are its 405
        response: Response = await self.handlers[scope["method"]](Request(scope, receive, send))
        await response(scope, receive, send)


def lifespan_for(
    core: AgentCore, *, on_stop: Callable[[], None] | None = None
) -> Callable[[Starlette], contextlib.AbstractAsyncContextManager[None]]:
    """A Starlette lifespan that starts the core's workers and stops them on shutdown
    (then calls ``on_stop``, if given), and runs the MCP endpoints of the apps made for
    ``core`` (``mcp_endpoint``).

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
    **settings: Any,
) -> Starlette:
    """The /v1 API of ``core`` as a Starlette app.

    :param settings: overrides of ``Settings`` fields for HTTP, e.g.
        ``max_body_bytes=2_000_000``; the core's settings are the defaults.
        ``metrics=True`` adds ``GET /metrics`` (Prometheus; off unless asked for here,
        on under ``agentcore serve``).
    :param routes: the route table (default: every built-in route).

    Serve it alone (``agentcore serve``) or mount it: ``host.mount("/api",
    create_app(core))`` serves ``/api/v1/...``.

    Built from Starlette's public parts only: a ``Route`` per path, ``ApiMiddleware``
    through ``middleware=`` (request ids, head limits, problems for failures), and an
    exception handler that answers the router's 404 and 405 as problems. With the
    ``mcp_enabled`` setting (the default) it also serves the MCP endpoint ``/v1/mcp``.
    """
    # validated, so a misspelt setting is an error rather than silently ignored
    merged = Settings.model_validate({**core.settings.model_dump(), **settings})
    table = list(routes if routes is not None else ROUTES)
    api = Api(core, merged)
    documents: dict[str, bytes] = {}  # by mount path: its `servers` entry differs

    async def openapi(request: Request) -> Response:
        root_path = request.scope.get("root_path", "")
        document = documents.get(root_path)
        if document is None:
            document = documents[root_path] = json.dumps(
                build_openapi(
                    table,
                    prefix=PREFIX,
                    version=__version__,
                    settings=merged,
                    event_kinds=list(core.events.kinds),
                    chat_models=list(core.chat_models),
                    root_path=root_path,
                    mcp=mcp is not None,
                )
            ).encode()
        return Response(document, media_type="application/json")

    async def health(request: Request) -> Response:
        # no key: a load balancer asks; the report holds no tenant data
        report = await asyncio.get_running_loop().run_in_executor(api.pool, core.health)
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

    by_path: dict[str, dict[str, Callable[[Request], Any]]] = {}
    for route in table:
        by_path.setdefault(route.path, {})[route.method] = api.endpoint(route)
    # static paths first: the router tries its routes in turn, and the busiest
    # operations (search, chat, verify) have static paths (no two paths overlap but
    # for a static one and a parameterised one, whose methods differ: order is free)
    starlette_routes = [
        Route(PREFIX + path, PathEndpoint(handlers), methods=list(handlers))
        for path, handlers in sorted(by_path.items(), key=lambda item: "{" in item[0])
    ]
    mcp = McpEndpoint(api) if merged.mcp_enabled else None
    if mcp is not None:
        starlette_routes.append(Route(PREFIX + MCP_PATH, mcp, methods=MCP_METHODS))
    starlette_routes.append(Route(PREFIX + "/openapi.json", openapi, methods=["GET"]))
    starlette_routes.append(Route(PREFIX + "/health", health, methods=["GET"]))
    middleware = [
        Middleware(
            ApiMiddleware,
            max_url_bytes=merged.max_url_bytes,
            max_header_bytes=merged.max_header_bytes,
        )
    ]
    on_stop = None
    if merged.metrics:
        registry = CollectorRegistry()
        multiprocess = metrics_multiprocess_dir() is not None
        starlette_routes.append(metrics_route(scraped(core, registry), api.pool))
        # outermost: it times the problems ApiMiddleware answers too
        middleware.insert(
            0,
            Middleware(
                RequestMetrics,
                histogram=request_histogram(registry),
                refresh=core.metrics.refresh if multiprocess else None,
            ),
        )
        on_stop = forget_this_process if multiprocess else None
    app = Starlette(
        routes=starlette_routes,
        middleware=middleware,
        exception_handlers={HTTPException: http_exception_problem},
        lifespan=lifespan_for(core, on_stop=on_stop),
    )
    app.state.core = core
    app.state.settings = merged
    app.state.api = api
    app.state.mcp = mcp
    return app
