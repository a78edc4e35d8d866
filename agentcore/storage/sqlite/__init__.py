"""The embedded SQLite store: the default backend, one file (or ``:memory:``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

from agentcore.storage.base import Checkpointing, ReopenableStore
from agentcore.storage.sql.dialect import SQLITE
from agentcore.storage.sql.store import SQLStore
from agentcore.storage.sqlite.connection import Database
from agentcore.storage.sqlite.migrations import migrations

__all__ = ["SQLiteStore", "path_for_url"]


class SQLiteStore(SQLStore, ReopenableStore, Checkpointing):
    """Everything agentcore keeps, in one SQLite database with WAL and migrations."""

    dialect = SQLITE
    shared_by_nodes = False  # one machine's processes; `serve --workers` opts into "store"

    def __init__(self, path: str) -> None:
        super().__init__()
        self.db: Database = Database(path)
        self.url = path

    @classmethod
    def open(cls, path: str | Path) -> SQLiteStore:
        """Open (creating if needed) and migrate the database at ``path``."""
        store = cls(str(path))
        store.migrate()
        return store

    def reopener(self) -> Callable[[], SQLiteStore] | None:
        if self.url == ":memory:":
            return None
        return functools.partial(SQLiteStore, self.url)

    def migrate(self) -> None:
        """Apply pending migrations in one ``BEGIN IMMEDIATE``, so concurrent openers queue."""
        with self.db.write() as conn:
            migrations.apply(self.db.utils(conn))

    @property
    def checkpoint_interval(self) -> float | None:
        return self.db.checkpoint_interval

    def checkpoint(self) -> bool:
        # folds committed WAL frames into the database file, if any were committed
        return self.db.checkpoint()


def path_for_url(url: str) -> str | None:
    """The SQLite path a store URL names, or ``None`` if the URL is for another store
    or names no path (``""``, ``sqlite:///``: SQLite would open a temporary database)."""
    if url in ("", "sqlite:///"):
        return None
    if url == ":memory:" or url == "sqlite://" or url == "sqlite:///:memory:":
        return ":memory:"
    if url.startswith("sqlite:///"):
        return url[len("sqlite:///") :]
    if "://" in url:
        return None
    return url
