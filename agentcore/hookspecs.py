"""The pluggy hook specifications of agentcore: the seams plugins fill.

Built-in features register through these same hooks (see ``agentcore.plugins``);
third-party plugins are found through the ``agentcore`` entry-point group.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import pluggy

if TYPE_CHECKING:
    import argparse

    from pydantic_settings import BaseSettings

    from agentcore._background import Runtime
    from agentcore._workspace_services import WorkspaceServices
    from agentcore.chat_models import ChatModel
    from agentcore.config import Settings
    from agentcore.events import EventBus
    from agentcore.knowledge.embedders import Embedder
    from agentcore.knowledge.ocr import OcrEngine
    from agentcore.knowledge.rerankers import Reranker
    from agentcore.storage.base import Store

PROJECT = "agentcore"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@runtime_checkable
class PluginHost(Protocol):
    """The core a lifecycle hook or a command is given: an ``AgentCore``.

    Spelt as a protocol (what ``AgentCore`` offers plugins) so that these specifications
    sit below the core in the import graph: the core calls the hooks, the hooks name
    no module above them. A plugin may annotate its own hook with ``AgentCore``.
    """

    @property
    def settings(self) -> Settings:
        """The settings in force (the core's and every plugin's)."""
        ...

    @property
    def store(self) -> Store:
        """The store the core opened."""
        ...

    @property
    def events(self) -> EventBus:
        """The event bus: in-process listeners, registered kinds."""
        ...

    @property
    def runtime(self) -> Runtime:
        """Every loop, pool and worker of the core: a plugin may declare its own."""
        ...

    def workspace(
        self,
        organization: str,
        environment: str = "test",
        *,
        scopes: Iterable[str] = ("read", "write"),
        create: bool = True,
    ) -> WorkspaceServices:
        """A workspace with its services, without a key."""
        ...


@hookspec
def agentcore_register_settings(register: Callable[[str, type[BaseSettings]], None]) -> None:
    """Declare a plugin's own settings by calling ``register(namespace, model)``.

    Called once by ``AgentCore.open``, after plugins are loaded and before any other
    hook (so the store and every later hook see the result). ``namespace`` is the
    plugin's short lower-case name (letters and digits, e.g. ``"openai"``), unique
    among plugins; ``model`` is a ``pydantic_settings.BaseSettings`` subclass (e.g.
    of ``agentcore.config.PluginSettings``) whose ``env_prefix`` is
    ``AGENTCORE_<NAMESPACE>_``. Its field ``x`` is then read from the variable
    ``AGENTCORE_<NAMESPACE>_X``, from the ``.env`` file, or from the keyword argument
    ``AgentCore.open(..., <namespace>_x=...)``; a bad value stops ``AgentCore.open``
    with a ``pydantic.ValidationError`` naming ``<namespace>_x`` and the plugin.
    With ``env_prefix="AGENTCORE_"`` the settings keep their bare names
    (``AGENTCORE_X``, ``x=...``), and one the core or another plugin also names stops
    ``AgentCore.open`` with a ``ValueError`` (the HTTP adapter declares its limits so,
    under the names they had as the core's). Other hooks read the validated instance
    with ``settings.plugin(Model)``.

    :param register: callback taking the namespace and the settings model class.
    """


@hookspec(firstresult=True)
def agentcore_open_store(url: str, settings: Settings) -> Store | None:
    """Open the store that handles ``url``.

    Called once by ``AgentCore.open``. Return a ready ``Store`` (migrations applied)
    when this plugin handles the URL's scheme, else ``None``; the first non-``None``
    result wins. The built-in SQLite store handles plain paths, ``:memory:`` and
    ``sqlite:///path`` URLs. A store that another process can open again
    (``storage.base.ReopenableStore``) lets uploads be ingested in worker processes;
    without it they are ingested on a thread of the core's process.

    :param url: what the host passed to ``AgentCore.open``.
    :param settings: the core's settings.
    :return: a ``Store`` or ``None``.
    """


@hookspec
def agentcore_register_embedders(register: Callable[[Embedder], None], settings: Settings) -> None:
    """Register embedders by calling ``register(embedder)`` once per embedder.

    Called once when the core starts. ``embedder.name`` must be unique; the core's
    ``settings.embedder`` picks which one indexes the knowledge core.

    :param register: callback taking an object implementing ``Embedder``.
    :param settings: the core's settings; a plugin's own (base URLs, keys, model
        names) are ``settings.plugin(Model)``.
    """


@hookspec
def agentcore_register_chat_models(
    register: Callable[[ChatModel], None], settings: Settings
) -> None:
    """Register chat models by calling ``register(model)`` once per model.

    Called once when the core starts. An agent's ``model`` field names one of them;
    ``settings.default_chat_model`` is used when it names none. A model that also has
    ``stream(request)`` (``StreamingChatModel``) streams its answers; any other is
    streamed as one delta.

    :param register: callback taking an object implementing ``ChatModel``.
    :param settings: the core's settings.
    """


@hookspec
def agentcore_register_rerankers(register: Callable[[Reranker], None], settings: Settings) -> None:
    """Register rerankers by calling ``register(reranker)`` once per reranker.

    Called once when the core starts. ``reranker.name`` must be unique; the core's
    ``settings.reranker`` picks the one searches with ``rerank`` use (unset: ``http``,
    the built-in ``/rerank`` client, when ``AGENTCORE_RERANKER_URL`` is set, else the
    only one registered). A reranker that raises or hangs is logged and counted, and
    the search keeps its first order.

    :param register: callback taking an object implementing
        ``agentcore.knowledge.rerankers.Reranker``.
    :param settings: the core's settings; a plugin's own are ``settings.plugin(Model)``.
    """


@hookspec
def agentcore_register_ocr(register: Callable[[OcrEngine], None], settings: Settings) -> None:
    """Register OCR engines by calling ``register(engine)`` once per engine.

    Called once when the core starts, and once in each ingestion worker process.
    ``engine.name`` must be unique; the core's ``settings.ocr`` picks the one that reads
    scanned PDF pages (unset: none does). Register an engine only where it can run (the
    built-in ``tesseract`` registers when the ``tesseract`` command is on ``PATH``): a
    core whose ``ocr`` names an engine no plugin registered does not open.

    :param register: callback taking an object implementing
        ``agentcore.knowledge.ocr.OcrEngine``.
    :param settings: the core's settings; a plugin's own are ``settings.plugin(Model)``.
    """


@hookspec
def agentcore_register_event_kinds(register: Callable[[str, str], None]) -> None:
    """Register extra event kinds by calling ``register(kind, description)``.

    Called once when the core starts. Kinds look like ``noun.verb``; the built-in
    ones are ``agent.action``, ``agent.handoff`` and ``agent.error``. Only
    registered kinds can be published or subscribed to by webhooks.

    :param register: callback taking the kind and a one-line description.
    """


@hookspec(firstresult=True)
def agentcore_run_tool(
    workspace: WorkspaceServices, agent_id: str, name: str, arguments: dict[str, Any]
) -> Any | None:
    """Run a tool that an agent's model asked for.

    Called during a chat turn for each tool call the model makes (not for the
    built-in ``handoff_to_human`` tool). Return the tool's result (anything
    JSON-serialisable, or a string), which is fed back to the model; return ``None``
    when this plugin does not run tools of that name. The first non-``None`` result
    wins. With no implementation answering, the call is reported as an
    ``agent.action`` event and the model is told the tool is not available here.

    :param workspace: the calling workspace (organization, environment, scopes) with
        its services (``workspace.publish``, ``workspace.knowledge``, ...).
    :param agent_id: the agent whose model called the tool.
    :param name: the tool's name, one of the agent's ``tools``.
    :param arguments: the arguments the model gave, already parsed from JSON.
    :return: the result, or ``None`` to pass.
    """


@hookspec
def agentcore_startup(core: PluginHost) -> None:
    """Called when the core's background workers start (``AgentCore.start``).

    Use it to start a plugin's own workers. Must return quickly.

    :param core: the ``AgentCore`` being started.
    """


@hookspec
def agentcore_shutdown(core: PluginHost) -> None:
    """Called when the core's background workers stop (``AgentCore.stop``/``close``).

    Stop what ``agentcore_startup`` started; must return within a few seconds.

    :param core: the ``AgentCore`` being stopped.
    """


@hookspec
def agentcore_register_commands(
    register: Callable[
        [str, Callable[[PluginHost, argparse.Namespace], int], str], argparse.ArgumentParser
    ],
) -> None:
    """Add subcommands to the ``agentcore`` command line by calling ``register(name,
    run, help)`` once per command.

    Called once each time the CLI builds its argument parser, before any core is
    opened, on the built-in plugins and those of the ``agentcore`` entry points (the
    HTTP adapter adds ``serve`` this way). ``register`` returns the command's
    ``argparse`` parser: add its arguments to it. When the command is chosen, the CLI
    opens the core on ``--db`` and calls ``run(core, args)``; its return value is the
    exit status (0 done, 1 failed, 2 bad arguments), and it may raise
    ``AgentCoreError`` (printed as one line). Keep the plugin's module importable
    without the command's own dependencies: import them inside ``run``.

    :param register: callback taking the command's name, its ``run`` function and a
        one-line help text; a name that is taken already raises ``ValueError``.
    """
