"""The plugin manager of a core: hookspecs, built-in plugins, entry points, the host's.

``AgentCore.open`` makes one; an ingestion worker process makes the same one to find
the same embedders, and the CLI one to find its commands and settings.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol, TypeVar

import pluggy
from pydantic_settings import BaseSettings

import agentcore.hookspecs as hookspecs
from agentcore.knowledge.ocr import OcrUnavailable
from agentcore.plugins import DEFAULT_PLUGINS

if TYPE_CHECKING:
    from agentcore.config import Settings
    from agentcore.knowledge.embedders import Embedder
    from agentcore.knowledge.ocr import OcrEngine
    from agentcore.knowledge.rerankers import Reranker

__all__ = [
    "configured_ocr",
    "make_plugin_manager",
    "plugin_settings_models",
    "registered_embedders",
    "registered_ocr_engines",
    "registered_rerankers",
]


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
        for entry_point in _installed_plugins():
            if pm.get_plugin(entry_point.name) is None and not pm.is_blocked(entry_point.name):
                pm.register(entry_point.load(), name=entry_point.name)
    for plugin in plugins:
        if isinstance(plugin, str):
            plugin = importlib.import_module(plugin)
        pm.register(plugin)
    pm.check_pending()
    return pm


@functools.cache
def _installed_plugins() -> tuple[importlib.metadata.EntryPoint, ...]:
    """The ``agentcore`` entry points of the installed distributions, read once a process:
    reading every distribution's metadata costs tens of milliseconds, and a process may
    open many cores (a plugin installed later is found by the next process)."""
    return tuple(importlib.metadata.entry_points(group=hookspecs.PROJECT))


def plugin_settings_models(pm: pluggy.PluginManager) -> dict[str, type[BaseSettings]]:
    """The settings models plugins declare through ``agentcore_register_settings``."""
    models: dict[str, type[BaseSettings]] = {}

    def register(namespace: str, model: type[BaseSettings]) -> None:
        if namespace in models:
            raise ValueError(f"two plugins declare settings named {namespace!r}")
        if not (isinstance(model, type) and issubclass(model, BaseSettings)):
            raise TypeError(f"settings of plugin {namespace!r} must be a BaseSettings class")
        models[namespace] = model

    pm.hook.agentcore_register_settings(register=register)
    return models


def registered_embedders(
    pm: pluggy.PluginManager,
    settings: Settings,
    add: Callable[[Embedder], None] | None = None,
) -> dict[str, Embedder]:
    """The embedders plugins register (``agentcore_register_embedders``), by name.

    :param add: also told of each one as it is registered.
    :raises ValueError: two embedders share a name.
    """
    return _by_name(pm.hook.agentcore_register_embedders, settings, "embedders", add)


def registered_rerankers(pm: pluggy.PluginManager, settings: Settings) -> dict[str, Reranker]:
    """The rerankers plugins register (``agentcore_register_rerankers``), by name.

    :raises ValueError: two rerankers share a name.
    """
    return _by_name(pm.hook.agentcore_register_rerankers, settings, "rerankers")


def registered_ocr_engines(pm: pluggy.PluginManager, settings: Settings) -> dict[str, OcrEngine]:
    """The OCR engines plugins register (``agentcore_register_ocr``), by name.

    :raises ValueError: two engines share a name.
    """
    return _by_name(pm.hook.agentcore_register_ocr, settings, "OCR engines")


def configured_ocr(pm: pluggy.PluginManager, settings: Settings) -> OcrEngine | None:
    """The OCR engine ``settings.ocr`` names (``None`` when it names none).

    :raises OcrUnavailable: no plugin registered that engine, or Pillow (which turns a
        page's images into the PNGs engines read) is not installed.
    """
    if settings.ocr is None:
        return None
    engines = registered_ocr_engines(pm, settings)
    engine = engines.get(settings.ocr)
    if engine is None:
        known = ", ".join(sorted(engines)) or "none"
        hint = (
            " The built-in tesseract engine registers when the tesseract command is on PATH"
            " (e.g. apt-get install tesseract-ocr)."
            if settings.ocr == "tesseract"
            else ""
        )
        raise OcrUnavailable(
            f"The configured OCR engine {settings.ocr!r} is not registered"
            f" (registered: {known}).{hint}"
        )
    if importlib.util.find_spec("PIL") is None:
        raise OcrUnavailable(
            "OCR needs Pillow to read a PDF's images: pip install 'agentcore-service[ocr]'."
        )
    return engine


class _Named(Protocol):
    name: str


_N = TypeVar("_N", bound=_Named)


def _by_name(
    hook: Callable[..., object],
    settings: Settings,
    kind: str,
    add: Callable[[_N], None] | None = None,
) -> dict[str, _N]:
    """What the plugins register through ``hook(register=, settings=)``, by name; two of
    one name are a ``ValueError`` naming ``kind``."""
    found: dict[str, _N] = {}

    def register(item: _N) -> None:
        if item.name in found:
            raise ValueError(f"two {kind} are named {item.name!r}")
        found[item.name] = item
        if add is not None:
            add(item)

    hook(register=register, settings=settings)
    return found
