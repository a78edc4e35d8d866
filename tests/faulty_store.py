"""Fault injection for tests: a real SQLite store whose chosen methods fail or wait.

Opened through the public store hook (``AgentCore.open("faulty:<path>",
plugins=[plugin])``), so the core under test is wired exactly as in production; only
the named methods misbehave, and only while told to:

    plugin = FaultyStorePlugin()
    core = AgentCore.open(f"faulty:{tmp_path / 'a.db'}", plugins=[plugin])
    store = plugin.stores[-1]
    store.fail("next_due_at", "claim_due_deliveries")   # raise ServiceUnavailable
    store.recover()
    gate = store.gate("claim_due_deliveries")           # the next call waits for gate.open()
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from agentcore import hookimpl
from agentcore.errors import ServiceUnavailable
from agentcore.storage.sqlite import SQLiteStore

PREFIX = "faulty:"


class Gate:
    """Holds the calls of one method until ``open()``; ``entered`` is set by the first."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self._open = threading.Event()

    def open(self) -> None:
        self._open.set()

    def pass_through(self) -> None:
        self.entered.set()
        self._open.wait(30)


class FaultyStore:
    """Delegates everything to ``inner``; methods named in ``fail`` raise, gated ones wait."""

    def __init__(self, inner: SQLiteStore) -> None:
        self.inner = inner
        self.failing: set[str] = set()
        self.failures: dict[str, int] = {}  # calls refused, by method
        self.gates: dict[str, Gate] = {}

    def fail(self, *methods: str) -> None:
        """From now on these methods raise ``ServiceUnavailable`` (a database restarting)."""
        self.failing.update(methods)

    def recover(self) -> None:
        self.failing.clear()

    def gate(self, method: str) -> Gate:
        gate = self.gates[method] = Gate()
        return gate

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.inner, name)
        if not callable(value):
            return value
        method: Callable[..., Any] = value

        def call(*args: Any, **kwargs: Any) -> Any:
            if name in self.failing:
                self.failures[name] = self.failures.get(name, 0) + 1
                raise ServiceUnavailable(
                    "The database is unavailable (injected); retry shortly.",
                    code="database_unavailable",
                )
            gate = self.gates.pop(name, None)
            if gate is not None:
                gate.pass_through()
            return method(*args, **kwargs)

        return call


class FaultyStorePlugin:
    """Opens ``faulty:<sqlite path>`` URLs as ``FaultyStore``s (kept in ``stores``)."""

    def __init__(self) -> None:
        self.stores: list[FaultyStore] = []

    @hookimpl
    def agentcore_open_store(self, url: str, settings: Any) -> FaultyStore | None:
        if not url.startswith(PREFIX):
            return None
        store = FaultyStore(SQLiteStore.open(url[len(PREFIX) :]))
        self.stores.append(store)
        return store
