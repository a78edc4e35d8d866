"""Built-in plugin: the embedded SQLite store for paths, ``:memory:`` and ``sqlite:///``."""

from __future__ import annotations

from agentcore.config import Settings
from agentcore.hookspecs import hookimpl
from agentcore.storage.base import Store
from agentcore.storage.sqlite import SQLiteStore, path_for_url


@hookimpl(trylast=True)
def agentcore_open_store(url: str, settings: Settings) -> Store | None:
    """Open a SQLite store when ``url`` is a path or a ``sqlite:`` URL."""
    path = path_for_url(url)
    return SQLiteStore.open(path) if path is not None else None
