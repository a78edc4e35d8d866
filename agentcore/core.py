"""AgentCore: opens a store, loads plugins, authenticates keys, runs background workers.

This module is the composition root: the only place that holds the whole ``Store``,
the ``Settings`` and the plugin manager, and hands each service just what it uses.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

import pluggy

from agentcore import client_tokens
from agentcore._background import Runtime
from agentcore._bucket_file import bucket_file_for
from agentcore._idempotency import DEFAULT_SWEEP_INTERVAL, IdempotencyKeys
from agentcore._ingest_worker import WorkerBootstrap
from agentcore._logs import get_logger, hide_passwords
from agentcore._memory_budget import Residency
from agentcore._metrics import Metrics
from agentcore._plugin_manager import (
    configured_ocr,
    make_plugin_manager,
    plugin_settings_models,
    registered_embedders,
    registered_rerankers,
)
from agentcore._rate_limits import RateLimiter
from agentcore._workspace_services import WorkspaceServices
from agentcore.agents import AgentService
from agentcore.chat import ChatService
from agentcore.chat_models import ChatModel
from agentcore.client_tokens import ClientTokenService, is_client_token
from agentcore.config import Settings, cache_directory
from agentcore.conversations import ConversationService
from agentcore.errors import NotFound
from agentcore.events import EventBus
from agentcore.keys import KeyManager, check_environment, check_scopes
from agentcore.knowledge import (
    KeywordCache,
    KeywordCopy,
    KeywordFiles,
    KeywordSnapshots,
    MetadataCache,
    Reranking,
)
from agentcore.knowledge.embedders import Embedder
from agentcore.knowledge.ingest import (
    IngestionJobs,
    IngestPipeline,
    WorkerSpec,
    WorkersUnavailable,
)
from agentcore.knowledge.ocr import OcrUnavailable
from agentcore.knowledge.rerankers import Reranker
from agentcore.knowledge.service import KnowledgeService
from agentcore.knowledge.terms import TermCounter
from agentcore.knowledge.text import stems
from agentcore.knowledge.vectors import (
    Embedding,
    PgvectorBackend,
    VectorBackend,
    WorkspaceIndexes,
    max_mapped_files,
    scan_path,
    segment_root,
)
from agentcore.mcp_tools import McpTools
from agentcore.observer import Counts, Observer, Observers, observer_of
from agentcore.outbound import MCP_HEADERS
from agentcore.schema import Health, LoopState, Organization
from agentcore.storage.base import (
    BudgetedStore,
    Checkpointing,
    KeywordSnapshotStore,
    ReopenableStore,
    Store,
    VectorSearchStore,
)
from agentcore.storage.sqlite import path_for_url
from agentcore.webhooks import SETTING_HINT, KeyFileError, WebhookRuntime, secret_keys
from agentcore.webhooks.service import WebhookService
from agentcore.workspace import Workspace

log = get_logger("agentcore")  # masks keys and secrets in every record

MODEL_THREADS = 8  # model calls under way at once (each bounded by model_timeout)


def _vector_backend(
    store: Store,
    settings: Settings,
    embedding: Embedding,
    runtime: Runtime,
    observer: Observer,
    files: tuple[Path | None, str],
) -> VectorBackend:
    """Where the core ranks vectors: the store itself (``vector_search="pgvector"``), or
    each workspace's index in this process's memory (segment files in ``files``)."""
    if settings.vector_search == "pgvector":
        if not isinstance(store, VectorSearchStore):
            raise ValueError(
                "vector_search='pgvector' needs a store that searches vectors itself"
                " (a postgresql:// database)"
            )
        return PgvectorBackend(
            store,
            ranking=store,
            embedding=embedding,
            codec=settings.index_dtype,
            budget_bytes=settings.index_cache_budget,
            max_mapped_files=max_mapped_files(),
        )
    return WorkspaceIndexes(
        store,
        embedding=embedding,
        catchup_max_rows=settings.index_catchup_max_rows,
        codec=settings.index_dtype,
        budget_bytes=settings.index_cache_budget,
        max_mapped_files=max_mapped_files(),
        runtime=runtime,
        observer=observer,
        segments=files[0],
        store_identity=files[1],
    )


def _checkpoint_step(store: Checkpointing) -> Callable[[], None]:
    """The pass of the checkpoint loop: the store's housekeeping, then its interval."""

    def step() -> None:
        store.checkpoint()

    return step


#: Threads loading keyword indexes for hybrid searches (``KeywordCache.get_soon``).
KEYWORD_LOAD_THREADS = 4


def _keyword_cache(
    store: Store,
    settings: Settings,
    budget: Residency[Any, Any],
    runtime: Runtime,
    files: tuple[Path | None, str],
) -> KeywordCache:
    """Each workspace's BM25 index, built at its first keyword or hybrid search with the
    stemming tokenizer of the term counts, and kept between processes (``_keyword_copies``),
    written on a thread of their own (the writes queued when the core stops are finished
    first)."""
    copies = _keyword_copies(store, *files)
    return KeywordCache(
        store,
        stems.tokens_of,
        catchup_max_rows=settings.index_catchup_max_rows,
        budget=budget,
        copies=copies,
        submit=runtime.executor("agentcore-keyword-files", 1, finish_queued=True).submit
        if copies
        else None,
        # a few at once: cold hybrid searches of several workspaces after a restart
        load=runtime.executor("agentcore-keyword-load", KEYWORD_LOAD_THREADS).submit,
    )


def _keyword_copies(store: Store, root: Path | None, identity: str) -> list[KeywordCopy]:
    """Where keyword indexes are kept between processes: keyword files beside the segment
    files (``index_dir``), and the store's snapshots unless the files are beside the
    database (a SQLite file's): a PostgreSQL node's files are its own machine's, so a new
    node reads the store's; with no files the store's are the only copy. Not for a
    database no other process can open (in memory: no ``reopener``)."""
    copies: list[KeywordCopy] = [] if root is None else [KeywordFiles(root, identity)]
    beside = root is not None and identity.startswith("sqlite:")
    shared = isinstance(store, ReopenableStore) and store.reopener() is not None
    if isinstance(store, KeywordSnapshotStore) and shared and not beside:
        copies.append(KeywordSnapshots(store))
    return copies


def _index_files(store: Store, settings: Settings) -> tuple[Path | None, str]:
    """Where this machine keeps the store's index files (``segment_root``; PostgreSQL's
    under ``config.cache_directory()``), and the store's identity; none when that cache
    directory cannot be made (said once in the log: indexes then stay in RAM)."""
    cache = cache_directory()
    root, identity = segment_root(getattr(store, "url", None), settings.index_dir, cache)
    if root is not None and cache in root.parents:
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            log.warning(
                "no index files for this store: %s cannot be made (%s); set index_dir to a"
                " writable directory, or to off",
                root,
                exc.strerror or exc,
            )
            return None, ""
    return root, identity


@dataclass(frozen=True)
class _Origin:
    """How ``AgentCore.open`` built a core: what an ingestion worker process needs to
    build the same one (pickled to it: plugins as module names or objects)."""

    plugins: tuple[object, ...]
    entry_points: bool
    settings: Settings


class AgentCore:
    """The library's entry point: ``AgentCore.open(path_or_url)``.

    Thread-safe and synchronous; frameworks call it from worker threads. Keeps no
    state that cannot be rebuilt from the store, so several processes may share one.
    """

    def __init__(
        self,
        store: Store,
        settings: Settings,
        pm: pluggy.PluginManager,
        *,
        origin: _Origin | None = None,
        observer: Observer | Counts | None = None,
    ) -> None:
        # first, as it may refuse (a key file it cannot read), before anything is built:
        # webhook secrets are sealed with webhook_secret_key, else with the key file
        # beside a SQLite database (created when missing); plaintext only where neither is
        self.webhook_keys = secret_keys(
            settings.webhook_secret_key, path_for_url(str(getattr(store, "url", "")))
        )
        # the engine reading scanned PDF pages: one that cannot run here refuses now
        self.ocr = configured_ocr(pm, settings)
        self.store = store
        # the core's metrics and its host's observer, told what every part does
        self.observer = Observers(observer_of(observer))
        self.settings = settings
        self.pm = pm
        self._origin = origin
        # every background thread, pool and component of this core; start()/stop() run it
        self.runtime = Runtime()
        self.events = EventBus()
        self._started = False
        self._lock = threading.Lock()
        self._build_tenancy(store, settings)
        self._build_knowledge(store, settings)
        self._build_operations(store, settings)
        self._build_ingestion(store, settings)
        # through a lambda, so a test may swap in a runtime with a fake clock or resolver
        self.events.add_sink(lambda event: self.webhooks.record(event))
        pm.hook.agentcore_register_event_kinds(register=self.events.register_kind)
        self.embedders.update(registered_embedders(pm, settings))
        self.rerankers.update(registered_rerankers(pm, settings))
        pm.hook.agentcore_register_chat_models(register=self._add_chat_model, settings=settings)

    def _build_tenancy(self, store: Store, settings: Settings) -> None:
        """Keys, rate limits and idempotency keys."""
        # last_used_at writes of keys seen on the event loop; finished when the core stops
        self.keys = KeyManager(
            store, toucher=self.runtime.executor("agentcore-key-touch", 1, finish_queued=True)
        )
        # "host" buckets: a file beside a SQLite database, mapped by its every process
        database = path_for_url(str(getattr(store, "url", "")))
        self.rate_limiter = RateLimiter(
            settings, store=store, bucket_file=bucket_file_for(database)
        )
        self.idempotency = IdempotencyKeys(
            store,
            ttl=settings.idempotency_ttl,
            lease=settings.idempotency_lease,
            sweep_interval=min(DEFAULT_SWEEP_INTERVAL, settings.idempotency_ttl / 2),
        )
        # the claims this process holds are renewed (a third of their lease apart, so
        # one late pass does not lose them), and expired keys and the results they keep
        # go (a bounded write a pass, every sweep interval)
        self.runtime.loop(
            "agentcore-idempotency-sweep",
            self.idempotency.sweep_step,
            interval=self.idempotency.renew_interval,
            # after failures (the store unreachable), renew again before a lease lapses
            backoff_max=self.idempotency.renew_interval,
        )
        # expired client tokens go, a bounded write a pass, hourly
        self.runtime.loop(
            "agentcore-client-token-sweep",
            lambda: 0.0 if client_tokens.sweep(store) >= client_tokens.SWEEP_LIMIT else None,
            interval=3600.0,
        )

    def _build_knowledge(self, store: Store, settings: Settings) -> None:
        """What search reads: the embedder, the vector backend, the document tables
        filters read, the keyword indexes, the term counts; all under one budget."""
        self.embedders: dict[str, Embedder] = {}
        self.chat_models: dict[str, ChatModel] = {}
        self.rerankers: dict[str, Reranker] = {}  # filled in as embedders are
        # sentence frequencies kept per document, read by chat (the core's tokenizer)
        self.terms = TermCounter(stems.tokens_of, stems.stem_frequencies)
        # embedders fill in through the hook (at the end of __init__); looked up when needed
        self.embedding = Embedding(
            self.embedders, settings.embedder, max_token_chars=settings.max_token_chars
        )
        files = _index_files(store, settings)  # segment and keyword files (index_dir)
        self.indexes = _vector_backend(
            store, settings, self.embedding, self.runtime, self.observer, files
        )
        # each workspace's document metadata, which filters read (kept at the store's version)
        self.metadata = MetadataCache(store, budget=self.indexes.budget)
        if isinstance(store, BudgetedStore):  # the store's own per-workspace caches too
            store.share_budget(self.indexes.budget)
        # BM25 indexes for keyword and hybrid search (under index_cache_bytes too)
        self.keywords = _keyword_cache(store, settings, self.indexes.budget, self.runtime, files)

    def _build_operations(self, store: Store, settings: Settings) -> None:
        """Metrics, the model-call threads, webhook delivery, the store's housekeeping."""
        # Prometheus metrics of this core (its own registry); `metrics = false` records none
        self.metrics = Metrics(
            store,
            self.indexes,
            caches={
                "keyword": self.keywords.stats,
                "metadata": self.metadata.stats,
                **({"terms": store.cache_stats} if isinstance(store, BudgetedStore) else {}),
            },
            enabled=settings.metrics is not False,
        )
        self.observer.add(self.metrics)
        # model calls run here, bounded in time even if a plugin hangs (threads start lazily)
        self.model_pool = self.runtime.executor("agentcore-model", MODEL_THREADS)
        self.reranking = Reranking(
            self.rerankers, settings, pool=self.model_pool, observer=self.observer
        )
        self.webhooks = WebhookRuntime(
            store,
            settings,
            runtime=self.runtime if settings.start_workers else None,
            secrets=self.webhook_keys.box,
        )
        # the tools of agents' remote MCP servers: their listings are shared by every turn
        self.mcp_tools = McpTools(settings, self.webhook_keys.box, resolver=self.webhooks.resolver)
        if isinstance(store, Checkpointing) and store.checkpoint_interval is not None:
            # a SQLite file's WAL is folded into the database here, never in a request
            self.runtime.loop(
                "agentcore-checkpoint", _checkpoint_step(store), interval=store.checkpoint_interval
            )

    def _build_ingestion(self, store: Store, settings: Settings) -> None:
        """The ingest pipeline and the jobs that run it in worker processes."""
        # one pipeline indexes uploads here (a thread) and in worker processes alike
        self.pipeline = IngestPipeline(
            store,
            settings,
            self.embedding,
            self.indexes.write,
            terms=self.terms,
            events=self.events,
            ocr=self.ocr,
        )
        # a component of the runtime: its scheduling loop, watching threads, worker processes
        self.ingestion_jobs = IngestionJobs(
            store,
            settings,
            run=self.pipeline.run_ingest_job,
            runtime=self.runtime,
            workers=self._worker_spec,
            events=self.events,
            observer=self.observer,
        )

    @classmethod
    def open(
        cls,
        url: str = ":memory:",
        *,
        settings: Settings | None = None,
        plugins: Iterable[object | ModuleType | str] = (),
        entry_points: bool = True,
        observer: Observer | Counts | None = None,
        **overrides: Any,
    ) -> AgentCore:
        """Open a core on ``url``: a SQLite path (default ``:memory:``) or a plugin's URL.
        An empty ``url`` raises ``ValueError`` (SQLite would make a throwaway database).

        Settings (the core's and every plugin's) are read and validated here, before
        the store opens: a bad value or an unknown name raises
        ``pydantic.ValidationError`` naming it.

        :param settings: the core's settings; default read from the environment.
        :param plugins: extra plugin objects or module names to register.
        :param entry_points: load plugins from the ``agentcore`` entry-point group.
        :param observer: told what the core's parts do (index loads, catch-ups, merges,
            worker processes started, searches, chat turns: ``observer.Observer``), for
            metrics or tests; a plain ``(event, count)`` callable is told the counts.
        :param overrides: individual ``Settings`` fields, e.g. ``max_top_k=50``, or a
            plugin's as ``<namespace>_<field>``, e.g. ``openai_model="llama3"``.
        """
        if not str(url).strip():  # SQLite would open a throwaway temporary database
            raise ValueError(
                "The store URL is empty: name a SQLite file, ':memory:' or a store URL"
                " (postgresql://...)."
            )
        plugins = tuple(plugins)
        pm = make_plugin_manager(plugins, entry_points=entry_points)
        settings = Settings.load(plugin_settings_models(pm), base=settings, **overrides)
        store = pm.hook.agentcore_open_store(url=str(url), settings=settings)
        if store is None:
            raise ValueError(f"No store plugin handles {hide_passwords(str(url))!r}.")
        named = tuple(p.__name__ if isinstance(p, ModuleType) else p for p in plugins)
        origin = _Origin(named, entry_points, settings)
        try:
            core = cls(store, settings, pm, origin=origin, observer=observer)
        except (KeyFileError, OcrUnavailable):  # refused before the core built anything:
            store.close()
            raise
        core._seal_plaintext_secrets()
        return core

    def _seal_plaintext_secrets(self) -> None:
        """Seal, in place, webhook secrets and MCP server headers stored before a key was
        available (no receiver or server notices: the values stay the same). A failure is
        logged, not raised: those secrets keep working as they are, and the next open
        tries again."""
        box = self.webhook_keys.box
        try:
            sealed = self.webhooks.seal_stored_secrets()
            headers = (
                self.store.seal_mcp_headers(functools.partial(box.seal, purpose=MCP_HEADERS))
                if box.sealing
                else 0
            )
        except Exception as exc:  # e.g. a read-only database: opening must not fail on it
            log.warning("could not seal the secrets stored in plaintext: %s", exc)
            return
        if sealed:
            log.info("sealed %d webhook signing secret(s) that were stored in plaintext", sealed)
        if headers:
            log.info(
                "sealed the headers of %d MCP server(s) that were stored in plaintext", headers
            )

    @property
    def store_in_process(self) -> bool:
        """Whether this core's store lives in this process alone (SQLite ``:memory:``), so
        that no other process can open it: ``serve`` then runs one process, and
        ingestion runs on a thread of this one."""
        store = self.store
        return isinstance(store, ReopenableStore) and store.reopener() is None

    def _worker_spec(self) -> WorkerSpec:
        """What this core's ingestion worker processes are built from, or why there are none.

        :raises WorkersUnavailable: ``ingest_workers`` is 0, the core was not made by
            ``open``, or its database cannot be opened by another process.
        """
        settings = self.settings
        if settings.ingest_pool_size == 0:
            raise WorkersUnavailable("ingest_workers is 0")
        if self._origin is None:
            raise WorkersUnavailable(
                "the core was not made by AgentCore.open, so a worker cannot rebuild it"
            )
        reopen = self.store.reopener() if isinstance(self.store, ReopenableStore) else None
        if reopen is None:
            raise WorkersUnavailable(
                f"another process cannot open this core's database ({self.store.url!r})"
            )
        origin = self._origin
        return WorkerSpec(
            bootstrap=WorkerBootstrap(origin.plugins, origin.entry_points, origin.settings, reopen),
            memory_mb=settings.ingest_worker_memory_mb,
            nice=settings.ingest_worker_nice,
        )

    def _add_chat_model(self, model: ChatModel) -> None:
        if model.name in self.chat_models:
            raise ValueError(f"two chat models are named {model.name!r}")
        self.chat_models[model.name] = model

    # tenancy -----------------------------------------------------------------

    def create_organization(self, name: str) -> Organization:
        """The organization named ``name``, created if missing."""
        name = name.strip()
        if not name or len(name) > 200:
            raise ValueError("an organization name is 1-200 characters")
        return self.store.ensure_organization(name)

    def authenticate(self, secret: str | None, *, defer_touch: bool = False) -> WorkspaceServices:
        """The workspace a key or a client token opens, with its services, or
        ``AuthenticationError`` (401) saying why.

        :param defer_touch: write ``last_used_at`` on a background thread, so that this
            call only reads the store (the HTTP adapter calls it on the event loop).
        """
        if secret and is_client_token(secret):
            return WorkspaceServices.of_token(client_tokens.resolve(self.store, secret), self)
        key, organization_id = self.keys.resolve(
            secret, touch_interval=self.settings.key_touch_interval, defer_touch=defer_touch
        )
        return WorkspaceServices(
            organization_id=organization_id,
            organization=key.organization,
            environment=key.environment,
            scopes=frozenset(key.scopes),
            key_id=key.id,
            core=self,
        )

    def workspace(
        self,
        organization: str,
        environment: str = "test",
        *,
        scopes: Iterable[str] = ("read", "write"),
        create: bool = True,
    ) -> WorkspaceServices:
        """A workspace, with its services, for trusted host code and the CLI, without a key.

        :param create: create the organization when it does not exist yet.
        """
        env = check_environment(environment)
        org = (
            self.create_organization(organization)
            if create
            else self.store.get_organization_by_name(organization)
        )
        if org is None:
            raise NotFound(f"No organization named {organization!r}.", param="organization")
        return WorkspaceServices(
            organization_id=org.id,
            organization=org.name,
            environment=env,
            scopes=frozenset(check_scopes(scopes)),
            core=self,
        )

    # composition: each service of a workspace gets exactly what it uses ------------

    def agent_service(self, workspace: Workspace) -> AgentService:
        """The agents of ``workspace`` (host code uses ``workspace.agents``)."""
        return AgentService(
            workspace,
            store=self.store,
            chat_models=self.chat_models,
            settings=self.settings,
            secrets=self.webhook_keys.box,
            resolver=self.webhooks.resolver,
        )

    def knowledge_service(self, workspace: Workspace) -> KnowledgeService:
        """The knowledge core of ``workspace`` (host code uses ``workspace.knowledge``)."""
        return KnowledgeService(
            workspace,
            store=self.store,
            settings=self.settings,
            index=self.indexes,
            embedding=self.embedding,
            pipeline=self.pipeline,
            jobs=self.ingestion_jobs,
            terms=self.terms,
            metadata=self.metadata,
            keywords=self.keywords,
            reranking=self.reranking,
            observer=self.observer,
        )

    def chat_service(self, workspace: Workspace) -> ChatService:
        """Chat in ``workspace`` (host code uses ``workspace.chat``)."""
        # a tool plugin gets the workspace with its services (it may publish, search, ...)
        services = (
            workspace
            if isinstance(workspace, WorkspaceServices)
            else WorkspaceServices.of(workspace, self)
        )
        return ChatService(
            workspace,
            store=self.store,
            settings=self.settings,
            chat_models=self.chat_models,
            knowledge=services.knowledge,
            run_tool=functools.partial(self.pm.hook.agentcore_run_tool, workspace=services),
            mcp_tools=self.mcp_tools,
            events=self.events,
            guard_pool=self.model_pool,
            observer=self.observer,
        )

    def conversation_service(self, workspace: Workspace) -> ConversationService:
        """The conversations of ``workspace`` (host code uses ``workspace.conversations``)."""
        return ConversationService(
            workspace, store=self.store, settings=self.settings, events=self.events
        )

    def client_token_service(self, workspace: Workspace) -> ClientTokenService:
        """The client tokens of ``workspace`` (host code uses ``workspace.client_tokens``)."""
        return ClientTokenService(workspace, store=self.store, agents=self.store)

    def webhook_service(self, workspace: Workspace) -> WebhookService:
        """Webhook subscriptions of ``workspace`` (host code uses ``workspace.webhooks``)."""
        # the runtime is read now, so a test that swaps ``core.webhooks`` is honoured
        return WebhookService(
            workspace, self.webhooks, store=self.store, kinds=self.events, settings=self.settings
        )

    # lifecycle ---------------------------------------------------------------

    def start(self) -> None:
        """Start the background work (``runtime``) and plugins'. Idempotent.

        Every background thread of the core runs between ``start()`` and ``stop()``:
        index maintenance, the SQLite checkpointer, the ingestion scheduler, and (with
        ``start_workers``) webhook delivery. Ingestion jobs left by a stopped or
        crashed process are resumed (or, after ``ingest_job_attempts`` tries, marked
        failed); ingestion worker processes start with the first job that needs one.

        If starting fails (a plugin's ``agentcore_startup`` raises), what was started
        is stopped again, as by ``stop()``, and the error is raised: no background
        thread is left running, and a later ``start()`` tries again.
        """
        with self._lock:
            if self._started:
                return
            self._started = True
        keys = self.webhook_keys
        if keys.plaintext_reason is not None:
            log.warning(
                "webhook signing secrets and MCP server headers are stored in plaintext: %s; %s",
                keys.plaintext_reason,
                SETTING_HINT,
            )
        if keys.warning is not None:
            log.warning("%s", keys.warning)
        log.info("vector scans: BLAS %(blas)s; numkong %(numkong)s; CPU %(cpu)s", scan_path())
        try:
            self.runtime.start()
            self.pm.hook.agentcore_startup(core=self)
        except BaseException:
            try:
                self.stop()
            except Exception:  # the start-up error is the one to report
                log.exception("stopping after a failed start failed")
            raise

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every background thread and pool within ``timeout`` seconds; pending
        work stays in the store for the next start. Afterwards no thread the core
        started is alive (unless work outlived the grace period; it is logged).

        Bounded whatever an ingestion job is doing: running jobs get
        ``ingest_stop_grace`` seconds, then their worker processes are killed and the
        jobs go back to the queue.
        """
        with self._lock:
            started, self._started = self._started, False
        self.runtime.stop(timeout)  # also the pools a core that never started used
        if started:
            self.pm.hook.agentcore_shutdown(core=self)

    def health(self) -> Health:
        """Whether this node can do its work: the store answers a cheap query and
        every background loop that should run is running (``GET /v1/health``).

        Never raises; holds no tenant data. ``status`` is ``"unhealthy"`` (and
        ``problems`` says why) when the store does not answer, when the core was not
        started, or when a loop is not running.
        """
        problems: list[str] = []
        store = "ok"
        ping = getattr(self.store, "ping", None)
        try:
            if ping is not None:
                ping()
        except Exception as exc:  # whatever the driver raises: the node cannot serve
            store = "unavailable"
            problems.append(f"The store does not answer ({type(exc).__name__}).")
        loops = [
            LoopState(
                name=loop.name,
                running=loop.running,
                failures=loop.failures,
                last_error=loop.last_error_type,
                last_error_at=(
                    None
                    if loop.last_error_at is None
                    else datetime.fromtimestamp(loop.last_error_at, UTC)
                ),
            )
            for loop in self.runtime.health()
        ]
        started = self.runtime.started
        if not started:
            problems.append("The core is not started: its background work does not run.")
        else:
            stopped = [loop.name for loop in loops if not loop.running]
            if stopped:
                problems.append(f"Background loops not running: {', '.join(stopped)}.")
        return Health(
            status="unhealthy" if problems else "ok",
            store=store,  # type: ignore[arg-type]
            started=started,
            loops=loops,
            problems=problems,
        )

    def close(self) -> None:
        """Stop workers and close the store."""
        self.stop()
        self.indexes.close()
        self.rate_limiter.close()
        self.store.close()

    def __enter__(self) -> AgentCore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
