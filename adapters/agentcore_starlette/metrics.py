"""``GET /metrics``: the app's request metrics and the core's, in Prometheus' text format.

``RequestMetrics`` is a plain ASGI middleware timing every request of the app, labelled
by method, route template (``/v1/agents/{agent_id}``, never the path itself) and status;
``metrics_route`` serves the core's registry, the app's and the store's backlog. Under
``serve --workers N`` (prometheus-client's multiprocess mode) the scraped worker adds up
every worker's files instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, Histogram, multiprocess
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentcore import AgentCore
from agentcore.config import metrics_multiprocess_dir

PATH = "/metrics"
UNMATCHED = "unmatched"
"""The route label of a request no route matched (its path may hold anything)."""
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
REQUEST_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
REFRESH_EVERY = 1.0
"""Seconds between refreshes of a worker's own gauges by its requests (multiprocess mode)."""


class RequestMetrics:
    """Times each HTTP request of the app into ``agentcore_http_request_duration_seconds``
    (its ``_count`` is the request count), labelled ``method``, ``route`` and ``status``.

    The route is the template the router matched (``/v1/conversations/{conversation_id}``)
    or ``unmatched``; an unknown method is ``OTHER``; a request whose answer never
    started (the client left) is status ``0``. A stream is timed to its last byte. Per
    request: two clock reads, a dictionary lookup and a histogram observation.

    :param refresh: called at most every ``REFRESH_EVERY`` seconds after a request
        (multiprocess mode: this worker's gauges, which only a scrape of it would
        otherwise set); ``None``: never.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        histogram: Histogram,
        refresh: Callable[[], None] | None = None,
    ) -> None:
        self.app = app
        self._histogram = histogram
        self._children: dict[tuple[str, str, int], Histogram] = {}
        self._refresh = refresh
        self._refreshed = 0.0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        status = 0

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            ended = time.perf_counter()
            route = scope.get("route")
            template = route.path if isinstance(route, Route) else UNMATCHED
            method = scope["method"]
            key = (method if method in METHODS else "OTHER", template, status)
            child = self._children.get(key)
            if child is None:
                child = self._children[key] = self._histogram.labels(*key)
            child.observe(ended - began)
            if self._refresh is not None and ended - self._refreshed > REFRESH_EVERY:
                self._refreshed = ended
                self._refresh()


def request_histogram(registry: CollectorRegistry) -> Histogram:
    """The app's request histogram, in ``registry``."""
    return Histogram(
        "agentcore_http_request_duration_seconds",
        "HTTP requests of the API by method, route template and status: seconds each,"
        " to the last byte of the answer (the _count is the number of requests).",
        ["method", "route", "status"],
        buckets=REQUEST_BUCKETS,
        registry=registry,
    )


class _Joined(Collector):
    """Several registries scraped as one."""

    def __init__(self, parts: Iterable[Collector]) -> None:
        self._parts = list(parts)

    def collect(self) -> Iterator[Metric]:
        for part in self._parts:
            yield from part.collect()


def scraped(core: AgentCore, app_registry: CollectorRegistry) -> Collector:
    """What ``GET /metrics`` shows: in one process, the core's and the app's registries;
    in multiprocess mode, every worker's files; in both, the store's backlog, read now."""
    # the backlog first: it also sets this process's gauges, which the others then read
    backlog = core.metrics.backlog()
    directory = metrics_multiprocess_dir()
    if directory is None:
        return _Joined([backlog, core.metrics.registry, app_registry])
    return _Joined([backlog, _Files(directory)])


class _Files(Collector):
    """Every process's metric files in the multiprocess ``directory``, read after the
    live gauges of processes that are gone are dropped (``forget_dead_processes``)."""

    def __init__(self, directory: str) -> None:
        self._directory = directory
        self._files = CollectorRegistry()
        multiprocess.MultiProcessCollector(self._files, path=directory)  # type: ignore[no-untyped-call]

    def collect(self) -> Iterator[Metric]:
        forget_dead_processes(self._directory)
        yield from self._files.collect()


METRIC_FILE = re.compile(r"(counter|histogram|summary|gauge_[a-z]+)_(\d+)\.db")
"""The name of a file prometheus-client's multiprocess mode writes: its kind, the pid."""


def metric_files(directory: str) -> Iterator[tuple[Path, str, int]]:
    """prometheus-client's files in ``directory``: each one's path, kind and process id
    (any other file is left out, a database too)."""
    for path in Path(directory).glob("*.db"):
        named = METRIC_FILE.fullmatch(path.name)
        if named is not None:
            yield path, named.group(1), int(named.group(2))


def forget_dead_processes(directory: str) -> None:
    """Drop the live gauges (``livesum`` ...) of every process that wrote them in
    ``directory`` and is no longer running, so the sums count only live processes.

    A worker that stops gracefully drops its own (``forget_this_process``); one that was
    killed, or a CLI command run with ``PROMETHEUS_MULTIPROC_DIR`` set, cannot. Their
    counters and histograms stay: what they counted happened.
    """
    for _, kind, pid in metric_files(directory):
        if kind.startswith("gauge_live") and not _running(pid):
            # another worker's scrape may be removing the same files
            with contextlib.suppress(FileNotFoundError):
                multiprocess.mark_process_dead(pid, directory)  # type: ignore[no-untyped-call]


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # no signal: only whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def metrics_route(collector: Collector, pool: Executor) -> Route:
    """``GET /metrics`` serving ``collector`` (no key: it names no tenant). Scraping reads
    the store, so it runs on ``pool`` (the app's threads), off the event loop."""

    async def metrics(request: Request) -> Response:
        # Prometheus' text format (0.0.4), or OpenMetrics when the scraper asks for it
        encode, media_type = choose_encoder(request.headers.get("accept", ""))
        body = await asyncio.get_running_loop().run_in_executor(pool, encode, collector)
        return Response(body, headers={"Content-Type": media_type, "Cache-Control": "no-store"})

    return Route(PATH, metrics, methods=["GET"])


def forget_this_process() -> None:
    """Drop this worker's live gauges from the multiprocess files (it is stopping), so
    the sums no longer count it."""
    directory = metrics_multiprocess_dir()
    if directory is not None:
        multiprocess.mark_process_dead(os.getpid(), directory)  # type: ignore[no-untyped-call]


@dataclass(frozen=True)
class Instrumentation:
    """What an app adds to serve metrics: ``GET /metrics``, the middleware timing every
    request (outermost, so it times the problems ``ApiMiddleware`` answers too), and what
    its lifespan calls once the core stopped (``None``: nothing)."""

    route: Route
    middleware: Middleware
    on_stop: Callable[[], None] | None


def instrumentation(core: AgentCore, pool: Executor) -> Instrumentation:
    """The metrics of an app of ``core``, scraped on ``pool``: the app's request
    histogram in a registry of its own, with the core's metrics; in multiprocess mode
    every worker's files, this worker's gauges refreshed by its requests, and its live
    gauges dropped when it stops."""
    registry = CollectorRegistry()
    shared = metrics_multiprocess_dir() is not None
    return Instrumentation(
        route=metrics_route(scraped(core, registry), pool),
        middleware=Middleware(
            RequestMetrics,
            histogram=request_histogram(registry),
            refresh=core.metrics.refresh if shared else None,
        ),
        on_stop=forget_this_process if shared else None,
    )
