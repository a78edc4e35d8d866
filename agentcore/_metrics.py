"""Prometheus metrics of a core: what it measures, and the gauges read when scraped.

Every label value names code, never a tenant: a chat model's name, an error code, a
state. No metric is labelled with an organization, key, agent, document or
conversation, and none counts per tenant.

A core keeps its metrics in a registry of its own (two cores in one process share
nothing). Under ``agentcore serve --workers N`` prometheus-client's multiprocess mode
is on (``PROMETHEUS_MULTIPROC_DIR``): counters and histograms then live in files that
the scraped worker adds up, and this process's gauges are summed over the live
workers (``livesum``). The HTTP adapter serves them at ``GET /metrics``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from agentcore._logs import get_logger
from agentcore._memory_budget import ResidencyStats
from agentcore.config import metrics_multiprocess_dir
from agentcore.knowledge.vectors import VectorBackend, scan_path
from agentcore.schema import Usage
from agentcore.storage.base import ObservableStore, Store

log = get_logger("agentcore._metrics")

QUICK_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""Seconds: a search takes a millisecond on a small index, a second on a huge one."""
BATCH_BUCKETS = (2, 4, 8, 16, 32, 64, 128)
"""Queries: concurrent HTTP searches of one workspace batch up to about the connections'."""
SLOW_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)
"""Seconds: a chat turn waits for a model (and its tool steps), up to its time-out."""


class Metrics:
    """What a core measures: knowledge searches, chat turns and their tokens (recorded
    as they happen, a few microseconds each) and, when scraped, its store's backlog and
    connections and the size of its loaded indexes.

    :param store: read at scrape time (the backlog) and for connection counts.
    :param indexes: the core's loaded indexes, whose size is reported.
    :param caches: the other per-workspace caches sharing the index budget, by name
        (``keyword``, ``metadata``, ``terms``): the ``stats`` of each, what it is
        charged and has evicted.
    :param enabled: ``False`` records nothing (``Settings.metrics = false``).
    :param clock: wall-clock seconds (what ingestion leases are compared with).
    """

    def __init__(
        self,
        store: Store,
        indexes: VectorBackend,
        *,
        caches: Mapping[str, Callable[[], ResidencyStats]] | None = None,
        enabled: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.enabled = enabled
        directory = metrics_multiprocess_dir()
        if directory is not None:
            # multiprocess mode writes each metric's file there as the metric is made
            # (``serve --workers N`` with the operator's directory: made before it starts)
            Path(directory).mkdir(parents=True, exist_ok=True)
        self.registry = CollectorRegistry()
        self._store = store
        self._indexes = indexes
        self._caches = dict(caches or {})
        self._clock = clock
        self._count(self.registry)
        self._gauge(self.registry, store)
        self._gauge_budgets(self.registry)

    def _count(self, registry: CollectorRegistry) -> None:
        """Declare what is recorded as it happens: searches, chat turns, core events."""
        self._search = Histogram(
            "agentcore_search_seconds",
            "Knowledge searches (POST /v1/knowledge/search, ws.knowledge.search): seconds each.",
            buckets=QUICK_BUCKETS,
            registry=registry,
        )
        self._batch = Histogram(
            "agentcore_search_batch_size",
            "Searches answered together by one scan of the index (ws.knowledge.search_many,"
            " and concurrent HTTP searches of a workspace): queries each.",
            buckets=BATCH_BUCKETS,
            registry=registry,
        )
        self._chat = Histogram(
            "agentcore_chat_seconds",
            "Chat turns answered, from the message to the stored answer (streams included),"
            " by chat model: seconds each.",
            ["model"],
            buckets=SLOW_BUCKETS,
            registry=registry,
        )
        self._chat_failures = Counter(
            "agentcore_chat_failures",
            "Chat turns the chat model failed (code: provider_error, provider_timeout, ...).",
            ["model", "code"],
            registry=registry,
        )
        self._rerank_failures = Counter(
            "agentcore_rerank_failures",
            "Reranker calls that failed, timed out or answered nonsense, so the search kept"
            " its first order (code: provider_error, provider_timeout, invalid_answer, ...).",
            ["reranker", "code"],
            registry=registry,
        )
        self._tokens = Counter(
            "agentcore_chat_tokens",
            "Tokens chat models reported using (kind: input or output).",
            ["model", "kind"],
            registry=registry,
        )
        self._events = Counter(
            "agentcore_core_events",
            "What the core's parts did (event: index.reload, index.catch_up, index.merge,"
            " ingest.worker_start, ...).",
            ["event"],
            registry=registry,
        )

    def _gauge(self, registry: CollectorRegistry, store: Store) -> None:
        """Declare this process's gauges of its store connections and loaded indexes."""
        # this process's gauges: summed over the live workers in multiprocess mode
        gauge = _gauges(registry)
        self._connections = gauge(
            "agentcore_store_connections", "Database connections this process holds open."
        )
        # what only a pool counts (PostgreSQL): declared only for a store that reports it
        self._pool: list[tuple[str, Gauge]] = []
        pooled = store.connection_stats() if isinstance(store, ObservableStore) else None
        for field, name, documentation in (
            ("in_use", "agentcore_store_connections_in_use", "Pooled connections lent out now."),
            ("max", "agentcore_store_connections_max", "The connection pool's maximum size."),
            ("waiting", "agentcore_store_connection_waiters", "Callers waiting for a connection."),
        ):
            if pooled is not None and getattr(pooled, field) is not None:
                self._pool.append((field, gauge(name, documentation)))
        self._index_workspaces = gauge(
            "agentcore_index_workspaces", "Workspaces whose vector index this process holds."
        )
        scans = Gauge(
            "agentcore_vector_scan_info",
            "Which code scores vectors in this process (always 1): numpy's BLAS and the CPU"
            " kind it chose, numkong's SIMD targets (none: not installed), the CPU's vector"
            " extensions.",
            ["blas", "numkong", "cpu"],
            registry=registry,
            multiprocess_mode="livesum",
        )
        if self.enabled:
            scans.labels(**scan_path()).set(1)
        self._index_rows = gauge(
            "agentcore_index_rows", "Vectors in the indexes this process holds."
        )
        self._index_bytes = gauge(
            "agentcore_index_bytes",
            "Bytes of the indexes this process holds (in RAM or mapped from segment files).",
        )

    def _gauge_budgets(self, registry: CollectorRegistry) -> None:
        """Declare the gauges of the index budget and the caches charged to it."""
        gauge = _gauges(registry)
        # the index budget (index_cache_bytes) and what it did since the process started
        self._index_budget = [
            (field, gauge(name, documentation))
            for field, name, documentation in (
                (
                    "budget_bytes",
                    "agentcore_index_budget_bytes",
                    "The index budget (index_cache_bytes) of this process.",
                ),
                (
                    "bytes",
                    "agentcore_index_charged_bytes",
                    "Bytes of loaded indexes charged to the budget (what a scan keeps resident).",
                ),
                (
                    "loads",
                    "agentcore_index_loads",
                    "Whole-workspace index loads since the process started.",
                ),
                (
                    "evictions",
                    "agentcore_index_evictions",
                    "Workspaces evicted by the index budget since the process started.",
                ),
                (
                    "segment_fallbacks",
                    "agentcore_index_segment_fallbacks",
                    "Loads that could not use their segment files (each logged) since the"
                    " process started.",
                ),
            )
        ]

        # the other caches charged to the same budget: keyword indexes, document tables,
        # the store's word-count sums
        self._cache_gauges = [
            (
                field,
                Gauge(
                    name,
                    documentation,
                    ["cache"],
                    registry=registry,
                    multiprocess_mode="livesum",
                ),
            )
            for field, name, documentation in (
                (
                    "bytes",
                    "agentcore_workspace_cache_charged_bytes",
                    "Bytes of other per-workspace caches (cache: keyword, metadata, terms) charged"
                    " to the index budget.",
                ),
                (
                    "entries",
                    "agentcore_workspace_cache_workspaces",
                    "Workspaces each of those caches holds now.",
                ),
                (
                    "evictions",
                    "agentcore_workspace_cache_evictions",
                    "Workspaces each of those caches evicted since the process started.",
                ),
                (
                    "loads",
                    "agentcore_workspace_cache_loads",
                    "Workspaces each of those caches built or read afresh since the process"
                    " started (many evictions per load: the hot set does not fit).",
                ),
            )
        ]

    def __call__(self, event: str, count: int) -> None:
        """``count`` more of one of the core's counted events (``observer``'s list)."""
        if self.enabled:
            self._events.labels(event).inc(count)

    def searched(self, seconds: float, queries: int = 1) -> None:
        """A knowledge search took ``seconds``; or ``queries`` searches answered
        together did (each is counted, taking its share of the time)."""
        if not self.enabled:
            return
        for _ in range(queries):
            self._search.observe(seconds / queries)
        if queries > 1:
            self._batch.observe(queries)

    def answered(self, model: str, seconds: float, usage: Usage | None) -> None:
        """A chat turn with ``model`` was answered in ``seconds``, using ``usage``."""
        if not self.enabled:
            return
        self._chat.labels(model).observe(seconds)
        if usage is not None:
            self._tokens.labels(model, "input").inc(usage.input_tokens)
            self._tokens.labels(model, "output").inc(usage.output_tokens)

    def chat_failed(self, model: str, code: str) -> None:
        """A chat turn's model call failed with the error ``code``."""
        if self.enabled:
            self._chat_failures.labels(model, code).inc()

    def rerank_failed(self, reranker: str, code: str) -> None:
        """A reranker call failed with ``code``; the search kept its first order."""
        if self.enabled:
            self._rerank_failures.labels(reranker, code).inc()

    def refresh(self) -> None:
        """Set this process's gauges: its store connections and loaded indexes (no
        query). Called when scraped, and from requests in multiprocess mode."""
        if not self.enabled:
            return
        if isinstance(self._store, ObservableStore):
            stats = self._store.connection_stats()
            self._connections.set(stats.open)
            for field, gauge in self._pool:
                gauge.set(getattr(stats, field) or 0)
        held = self._indexes.stats()
        self._index_workspaces.set(held["workspaces"] or 0)
        self._index_rows.set(held["rows"] or 0)
        self._index_bytes.set(held["nbytes"] or 0)
        for field, budget_gauge in self._index_budget:
            budget_gauge.set(held[field] or 0)
        for name, cache in self._caches.items():
            charged = cache()
            for field, cache_gauge in self._cache_gauges:
                cache_gauge.labels(name).set(getattr(charged, field))

    def backlog(self) -> Collector:
        """A collector of the store's backlog (one read at each scrape): ingestion jobs
        by state, webhook deliveries pending and failed, and whether the store answered.

        Register it with the registry that is scraped: the counts are the store's, the
        same from every process, so they are never kept in multiprocess files.
        """
        return _Backlog(self)


def _gauges(registry: CollectorRegistry) -> Callable[[str, str], Gauge]:
    def gauge(name: str, documentation: str) -> Gauge:
        return Gauge(name, documentation, registry=registry, multiprocess_mode="livesum")

    return gauge


class _Backlog(Collector):
    """The scrape-time gauges read from the store (see ``Metrics.backlog``)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        metrics = self._metrics
        metrics.refresh()
        up = GaugeMetricFamily(
            "agentcore_store_up", "Whether the store answered the metrics' query (1) or not (0)."
        )
        store = metrics._store
        if not metrics.enabled or not isinstance(store, ObservableStore):
            return
        try:
            backlog = store.backlog(metrics._clock())
        except Exception as exc:  # a scrape must not fail because the database is down
            log.warning("metrics: the store did not answer (%s)", type(exc).__name__)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        jobs = GaugeMetricFamily(
            "agentcore_ingest_jobs",
            "Background ingestion jobs in the store, by state (queued, running).",
            labels=["state"],
        )
        jobs.add_metric(["queued"], backlog.ingest_queued)
        jobs.add_metric(["running"], backlog.ingest_running)
        yield jobs
        deliveries = GaugeMetricFamily(
            "agentcore_webhook_deliveries",
            "Webhook deliveries in the store, by status (pending: to be sent or retried;"
            " failed: given up).",
            labels=["status"],
        )
        deliveries.add_metric(["pending"], backlog.deliveries_pending)
        deliveries.add_metric(["failed"], backlog.deliveries_failed)
        yield deliveries
