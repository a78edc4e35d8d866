"""AgentCore: opens a store, loads plugins, authenticates keys, runs background workers."""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Iterable
from types import ModuleType, TracebackType
from typing import Any

import pluggy

from agentcore import hookspecs
from agentcore.chat_models import ChatModel
from agentcore.config import Settings
from agentcore.errors import NotFound
from agentcore.events import EventBus
from agentcore.keys import KeyManager, check_environment, check_scopes
from agentcore.knowledge.embedders import Embedder
from agentcore.knowledge.jobs import IngestRuntime
from agentcore.limits import RateLimiter
from agentcore.models import Organization
from agentcore.plugins import DEFAULT_PLUGINS
from agentcore.storage.base import Store
from agentcore.webhooks.delivery import WebhookRuntime
from agentcore.workspace import Workspace

log = logging.getLogger("agentcore")


def make_plugin_manager(
    plugins: Iterable[object] = (), *, entry_points: bool = True
) -> pluggy.PluginManager:
    """A plugin manager for one core: hookspecs, built-ins, entry points, then ``plugins``.

    One per ``AgentCore`` (not a process global), so two cores in one process can
    carry different plugins.
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    for name in DEFAULT_PLUGINS:
        pm.register(importlib.import_module(name), name=name)
    if entry_points:
        pm.load_setuptools_entrypoints(hookspecs.PROJECT)
    for plugin in plugins:
        if isinstance(plugin, str):
            plugin = importlib.import_module(plugin)
        pm.register(plugin)
    pm.check_pending()
    return pm


class AgentCore:
    """The library's entry point: ``AgentCore.open(path_or_url)``.

    Thread-safe and synchronous; frameworks call it from worker threads. Keeps no
    state that cannot be rebuilt from the store, so several processes may share one.
    """

    def __init__(self, store: Store, settings: Settings, pm: pluggy.PluginManager) -> None:
        self.store = store
        self.settings = settings
        self.pm = pm
        self.events = EventBus()
        self.keys = KeyManager(store)
        self.rate_limiter = RateLimiter(settings)
        self.embedders: dict[str, Embedder] = {}
        self.chat_models: dict[str, ChatModel] = {}
        self._started = False
        self._lock = threading.Lock()
        self._services: dict[str, Any] = {}
        self.webhooks = WebhookRuntime(self)
        self.ingest = IngestRuntime(self)
        # through a lambda, so a test may swap in a runtime with a fake clock or resolver
        self.events.add_sink(lambda event: self.webhooks.record(event))
        pm.hook.agentcore_register_event_kinds(register=self.events.register_kind)
        pm.hook.agentcore_register_embedders(register=self._add_embedder, settings=settings)
        pm.hook.agentcore_register_chat_models(register=self._add_chat_model, settings=settings)

    @classmethod
    def open(
        cls,
        url: str = ":memory:",
        *,
        settings: Settings | None = None,
        plugins: Iterable[object | ModuleType | str] = (),
        entry_points: bool = True,
        **overrides: Any,
    ) -> AgentCore:
        """Open a core on ``url``: a SQLite path (default ``:memory:``) or a plugin's URL.

        :param settings: full settings; default ``Settings.from_env(**overrides)``.
        :param plugins: extra plugin objects or module names to register.
        :param entry_points: load plugins from the ``agentcore`` entry-point group.
        :param overrides: individual ``Settings`` fields, e.g. ``max_top_k=50``.
        """
        if settings is None:
            settings = Settings.from_env(**overrides)
        elif overrides:
            settings = settings.model_copy(update=overrides)
        pm = make_plugin_manager(plugins, entry_points=entry_points)
        store = pm.hook.agentcore_open_store(url=str(url), settings=settings)
        if store is None:
            raise ValueError(f"No store plugin handles {url!r}.")
        return cls(store, settings, pm)

    def _add_embedder(self, embedder: Embedder) -> None:
        if embedder.name in self.embedders:
            raise ValueError(f"two embedders are named {embedder.name!r}")
        self.embedders[embedder.name] = embedder

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

    def authenticate(self, secret: str | None, *, defer_touch: bool = False) -> Workspace:
        """The workspace a key opens, or ``AuthenticationError`` (401) saying why.

        :param defer_touch: write ``last_used_at`` on a background thread, so that this
            call only reads the store (the HTTP adapter calls it on the event loop).
        """
        key, organization_id = self.keys.resolve(
            secret, touch_interval=self.settings.key_touch_interval, defer_touch=defer_touch
        )
        return Workspace(
            self,
            organization_id=organization_id,
            organization=key.organization,
            environment=key.environment,
            scopes=frozenset(key.scopes),
            key_id=key.id,
        )

    def workspace(
        self,
        organization: str,
        environment: str = "test",
        *,
        scopes: Iterable[str] = ("read", "write"),
        create: bool = True,
    ) -> Workspace:
        """A workspace for trusted host code and the CLI, without a key.

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
        return Workspace(
            self,
            organization_id=org.id,
            organization=org.name,
            environment=env,
            scopes=frozenset(check_scopes(scopes)),
        )

    def service(self, name: str, factory: Any) -> Any:
        """A per-core singleton built by ``factory(core)`` on first use (thread-safe)."""
        with self._lock:
            if name not in self._services:
                self._services[name] = factory(self)
            return self._services[name]

    # lifecycle ---------------------------------------------------------------

    def start(self) -> None:
        """Start background workers (webhook delivery, ingestion jobs) and plugins'. Idempotent.

        Ingestion jobs left by a stopped or crashed process are resumed (or, after
        ``ingest_job_attempts`` tries, marked failed) by the ingestion worker.
        """
        with self._lock:
            if self._started:
                return
            self._started = True
        if self.settings.start_workers:
            self.webhooks.start()
        self.ingest.start()
        self.pm.hook.agentcore_startup(core=self)

    def stop(self) -> None:
        """Stop background workers; pending work stays in the store for the next start."""
        with self._lock:
            if not self._started:
                return
            self._started = False
        self.webhooks.stop()
        self.ingest.stop()
        self.pm.hook.agentcore_shutdown(core=self)

    def close(self) -> None:
        """Stop workers and close the store."""
        self.stop()
        self.keys.close()
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
