"""Observer: what the core tells its metrics (and tests) about the work it does.

One protocol for every part: the engine's parts count what they do
(``observer("index.reload", 1)``), knowledge search reports how long searches took,
chat how each turn went, reranking when it failed. The core's ``Metrics`` implements all of it; a host passes a
plain ``(event, count)`` callable to ``AgentCore.open(observer=...)`` to see the counts,
and the core tells both (``Observers``).

The counted events: ``"index.reload"`` (a workspace's whole index loaded),
``"index.segment_load"`` (one of those loads mapped segment files instead of reading
the store), ``"index.catch_up"`` (a change-log delta applied), ``"index.own_write"``
(writes of this process added to its index without reading them back),
``"index.switch"`` (an index replaced by segment files another process wrote),
``"index.merge"`` (segment files written by maintenance) and ``"ingest.worker_start"``
(an ingestion worker process started). Observers are called on the thread doing the
work: they must be quick and must not raise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from agentcore.schema import Usage

__all__ = ["Counts", "Observer", "Observers", "Unobserved", "observer_of", "unobserved"]

Counts = Callable[[str, int], object]
"""What a host may pass as an observer: told the counted events only."""


@runtime_checkable
class Observer(Protocol):
    """Told what the core does; names of events and models and error codes only, never
    a tenant's data."""

    def __call__(self, event: str, count: int) -> object:
        """``count`` more of ``event`` happened (see the module's list)."""
        ...

    def searched(self, seconds: float, queries: int) -> None:
        """``queries`` knowledge searches answered together took ``seconds``."""
        ...

    def answered(self, model: str, seconds: float, usage: Usage | None) -> None:
        """A chat turn answered by ``model`` took ``seconds`` and ``usage`` tokens."""
        ...

    def chat_failed(self, model: str, code: str) -> None:
        """A call to chat model ``model`` failed with error ``code``."""
        ...

    def rerank_failed(self, reranker: str, code: str) -> None:
        """A call to ``reranker`` failed with ``code``; the search kept its first order."""
        ...


class Unobserved:
    """An observer told nothing: every call does nothing."""

    def __call__(self, event: str, count: int) -> None:
        """Nothing."""

    def searched(self, seconds: float, queries: int) -> None:
        """Nothing."""

    def answered(self, model: str, seconds: float, usage: Usage | None) -> None:
        """Nothing."""

    def chat_failed(self, model: str, code: str) -> None:
        """Nothing."""

    def rerank_failed(self, reranker: str, code: str) -> None:
        """Nothing."""


unobserved = Unobserved()
"""The default observer of every part: nothing is told (it holds no state)."""


class _Counting(Unobserved):
    """A host's ``(event, count)`` callable as an observer: told the counts only."""

    def __init__(self, counts: Counts) -> None:
        self._counts = counts

    def __call__(self, event: str, count: int) -> None:
        """Tell the host's callable."""
        self._counts(event, count)


def observer_of(observer: Observer | Counts | None) -> Observer:
    """``observer`` as an ``Observer``: a plain callable is told the counts only."""
    if observer is None:
        return unobserved
    if isinstance(observer, Observer):
        return observer
    return _Counting(observer)


class Observers:
    """Several observers told the same things, in turn (the core's metrics and its
    host's). More may be added once the parts that tell them are built."""

    def __init__(self, *observers: Observer) -> None:
        self._observers = list(observers)

    def add(self, observer: Observer) -> None:
        """Tell ``observer`` too from now on."""
        self._observers.append(observer)

    def __call__(self, event: str, count: int) -> None:
        """Tell each observer."""
        for observer in self._observers:
            observer(event, count)

    def searched(self, seconds: float, queries: int) -> None:
        """Tell each observer."""
        for observer in self._observers:
            observer.searched(seconds, queries)

    def answered(self, model: str, seconds: float, usage: Usage | None) -> None:
        """Tell each observer."""
        for observer in self._observers:
            observer.answered(model, seconds, usage)

    def chat_failed(self, model: str, code: str) -> None:
        """Tell each observer."""
        for observer in self._observers:
            observer.chat_failed(model, code)

    def rerank_failed(self, reranker: str, code: str) -> None:
        """Tell each observer."""
        for observer in self._observers:
            observer.rerank_failed(reranker, code)
